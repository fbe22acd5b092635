"""A Hugging Face ``datasets.Dataset`` as data_in is recorded by its own fingerprint: reruns are no-ops,
checkpointed evals resume (after a kill -9 too); inputs without an identity warn at the call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched

datasets = pytest.importorskip("datasets")

N = 60
REPO = Path(__file__).resolve().parents[2]


@lc.compute
def scaled(row: dict[str, Any], sample_out: Any) -> None:
    sample_out.append({"y": np.int64(row["i"]) * 3, "name": str(row["name"])})


def _hf(n: int = N, offset: int = 0) -> Any:
    return datasets.Dataset.from_dict(
        {"i": list(range(offset, offset + n)), "name": [f"row {k}" for k in range(offset, offset + n)]}
    )


def _out(path: Path) -> lc.Dataset:
    out = lc.empty(str(path), overwrite=True)
    out.create_tensor("y", dtype="int64")
    out.create_tensor("name", htype="text")
    return out


def test_hf_dataset_rows_arrive_as_dicts_in_order(scheduler: Sched, tmp_path: Path) -> None:
    """Every row of the HF dataset reaches the function once, as a dict, in order, on every scheduler."""
    out = _out(tmp_path / "out")
    result = scaled().eval(_hf(), out, **scheduler.kw)
    assert result.inputs == N
    back = lc.load(str(tmp_path / "out"))
    assert back.y.numpy().tolist() == [3 * i for i in range(N)]
    assert list(back.name.text()) == [f"row {i}" for i in range(N)]


def test_hf_dataset_run_twice_is_a_noop_with_a_warning(tmp_path: Path) -> None:
    """The same cell run twice: the second eval writes nothing and says so (no rows appended twice)."""
    out = _out(tmp_path / "out")
    first = scaled().eval(_hf(), out, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        again = scaled().eval(_hf(), out, progressbar=False)  # a new object with the same content
    assert again.version == first.version
    assert len(lc.load(str(tmp_path / "out")).y) == N
    inputs = lc.load(str(tmp_path / "out")).log()[-1]["eval"]["inputs"]
    assert inputs == {"kind": "huggingface", "fingerprint": _hf()._fingerprint, "length": N}
    scaled().eval(_hf(offset=1), out, progressbar=False)
    other = lc.load(str(tmp_path / "out")).log()[-1]["eval"]["inputs"]
    assert other["fingerprint"] == _hf(offset=1)._fingerprint != inputs["fingerprint"]


def test_hf_dataset_with_other_content_runs_again(tmp_path: Path) -> None:
    """Other rows (or the same rows after a .map) have another fingerprint: the eval runs and appends."""
    out = _out(tmp_path / "out")
    scaled().eval(_hf(), out, progressbar=False)
    scaled().eval(_hf(offset=100), out, progressbar=False)
    mapped = _hf().map(lambda r: {"i": r["i"] + 1000}, load_from_cache_file=False)
    scaled().eval(mapped, out, progressbar=False)
    ys = lc.load(str(tmp_path / "out")).y.numpy().tolist()
    assert ys == [3 * i for i in range(N)] + [3 * i for i in range(100, 100 + N)] + [
        3 * i for i in range(1000, 1000 + N)
    ]


@lc.compute
def scaled_fails_at(row: dict[str, Any], sample_out: Any) -> None:
    """`scaled`, raising on the input the environment names (so the code, and the fingerprint, stay)."""
    if int(row["i"]) == int(os.environ.get("LC_TEST_HF_FAIL_AT", "-1")):
        raise RuntimeError("a flaky read")
    sample_out.append({"y": np.int64(row["i"]) * 3, "name": str(row["name"])})


def test_hf_dataset_with_checkpoints_resumes_after_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint_interval works with HF input (no FingerprintError): a failed run keeps its checkpoints and
    the rerun continues after them, every output once."""
    out = _out(tmp_path / "out")
    monkeypatch.setenv("LC_TEST_HF_FAIL_AT", "37")
    with pytest.raises(lc.TransformError, match=r"data_in\[37\]"):
        scaled_fails_at().eval(_hf(), out, checkpoint_interval=10, progressbar=False)
    assert len(lc.load(str(tmp_path / "out")).y) == 30
    monkeypatch.delenv("LC_TEST_HF_FAIL_AT")
    result = scaled_fails_at().eval(_hf(), out, checkpoint_interval=10, progressbar=False)
    assert result.resumed_from == 30
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [3 * i for i in range(N)]


SCRIPT = """
import os, signal, sys
import datasets, numpy as np
import lakecompute as lc

OUT, N, KILL_AT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
datasets.disable_progress_bars()


@lc.compute
def scaled(row, sample_out):
    if row["i"] == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 of the process running the eval
    sample_out.append({"y": np.int64(row["i"]) * 3, "name": str(row["name"])})


hf = datasets.Dataset.from_dict({"i": list(range(N)), "name": [f"row {k}" for k in range(N)]})
result = scaled().eval(hf, lc.load(OUT), checkpoint_interval=10, progressbar=False)
print("DONE", result.inputs, result.resumed_from, flush=True)
"""


