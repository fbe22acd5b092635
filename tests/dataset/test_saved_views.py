"""Saved views and copies: rows written as a new dataset, encoded bytes as stored, resumable after a kill."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.datasets import evals_of
from lakecompute.testing.internals import dataset_core
from tests.dataset.conftest import make_mixed, snapshot
from tests.dataset.test_branches import SCRIPT, with_pending
from tests.reliability.reliability_helpers import script_env

N_JPEG = 10_000


def jpegs(path: str | Path, n: int, storage_options: dict[str, Any] | None = None) -> lc.Dataset:
    """``n`` random 16x16 RGB images stored as JPEG, with class labels and a caption each."""
    rng = np.random.default_rng(0)
    ds = lc.empty(str(path), overwrite=True, storage_options=storage_options)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="jpeg")
        ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
        ds.create_tensor("caption", htype="text")
        ds.info["source"] = "synthetic"
    ds.extend(
        {
            "images": list(rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8)),
            "labels": rng.integers(0, 2, n),
            "caption": [f"image {i}" for i in range(n)],
        }
    )
    return ds


def stored_bytes(ds: lc.Dataset, name: str, rows: Any) -> list[bytes]:
    """The stored (encoded) bytes of rows of an encoded tensor."""
    encoded = dataset_core(ds).reader(name).read_encoded_at(np.asarray(rows, dtype=np.int64))
    return [e.blob for e in encoded]  # type: ignore[misc]


def test_a_saved_view_holds_the_same_encoded_bytes(tmp_path: Path) -> None:
    """view.save copies each JPEG byte for byte, with the source's tensors, class names and info."""
    src = jpegs(tmp_path / "src", 300)
    view = src.filter(src.labels.numpy() == 1)
    out = view.save(str(tmp_path / "dogs"), progressbar=False)
    rows = view.positions
    assert len(out) == len(rows) > 100
    assert stored_bytes(out, "images", range(len(rows))) == stored_bytes(src, "images", rows)
    assert out.images[5].tobytes() == src.images[int(rows[5])].tobytes()
    assert out.caption.text() == [f"image {i}" for i in rows]
    assert out.labels.info.class_names == ["cat", "dog"]
    assert (out.images.sample_compression, out.info["source"]) == ("jpeg", "synthetic")
    messages = [e["message"] for e in out.log()]
    assert messages == ["create", f"create tensors like {src.path}", f"copy of {src.path} v{src.version}"]
    assert out.log()[-1]["origin"]["inputs"]["version"] == src.version


def test_a_copy_of_every_kind_of_tensor(tmp_path: Path) -> None:
    """lc.copy of a view over numbers, images, labels, json, text and ragged tensors reads back the same."""
    src = make_mixed(tmp_path / "mixed", n=9)
    out = lc.copy(src[[8, 2, 5]], str(tmp_path / "out"), progressbar=False)
    assert snapshot(out) == snapshot(src[[8, 2, 5]])
    whole = lc.copy(str(tmp_path / "mixed"), str(tmp_path / "whole"), progressbar=False)
    assert snapshot(whole) == snapshot(src)


def test_a_copy_commits_checkpoints_and_a_rerun_writes_nothing(tmp_path: Path) -> None:
    """Checkpoints every checkpoint_interval rows; the same copy run again warns and writes nothing."""
    src = jpegs(tmp_path / "src", 50)
    out = lc.copy(src[::2], str(tmp_path / "out"), progressbar=False, checkpoint_interval=10)
    statuses = [e.get("eval", {}).get("status") for e in out.log()]
    assert statuses[-3:] == ["running", "running", "done"]
    assert [e["samples"]["images"] for e in out.log()[2:]] == [10, 20, 25]
    with pytest.warns(lc.LakeComputeWarning, match="already completed into"):
        again = lc.copy(src[::2], str(tmp_path / "out"), progressbar=False)
    assert again.version == out.version


