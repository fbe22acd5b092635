"""Type decisions stay consistent: across checkpoints, under ignore_errors, and when padding inputs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out

FAIL = "LC_TEST_DECISIONS_FAIL_AT"  # read at run time: arming it does not change the eval's fingerprint


@lc.compute
def ints_then_halves(sample_in: Any, sample_out: Any) -> None:
    i = int(sample_in)
    if i == int(os.environ.get(FAIL, "-1")):
        raise RuntimeError(f"input {i} fails once")
    sample_out.x.append(i if i < 100 else i + 0.5)


@lc.compute
def one_matrix(sample_in: Any, sample_out: Any) -> None:
    i = int(sample_in)
    sample_out.x.append(np.full((2, 2), i) if i == 7 else np.full(3, i))


@lc.compute
def copy_both(sample_in: Any, sample_out: Any) -> None:
    sample_out.append({"a": sample_in.a.numpy(), "b": sample_in.b.numpy()})


def test_checkpoints_never_narrow_a_generic_dtype(scheduler: Sched, tmp_path: Path) -> None:
    """Ints first, floats after a checkpoint: the final dtype is float64 and no value is truncated."""
    out = make_out(tmp_path / "out", x={})
    ints_then_halves().eval(list(range(102)), out, checkpoint_interval=10, **scheduler.kw)
    again = lc.load(str(tmp_path / "out"))
    assert again.x.dtype == np.float64
    assert again.x.numpy()[-4:].tolist() == [98.0, 99.0, 100.5, 101.5]
    # A checkpoint before the first float holds the ints it saw, read back exactly.
    early = next(e["version"] for e in again.log() if e["message"].endswith("checkpoint at 50"))
    assert lc.load(str(tmp_path / "out"), version=early).x.numpy().tolist() == list(range(50))


def test_checkpoints_never_narrow_after_a_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed run widens the dtype its interrupted run committed as int64."""
    out = make_out(tmp_path / "out", x={})
    monkeypatch.setenv(FAIL, "55")
    with pytest.raises(lc.TransformError, match="first 50 inputs are kept"):
        ints_then_halves().eval(list(range(102)), out, checkpoint_interval=10, progressbar=False)
    assert lc.load(str(tmp_path / "out")).x.dtype == np.int64
    monkeypatch.delenv(FAIL)
    result = ints_then_halves().eval(list(range(102)), out, checkpoint_interval=10, progressbar=False)
    assert result.resumed_from == 50
    again = lc.load(str(tmp_path / "out"))
    assert again.x.dtype == np.float64
    assert again.x.numpy().tolist() == [*range(100), 100.5, 101.5]


def test_ignore_errors_skips_a_sample_of_another_rank(scheduler: Sched, tmp_path: Path) -> None:
    """Under ignore_errors, the one 2-D output among 1-D ones is skipped and reported with its index."""
    out = make_out(tmp_path / "out", x={"dtype": "int64"})
    result = one_matrix().eval(list(range(20)), out, ignore_errors=True, **scheduler.kw)
    assert result.failed_indices == [7]
    assert "same number of dimensions" in result.failed[0].message
    again = lc.load(str(tmp_path / "out"))
    assert [int(v[0]) for v in again.x.numpy()] == [i for i in range(20) if i != 7]


def test_pad_data_in_pads_scalars_with_a_storable_zero(scheduler: Sched, tmp_path: Path) -> None:
    """A padded dataset can be copied: missing scalars read as 0, missing vectors as empty arrays."""
    src = make_out(tmp_path / "src", a={"dtype": "int32"}, b={"dtype": "int32"})
    src.a.extend(np.arange(5, dtype="int32"))
    src.b.extend(np.arange(3, dtype="int32") + 10)
    out = make_out(tmp_path / "out", a={"dtype": "int32"}, b={"dtype": "int32"})
    result = copy_both().eval(src, out, pad_data_in=True, **scheduler.kw)
    assert result.inputs == 5
    again = lc.load(str(tmp_path / "out"))
    assert again.b.numpy().tolist() == [10, 11, 12, 0, 0]
    assert again.a.numpy().tolist() == [0, 1, 2, 3, 4]