def _run(tmp_path: Path, kill_at: int) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), str(N), str(kill_at)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


@pytest.mark.timeout(300)
def test_hf_dataset_eval_killed_and_resumed_in_a_subprocess(tmp_path: Path) -> None:
    """A script evaluating an HF dataset with checkpoints, SIGKILLed at input 43, run again in a new process:
    it resumes after the last checkpoint (40) and every output is written once."""
    _out(tmp_path / "out")
    killed = _run(tmp_path, kill_at=43)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [3 * i for i in range(40)]
    done = _run(tmp_path, kill_at=-1)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["DONE", str(N), "40"]
    back = lc.load(str(tmp_path / "out"))
    assert back.y.numpy().tolist() == [3 * i for i in range(N)]
    assert list(back.name.text()) == [f"row {i}" for i in range(N)]
    again = _run(tmp_path, kill_at=-1)  # a third run: the eval completed, nothing is written
    assert again.returncode == 0, again.stderr
    assert "already completed" in again.stderr
    assert len(lc.load(str(tmp_path / "out")).y) == N


class _TorchStyle:
    """A map-style dataset as torch users write one: __len__ and __getitem__, no identity."""

    def __len__(self) -> int:
        return 5

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i >= 5:
            raise IndexError(i)
        return {"i": i, "name": f"row {i}"}


def test_torch_dataset_input_warns_that_the_eval_is_not_recorded(tmp_path: Path) -> None:
    """A torch-style dataset has no identity: each eval warns at the call that a rerun appends, and a rerun
    does append (as warned)."""
    torch_data = pytest.importorskip("torch.utils.data")

    class Squares(torch_data.Dataset):  # type: ignore[misc, name-defined]
        def __len__(self) -> int:
            return 5

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"i": i, "name": f"row {i}"}

    out = _out(tmp_path / "out")
    for data in (Squares(), _TorchStyle()):
        with pytest.warns(lc.LakeComputeWarning, match=r"is not recorded in .*appends its outputs again"):
            scaled().eval(data, out, progressbar=False)
    assert len(lc.load(str(tmp_path / "out")).y) == 10


def test_generator_input_warns_and_cannot_checkpoint(tmp_path: Path) -> None:
    """A generator warns that the eval is not recorded; with checkpoint_interval it is refused, naming the
    ways out."""
    out = _out(tmp_path / "out")
    rows = ({"i": i, "name": "g"} for i in range(3))
    with pytest.warns(lc.LakeComputeWarning, match="is not recorded"):
        scaled().eval(rows, out, progressbar=False)
    with pytest.raises(lc.FingerprintError, match=r"data_in, a generator, is a stream .*list\(data_in\)"):
        scaled().eval(
            ({"i": i, "name": "g"} for i in range(3)), out, checkpoint_interval=2, progressbar=False
        )


def test_hf_streaming_dataset_runs_unrecorded_and_refuses_checkpoints(tmp_path: Path) -> None:
    """A streaming datasets.IterableDataset (no fingerprint to record) runs in order with the warning that
    a rerun appends; with checkpoint_interval it is refused before anything is written, naming it and
    the ways out (streaming=False among them)."""
    out = _out(tmp_path / "out")
    with pytest.warns(lc.LakeComputeWarning, match="is not recorded"):
        scaled().eval(_hf(5).to_iterable_dataset(), out, progressbar=False)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [0, 3, 6, 9, 12]
    version = lc.load(str(tmp_path / "out")).version
    with pytest.raises(lc.FingerprintError) as info:
        scaled().eval(_hf(5).to_iterable_dataset(), out, checkpoint_interval=2, progressbar=False)
    message = str(info.value)
    assert message.startswith("data_in, a datasets.IterableDataset (streaming), is a stream")
    assert "without streaming=True" in message
    assert "run without checkpoint_interval" in message
    assert lc.load(str(tmp_path / "out")).version == version


@pytest.mark.parametrize("streaming", [False, True], ids=["DatasetDict", "IterableDatasetDict"])
def test_hf_dict_of_splits_is_refused_naming_them(tmp_path: Path, streaming: bool) -> None:
    """A DatasetDict (what load_dataset returns without split=) is refused naming its splits and the one
    to pass, instead of being called a single sample; nothing is written."""
    splits = {"train": _hf(4), "test": _hf(2)}
    if streaming:
        data = datasets.IterableDatasetDict({k: v.to_iterable_dataset() for k, v in splits.items()})
    else:
        data = datasets.DatasetDict(splits)
    out = _out(tmp_path / "out")
    version = out.version
    with pytest.raises(lc.InvalidTypeError) as info:
        scaled().eval(data, out, progressbar=False)
    kind = type(data).__name__
    assert str(info.value) == (
        f"data_in is a datasets.{kind} of the splits ['train', 'test'], not one dataset. Pass one split, "
        "e.g. data_in['train'], and run an eval per split you need."
    )
    assert lc.load(str(tmp_path / "out")).version == version
