"""Dataset input whose tensors differ in length is refused: an eval never silently processes fewer rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out

MESSAGE = (
    r"The tensors of data_in '.*ds' differ in length \('z' has 5, 'x' has 10\), so an eval would process "
    r"only the 5 rows they all hold and leave out the others \(in place, drop them\)\. Pass "
    r"pad_data_in=True to pad the shorter tensors to 10 rows, or eval a view of the rows every tensor "
    r"holds \(ds\[:5\]\)\."
)


@lc.compute
def double_x(sample_in: Any, sample_out: Any) -> None:
    """x = 2 * x."""
    sample_out.x.append(sample_in.x.numpy() * 2)


def _uneven(path: Path) -> lc.Dataset:
    """x holds 0..9, z holds 0..4."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.create_tensor("z", dtype="int64")
    ds.x.extend(np.arange(10))
    ds.z.extend(np.arange(5))
    return ds


def test_unequal_lengths_into_another_dataset_are_refused(scheduler: Sched, tmp_path: Path) -> None:
    """x of 10 rows and z of 5: InvalidArgumentError naming both and the ways out; nothing written."""
    ds = _uneven(tmp_path / "ds")
    out = make_out(tmp_path / "out", x={"dtype": "int64"})
    with pytest.raises(lc.InvalidArgumentError, match=MESSAGE):
        double_x().eval(ds, out, **scheduler.kw)
    assert lc.load(str(tmp_path / "out")).version == out.version
    assert len(lc.load(str(tmp_path / "out")).x) == 0


def test_unequal_lengths_in_place_are_refused_and_keep_every_row(scheduler: Sched, tmp_path: Path) -> None:
    """In place, the eval refuses instead of dropping x's rows 5-9; the dataset is unchanged."""
    ds = _uneven(tmp_path / "ds")
    version = ds.version
    with pytest.raises(lc.InvalidArgumentError, match=MESSAGE):
        double_x().eval(ds, skip_ok=True, **scheduler.kw)
    again = lc.load(str(tmp_path / "ds"))
    assert again.version == version
    np.testing.assert_array_equal(again.x.numpy(), np.arange(10))
    np.testing.assert_array_equal(again.z.numpy(), np.arange(5))


def test_the_ways_out_work(tmp_path: Path) -> None:
    """pad_data_in=True processes all 10 rows; a view of the first 5 rows processes those."""
    ds = _uneven(tmp_path / "ds")
    padded = make_out(tmp_path / "padded", x={"dtype": "int64"})
    double_x().eval(ds, padded, pad_data_in=True, progressbar=False)
    np.testing.assert_array_equal(padded.x.numpy(), 2 * np.arange(10))
    viewed = make_out(tmp_path / "viewed", x={"dtype": "int64"})
    double_x().eval(ds[:5], viewed, progressbar=False)
    np.testing.assert_array_equal(viewed.x.numpy(), 2 * np.arange(5))


def test_a_tensor_created_empty_for_the_eval_is_not_input(scheduler: Sched, tmp_path: Path) -> None:
    """In place, a new empty tensor the eval fills does not count as a short input tensor."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(10))
    ds.create_tensor("y", dtype="int64")

    @lc.compute
    def fill_y(sample_in: Any, sample_out: Any) -> None:
        sample_out.y.append(sample_in.x.numpy() + 1)

    fill_y().eval(ds, skip_ok=True, **scheduler.kw)
    again = lc.load(str(tmp_path / "ds"))
    np.testing.assert_array_equal(again.y.numpy(), np.arange(10) + 1)
    np.testing.assert_array_equal(again.x.numpy(), np.arange(10))