def test_a_copy_refuses_what_it_should_not_touch(tmp_path: Path) -> None:
    """Another dataset at dest, dest = src, and pending changes are refused; overwrite=True replaces."""
    src = jpegs(tmp_path / "src", 20)
    other = lc.empty(str(tmp_path / "other"))
    other.create_tensor("z")
    other.z.append(1)
    with pytest.raises(lc.DatasetExistsError):
        src[:5].save(str(tmp_path / "other"), progressbar=False)
    assert len(lc.load(str(tmp_path / "other")).z) == 1
    out = src[:5].save(str(tmp_path / "other"), overwrite=True, progressbar=False)
    assert list(out.tensors) == ["images", "labels", "caption"]
    assert len(out) == 5
    with pytest.raises(lc.InvalidArgumentError, match="the destination is the source"):
        lc.copy(src, str(tmp_path / "src"), progressbar=False)
    with pytest.raises(lc.InvalidArgumentError, match="uncommitted changes"):
        with_pending(src, lambda: src[:2].save(str(tmp_path / "new"), progressbar=False), "caption", "x")
    with pytest.raises(lc.InvalidArgumentError, match="checkpoint_interval"):
        src.save(str(tmp_path / "new"), checkpoint_interval=0)


def test_a_copy_refuses_tensors_that_differ(tmp_path: Path) -> None:
    """An empty dataset at dest whose tensors differ from the source's (a dtype here) is refused."""
    src = lc.from_numpy(str(tmp_path / "src"), {"x": np.arange(4)})
    dest = lc.empty(str(tmp_path / "dest"))
    dest.create_tensor("x", dtype="int8")
    with pytest.raises(
        lc.InvalidArgumentError, match=r"differ from the source's \[\('x', 'generic', 'int64'"
    ):
        src.save(str(tmp_path / "dest"), progressbar=False)


def test_a_copy_fills_an_empty_dataset(tmp_path: Path) -> None:
    """A dataset with no samples and no history of copies at dest (made by lc.empty) is filled."""
    src = jpegs(tmp_path / "src", 10)
    lc.empty(str(tmp_path / "dest"))
    out = src[2:4].save(str(tmp_path / "dest"), progressbar=False)
    assert out.caption.text() == ["image 2", "image 3"]


def test_a_copy_shows_a_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With progressbar=True a tqdm bar counts the rows copied."""
    src = jpegs(tmp_path / "src", 30)
    src[::3].save(str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert "copy of" in err
    assert "10/10" in err


def test_a_saved_view_resumes_after_sigkill(tmp_path: Path) -> None:
    """A save of 10,000 JPEG rows killed part-way keeps whole checkpoints; the same call finishes it, each
    row written once and byte for byte the source's."""
    src = jpegs(tmp_path / "src", N_JPEG)
    dest = str(tmp_path / "copy")
    cmd = [sys.executable, str(SCRIPT), str(tmp_path / "src"), "save", "1", dest, "1000"]
    # SIGKILL before the 40th storage step: after a few of its ten checkpoints (a full run takes ~80).
    killed = subprocess.run(cmd, capture_output=True, text=True, env=script_env(LC_TEST_KILL_AT_STEP="40"))
    assert killed.returncode == -9, killed.stderr
    partial = lc.load(dest)
    done = len(partial)
    assert 0 < done < N_JPEG
    assert done % 1000 == 0
    assert stored_bytes(partial, "images", range(done)) == stored_bytes(src, "images", range(done))
    (record,) = evals_of(partial).records().values()
    assert (record.status, record.done, record.base_version) == ("running", done, 1)  # 1: the tensors
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = src.save(dest, progressbar=False, checkpoint_interval=1000)
    assert len(out.images) == len(out.labels) == len(out.caption) == N_JPEG
    assert stored_bytes(out, "images", range(N_JPEG)) == stored_bytes(src, "images", range(N_JPEG))
    np.testing.assert_array_equal(out.labels.numpy(), src.labels.numpy())
    assert out.caption.text() == src.caption.text()
    versions = [e["samples"]["images"] for e in out.log()[2:]]
    assert versions == list(range(1000, N_JPEG + 1, 1000))  # one commit per checkpoint, none repeated
