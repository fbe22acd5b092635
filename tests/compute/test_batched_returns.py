"""With batch_size, a returned dict is columns (Hugging Face's map(batched=True)); per sample, one row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_numbers, make_out


@lc.compute
def doubled_columns(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    """Return a dict of columns: y = 2x (an array), name = str(x) (a list)."""
    x = sample_in.x.numpy()
    return {"y": x * 2, "name": [str(v) for v in x]}


@lc.compute
def evens_only(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    """Return fewer rows than inputs: only the even x (m differs from the batch size)."""
    x = sample_in.x.numpy()
    return {"y": x[x % 2 == 0], "name": [str(v) for v in x[x % 2 == 0]]}


@lc.compute
def uneven_columns(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    """Return columns of different lengths (a bug)."""
    x = sample_in.x.numpy()
    return {"y": x, "name": ["a"]}


@lc.compute
def one_row(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    """Per sample: a dict is one row."""
    x = int(sample_in.x.numpy())
    return {"y": x * 2, "name": str(x)}


def _out(tmp_path: Path) -> lc.Dataset:
    return make_out(tmp_path / "out", y={"dtype": "int64"}, name={"htype": "text"})


def test_batched_dict_is_columns(scheduler: Sched, tmp_path: Path) -> None:
    """300 inputs with batch_size=64 give 300 rows (not 5), in order, on every scheduler."""
    ds = make_numbers(tmp_path / "ds", 300)
    out = _out(tmp_path)
    result = doubled_columns().eval(ds, out, batch_size=64, **scheduler.kw)
    assert result.outputs == {"y": 300, "name": 300}
    np.testing.assert_array_equal(out.y.numpy(), 2 * np.arange(300))
    assert [out.name[i].text() for i in (0, 1, 299)] == ["0", "1", "299"]


def test_batched_columns_may_hold_fewer_rows(scheduler: Sched, tmp_path: Path) -> None:
    """m may differ from the batch size: returning the even inputs' columns gives 150 rows."""
    ds = make_numbers(tmp_path / "ds", 300)
    out = _out(tmp_path)
    evens_only().eval(ds, out, batch_size=64, **scheduler.kw)
    np.testing.assert_array_equal(out.y.numpy(), np.arange(0, 300, 2))


def test_batched_columns_of_different_lengths_raise(scheduler: Sched, tmp_path: Path) -> None:
    """Columns of different lengths raise TransformError naming the columns and their lengths."""
    ds = make_numbers(tmp_path / "ds", 100)
    out = _out(tmp_path)
    with pytest.raises(
        lc.TransformError, match=r"returned columns of different lengths \{'y': 32, 'name': 1\}"
    ):
        uneven_columns().eval(ds, out, batch_size=32, **scheduler.kw)
    assert len(lc.load(str(tmp_path / "out")).y) == 0


def test_batched_scalar_column_raises(tmp_path: Path) -> None:
    """A column that is one value, not a sequence, is refused with what to return instead."""
    ds = make_numbers(tmp_path / "ds", 10)

    @lc.compute
    def scalar(sample_in: Any, sample_out: Any) -> dict[str, Any]:
        return {"y": 1, "name": ["a"] * 5}

    with pytest.raises(lc.TransformError, match=r"returned a dict, read as columns .* but 'y' is int 1"):
        scalar().eval(ds, _out(tmp_path), batch_size=5, progressbar=False)


def test_per_sample_dict_is_one_row(scheduler: Sched, tmp_path: Path) -> None:
    """Without batch_size a returned dict stays one output row."""
    ds = make_numbers(tmp_path / "ds", 50)
    out = _out(tmp_path)
    one_row().eval(ds, out, **scheduler.kw)
    np.testing.assert_array_equal(out.y.numpy(), 2 * np.arange(50))
    assert out.name[49].text() == "49"
