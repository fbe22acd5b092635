"""A copied folder (``cp -r``) is the same dataset until its history diverges (issue 39): then the same id
and version number hold other content, told apart by the version's content digest everywhere a dataset is
named (eval records, resume, the no-op rerun, pickled handles and views, snapshots, loader states)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.datasets import snapshot

N = 20
INTERVAL = 5


@lc.compute
def plus_one(sample_in: Any, sample_out: Any) -> None:
    sample_out.y.append(int(sample_in.x.numpy()) + 1)


@lc.compute
def plus_one_fails_at(sample_in: Any, sample_out: Any, bad: int) -> None:
    x = int(sample_in.x.numpy())
    if x == bad:
        raise ValueError(f"input {x} is bad")
    sample_out.y.append(x + 1)


def _source(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path))
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(N))
    return ds


def _out(path: Path) -> lc.Dataset:
    out = lc.empty(str(path))
    out.create_tensor("y", dtype="int64")
    return out


def _diverged(tmp_path: Path, side: bool = False) -> tuple[Path, Path]:
    """``src`` copied with ``cp -r`` to ``src2``, then one different commit on each: x[0] = 100 on src,
    x[0] = 200 on src2 (the same version number on both). ``side``: a branch ``side`` (x[1] = 7) is made
    before the copy."""
    src, src2 = tmp_path / "src", tmp_path / "src2"
    ds = _source(src)
    if side:
        ds.checkout("side", create=True)
        ds.x[1] = 7
        ds.checkout("main")
    shutil.copytree(src, src2, symlinks=True)
    a, b = lc.load(str(src)), lc.load(str(src2))
    a.x[0] = 100
    b.x[0] = 200
    assert (a.id, a.version) == (b.id, b.version)
    return src, src2


def test_an_eval_from_each_diverged_copy_into_one_output_runs_both(tmp_path: Path) -> None:
    """The acceptance case: the second eval is new input (it runs), not 'already completed'."""
    src, src2 = _diverged(tmp_path)
    out = _out(tmp_path / "out")
    plus_one().eval(lc.load(str(src)), out, progressbar=False)
    result = plus_one().eval(lc.load(str(src2)), out, progressbar=False)
    assert result.inputs == N
    ys = lc.load(str(tmp_path / "out")).y.numpy().tolist()
    assert ys == [101, *range(2, N + 1), 201, *range(2, N + 1)]
    assert lc.load(str(src)).digest != lc.load(str(src2)).digest
    inputs = lc.load(str(tmp_path / "out")).log()[-1]["eval"]["inputs"]
    assert inputs["digest"] == lc.load(str(src2)).digest
    assert inputs["path"] == str(src2)


def test_an_unfinished_eval_does_not_resume_over_a_diverged_copy(tmp_path: Path) -> None:
    """A checkpointed eval that failed reading src is not resumed over src2's other rows: refused, and
    rerun=True starts over on src2."""
    src, src2 = _diverged(tmp_path)
    out = _out(tmp_path / "out")
    with pytest.raises(lc.TransformError):
        plus_one_fails_at(bad=12).eval(
            lc.load(str(src)), out, checkpoint_interval=INTERVAL, progressbar=False
        )
    kept = lc.load(str(tmp_path / "out")).y.numpy().tolist()
    assert kept == [101, *range(2, 11)]
    with pytest.raises(lc.EvalConflictError, match="rerun=True"):
        plus_one_fails_at(bad=-1).eval(
            lc.load(str(src2)), out, checkpoint_interval=INTERVAL, progressbar=False
        )
    plus_one_fails_at(bad=-1).eval(
        lc.load(str(src2)), out, checkpoint_interval=INTERVAL, rerun=True, progressbar=False
    )
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [201, *range(2, N + 1)]


def test_a_copied_folder_keeps_working(tmp_path: Path) -> None:
    """Until it diverges, a copy is the same data: the same eval from it is a no-op rerun, a pickled handle
    or a loader state made on the original applies to it, and its versions read alike."""
    src, copy = tmp_path / "src", tmp_path / "copy"
    ds = _source(src)
    out = _out(tmp_path / "out")
    plus_one().eval(ds, out, progressbar=False)
    shutil.copytree(src, copy, symlinks=True)
    same = lc.load(str(copy))
    assert (same.id, same.version, same.digest) == (ds.id, ds.version, ds.digest)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        plus_one().eval(same, out, progressbar=False)
    assert len(lc.load(str(tmp_path / "out")).y) == N
    loader = ds.batches(4, tensors="x", shuffle=True, seed=1)
    first = [np.asarray(b["x"]).tolist() for _, b in zip(range(2), loader, strict=False)]
    again = same.batches(4, tensors="x", shuffle=True, seed=1)
    again.load_state_dict(loader.state_dict())
    rest = [np.asarray(b["x"]).tolist() for b in again]
    assert sorted(x for batch in first + rest for x in batch) == list(range(N))
    shutil.rmtree(src)
    shutil.move(str(copy), str(src))  # the copy moved into the original's place: still the same data
    assert pickle.loads(pickle.dumps(ds)).x.numpy().tolist() == list(range(N))


def test_pickles_and_snapshots_refuse_a_diverged_copy_in_place(tmp_path: Path) -> None:
    """A pickled handle, a pickled view and a workers' snapshot of src, opened after src's folder was
    replaced by the diverged copy: DatasetReplacedError naming the digests, never the copy's rows."""
    src, src2 = _diverged(tmp_path)
    ds = lc.load(str(src))
    blobs = [pickle.dumps(ds), pickle.dumps(ds[0:3])]
    snap = snapshot(ds[0:3])
    shutil.rmtree(src)
    shutil.move(str(src2), str(src))
    theirs = lc.load(str(src)).digest
    for blob in blobs:
        with pytest.raises(lc.DatasetReplacedError) as info:
            pickle.loads(blob)
        err = info.value
        assert (err.expected_id, err.found_id) == (ds.id, ds.id)
        assert (err.expected_digest, err.found_digest) == (ds.digest, theirs)
        assert "copy of the dataset whose history diverged" in str(err)
    with pytest.raises(lc.DatasetReplacedError, match="history diverged"):
        snap.open()
    out = _out(tmp_path / "out")
    with pytest.raises(lc.DatasetReplacedError):
        plus_one().eval(ds[0:3], out, num_workers=2, progressbar=False)  # the workers open the snapshot
    assert len(lc.load(str(tmp_path / "out")).y) == 0


