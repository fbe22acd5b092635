"""What a compute function may return: one row as a dict, rows as a list of dicts, or nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out


@lc.compute
def returns_row(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    return {"y": sample_in * 10, "tag": f"n{sample_in}"}


@lc.compute
def returns_rows(sample_in: Any, sample_out: Any) -> list[dict[str, Any]]:
    return [{"y": sample_in * 10 + k, "tag": f"{sample_in}.{k}"} for k in range(sample_in % 3)]


@lc.compute
def returns_sample_out(sample_in: Any, sample_out: Any) -> Any:
    return sample_out.append({"y": sample_in, "tag": "s"})


@lc.compute
def writes_and_returns(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    sample_out.append({"y": 1, "tag": "w"})
    return {"y": 2, "tag": "r"}


@lc.compute
def returns_tuple(sample_in: Any, sample_out: Any) -> tuple[int, str]:
    return (sample_in, "t")


@lc.compute
def double_it(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    return {"y": sample_in * 2}


@lc.compute
def tag_it(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    return {"y": int(sample_in.y.numpy()), "tag": f"t{int(sample_in.y.numpy())}"}


def _out(tmp_path: Path) -> lc.Dataset:
    return make_out(tmp_path / "out", y={"dtype": "int64"}, tag={"htype": "text"})


def test_return_dict_writes_one_row(scheduler: Sched, tmp_path: Path) -> None:
    """A returned dict is one output row (the `datasets.map` habit)."""
    out = _out(tmp_path)
    result = returns_row().eval(list(range(12)), out, **scheduler.kw)
    assert result.outputs == {"y": 12, "tag": 12}
    again = lc.load(str(tmp_path / "out"))
    assert again.y.numpy().tolist() == [i * 10 for i in range(12)]
    assert again["tag"].text() == [f"n{i}" for i in range(12)]


def test_return_list_of_dicts_writes_rows_in_order(scheduler: Sched, tmp_path: Path) -> None:
    """A returned list of dicts gives 0, 1 or many rows per input, in input order."""
    out = _out(tmp_path)
    returns_rows().eval(list(range(9)), out, **scheduler.kw)
    want = [i * 10 + k for i in range(9) for k in range(i % 3)]
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == want


def test_return_sample_out_is_like_returning_nothing(scheduler: Sched, tmp_path: Path) -> None:
    """Returning sample_out itself (the Deep Lake tutorial style) writes what was appended, once."""
    out = _out(tmp_path)
    returns_sample_out().eval(list(range(5)), out, **scheduler.kw)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == list(range(5))


def test_return_in_a_pipeline_feeds_the_next_step(scheduler: Sched, tmp_path: Path) -> None:
    """A middle step's returned rows are the next step's sample_in."""
    out = _out(tmp_path)
    lc.compose([double_it(), tag_it()]).eval(list(range(6)), out, **scheduler.kw)
    again = lc.load(str(tmp_path / "out"))
    assert again.y.numpy().tolist() == [0, 2, 4, 6, 8, 10]
    assert again["tag"].text() == ["t0", "t2", "t4", "t6", "t8", "t10"]


def test_write_and_return_is_an_error(scheduler: Sched, tmp_path: Path) -> None:
    """Appending to sample_out and returning a dict in the same call fails, saying to do one or the other."""
    out = _out(tmp_path)
    with pytest.raises(lc.TransformError, match=r"failed on data_in\[0\]") as info:
        writes_and_returns().eval(list(range(4)), out, **scheduler.kw)
    assert isinstance(info.value.__cause__, lc.InvalidArgumentError)
    assert "wrote to sample_out and also returned dict; do one or the other" in str(info.value)
    assert len(lc.load(str(tmp_path / "out")).y) == 0


def test_return_other_value_is_an_error(scheduler: Sched, tmp_path: Path) -> None:
    """Returning a tuple (or anything but None, sample_out, a dict or a list of dicts) fails clearly."""
    out = _out(tmp_path)
    with pytest.raises(lc.TransformError) as info:
        returns_tuple().eval(list(range(4)), out, **scheduler.kw)
    assert info.value.index == 0
    assert isinstance(info.value.__cause__, lc.InvalidTypeError)
    assert "returned tuple (0, 't'). A compute function returns None" in str(info.value)
