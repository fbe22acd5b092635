"""In place with skip_ok=True, unwritten tensors keep their content whatever the first inputs do: which
tensors are written is what the whole eval writes, and the whole is checked to line up before the commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.datasets import Decisions, evals_of
from tests.compute.compute_helpers import Sched

N = 300


def _two_columns(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("y", dtype="int64")
        ds.extend({"x": np.arange(N), "y": 10 * np.arange(N)})
    return ds


def _unchanged(path: Path) -> None:
    again = lc.load(str(path))
    np.testing.assert_array_equal(again.x.numpy(), np.arange(N))
    np.testing.assert_array_equal(again.y.numpy(), 10 * np.arange(N))


@lc.compute
def writes_nothing(sample_in: Any, sample_out: Any) -> None:
    """Return None for every row, writing nothing."""


@lc.compute
def writes_x_from_200(sample_in: Any, sample_out: Any) -> None:
    """Write x (negated) for the inputs from 200 on only."""
    i = int(sample_in.x.numpy())
    if i >= 200:
        sample_out.x.append(-i)


@lc.compute
def negate_x(sample_in: Any, sample_out: Any) -> None:
    sample_out.x.append(-int(sample_in.x.numpy()))


def test_in_place_eval_writing_nothing_keeps_every_tensor(scheduler: Sched, tmp_path: Path) -> None:
    """skip_ok=True and None for every row: x and y keep all their rows (they used to be emptied), the
    eval commits one version with the same content, and running it again is a no-op."""
    ds = _two_columns(tmp_path / "ds")
    before = ds.version
    result = writes_nothing().eval(ds, skip_ok=True, **scheduler.kw)
    assert result.inputs == N
    assert result.outputs == {"x": 0, "y": 0}
    _unchanged(tmp_path / "ds")
    assert lc.load(str(tmp_path / "ds")).version == result.version == before + 1
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        writes_nothing().eval(ds, skip_ok=True, **scheduler.kw)
    _unchanged(tmp_path / "ds")


def test_in_place_batched_eval_writing_nothing_keeps_every_tensor(tmp_path: Path) -> None:
    """The same in batches: nothing written, nothing lost."""
    ds = _two_columns(tmp_path / "ds")
    writes_nothing().eval(ds, skip_ok=True, batch_size=16, num_workers=2, progressbar=False)
    _unchanged(tmp_path / "ds")


def test_in_place_first_write_at_input_200_fails_there(scheduler: Sched, tmp_path: Path) -> None:
    """x first written at input 200 of 300: a TransformError at input 200 naming the rule, and nothing
    committed (it used to leave x with 100 rows and y with 0, silently)."""
    ds = _two_columns(tmp_path / "ds")
    before = ds.version
    with pytest.raises(lc.TransformError, match=r"first inputs wrote nothing") as info:
        writes_x_from_200().eval(ds, skip_ok=True, **scheduler.kw)
    assert info.value.index == 200
    assert "this input gave {'x': 1}" in str(info.value)
    assert isinstance(info.value.__cause__, lc.InvalidArgumentError)
    assert lc.load(str(tmp_path / "ds")).version == before
    _unchanged(tmp_path / "ds")


def test_in_place_written_tensor_replaced_and_unwritten_kept(scheduler: Sched, tmp_path: Path) -> None:
    """The ordinary case still holds: x written for every input is replaced, y is kept as it was."""
    ds = _two_columns(tmp_path / "ds")
    negate_x().eval(ds, skip_ok=True, **scheduler.kw)
    again = lc.load(str(tmp_path / "ds"))
    np.testing.assert_array_equal(again.x.numpy(), -np.arange(N))
    np.testing.assert_array_equal(again.y.numpy(), 10 * np.arange(N))


def test_in_place_without_skip_ok_writing_nothing_is_a_filter_keeping_nothing(tmp_path: Path) -> None:
    """Without skip_ok the outputs are the new rows: an eval that writes nothing empties the dataset (the
    documented rule; the version before stays readable)."""
    ds = _two_columns(tmp_path / "ds")
    before = ds.version
    writes_nothing().eval(ds, progressbar=False)
    again = lc.load(str(tmp_path / "ds"))
    assert (len(again.x), len(again.y)) == (0, 0)
    assert len(lc.load(str(tmp_path / "ds"), version=before).x) == N


def test_in_place_end_check_refuses_a_replaced_tensor_of_another_length(tmp_path: Path) -> None:
    """The check before the final commit: a replaced tensor without one value per input is refused with a
    TransformError naming it and the counts, and aborting leaves the dataset as it was."""
    ds = _two_columns(tmp_path / "ds")
    write = evals_of(ds).begin(None, label="negate_x", in_place=True)
    try:
        write.decide(Decisions({"x": 0}, ("x",)), replace_all=False)
        with pytest.raises(
            lc.TransformError, match=r"the tensors \['x'\] got \{'x': 0\} values for 300 inputs"
        ):
            write.check_aligned(N)
    finally:
        write.abort()
    _unchanged(tmp_path / "ds")