def _write(ds: lc.Dataset, write: str) -> None:
    """One write to ``ds`` of the kind ``write`` names, committed."""
    if write == "append":
        ds.x.append(5)
    elif write == "with":
        with ds:
            ds.x.extend([5, 6])
    elif write == "eval":
        plus_one().eval(ds, ds, progressbar=False)
    else:
        ds.merge("side")


@pytest.mark.parametrize("write", ["append", "with", "eval", "merge"])
def test_a_live_handle_does_not_commit_onto_a_diverged_copy_in_place(tmp_path: Path, write: str) -> None:
    """A handle still open on src when src's folder was replaced by the diverged copy refuses its next
    commit (DatasetReplacedError naming the digests): it took the copy's next version number with the
    copy's version as parent, mixing the two histories. The folder keeps the copy's history as it was."""
    src, src2 = _diverged(tmp_path, side=write == "merge")
    ds = lc.load(str(src))
    shutil.rmtree(src)
    shutil.move(str(src2), str(src))
    theirs = lc.load(str(src))
    before = [(v["version"], v["parents"], v["samples"]) for v in theirs.log()]
    with pytest.raises(lc.DatasetReplacedError, match="history diverged") as info:
        _write(ds, write)
    assert (info.value.expected_digest, info.value.found_digest) == (ds.digest, theirs.digest)
    now = lc.load(str(src))
    assert [(v["version"], v["parents"], v["samples"]) for v in now.log()] == before
    assert now.x.numpy()[0] == 200


def test_a_loader_state_of_the_original_is_refused_on_a_diverged_copy(tmp_path: Path) -> None:
    """Resuming a loader over src2 with a state saved over src (same id and version): refused."""
    src, src2 = _diverged(tmp_path)
    loader = lc.load(str(src)).batches(4, tensors="x")
    next(iter(loader))
    state = loader.state_dict()
    assert state["dataset"]["digest"] == lc.load(str(src)).digest
    other = lc.load(str(src2)).batches(4, tensors="x")
    with pytest.raises(lc.InvalidArgumentError, match="digest="):
        other.load_state_dict(state)
    saved_before = {**state, "dataset": {k: v for k, v in state["dataset"].items() if k != "digest"}}
    other.load_state_dict(saved_before)  # a state saved before digests: known by id and version only
