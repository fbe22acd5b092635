"""Indices: `.index` is the position in data_in, `.row` the dataset row it was read from (views included),
on `sample_in`, on `TransformError` (and its message), on `FailedSample` and in a rerun's record."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.datasets import FailedSample
from tests.compute.compute_helpers import Sched
from tests.helpers import make_numbers, make_out


@lc.compute
def where(sample_in: Any, sample_out: Any) -> None:
    """Write the input's index and row."""
    sample_out.append({"index": sample_in.index, "row": sample_in.row})


@lc.compute
def fails_on_150(sample_in: Any, sample_out: Any) -> None:
    """Fail on the input holding x == 150 (dataset row 150)."""
    if int(sample_in.x.numpy()) == 150:
        raise ValueError("bad sample")
    sample_out.append({"index": sample_in.index, "row": sample_in.row})


def _where_out(path: Path) -> lc.Dataset:
    return make_out(path, index={"dtype": "int64"}, row={"dtype": "int64"})


def test_sample_in_row_is_the_dataset_row_of_a_view(scheduler: Sched, tmp_path: Path) -> None:
    """Over ds[100:200] and ds[[250, 3, 77]], sample_in.index counts the view, sample_in.row is the row."""
    ds = make_numbers(tmp_path / "ds", 300)
    out = _where_out(tmp_path / "out")
    where().eval(ds[100:200], out, **scheduler.kw)
    where().eval(ds[[250, 3, 77]], out, **scheduler.kw)
    got = lc.load(str(tmp_path / "out"))
    assert got["index"].numpy().tolist() == [*range(100), 0, 1, 2]
    assert got["row"].numpy().tolist() == [*range(100, 200), 250, 3, 77]


def test_sample_in_row_equals_index_over_a_whole_dataset(tmp_path: Path) -> None:
    """Over the whole dataset both are the same number."""
    ds = make_numbers(tmp_path / "ds", 10)
    out = _where_out(tmp_path / "out")
    where().eval(ds, out, num_workers=2, progressbar=False)
    got = lc.load(str(tmp_path / "out"))
    assert got["index"].numpy().tolist() == got["row"].numpy().tolist() == list(range(10))


def test_batched_sample_in_row_is_the_first_inputs(tmp_path: Path) -> None:
    """A batch's index and row are its first input's."""

    @lc.compute
    def batch_where(batch: Any, sample_out: Any) -> None:
        n = len(batch.x.numpy())
        sample_out.extend({"index": [batch.index] * n, "row": [batch.row] * n})

    ds = make_numbers(tmp_path / "ds", 40)
    out = _where_out(tmp_path / "out")
    batch_where().eval(ds[10:30], out, batch_size=8, progressbar=False)
    got = lc.load(str(tmp_path / "out"))
    assert got["index"].numpy().tolist() == [0] * 8 + [8] * 8 + [16] * 4
    assert got["row"].numpy().tolist() == [10] * 8 + [18] * 8 + [26] * 4


def test_pipeline_later_step_knows_the_row(tmp_path: Path) -> None:
    """The rows a step gives the next carry the index and the row of the input they came from."""

    @lc.compute
    def passthrough(sample_in: Any, sample_out: Any) -> None:
        sample_out.append({"x": sample_in.x.numpy()})

    ds = make_numbers(tmp_path / "ds", 20)
    out = _where_out(tmp_path / "out")
    lc.compose([passthrough(), where()]).eval(ds[5:8], out, progressbar=False)
    got = lc.load(str(tmp_path / "out"))
    assert got["row"].numpy().tolist() == [5, 6, 7]
    assert got["index"].numpy().tolist() == [0, 1, 2]


def test_transform_error_over_a_view_names_index_and_row(scheduler: Sched, tmp_path: Path) -> None:
    """A failure over ds[100:200] at x == 150: .index 50, .row 150, and the message names both."""
    ds = make_numbers(tmp_path / "ds", 300)
    with pytest.raises(lc.TransformError) as info:
        fails_on_150().eval(ds[100:200], _where_out(tmp_path / "out"), **scheduler.kw)
    err = info.value
    assert (err.index, err.row) == (50, 150)
    assert "failed on data_in[50] (dataset row 150): ValueError: bad sample" in str(err)
    assert int(err.sample.x.numpy()) == 150
    assert int(ds[err.row].x.numpy()) == 150  # the dataset indexed by row ...
    assert int(ds[100:200][err.index].x.numpy()) == 150  # ... and the view by index: the same sample


def test_transform_error_over_a_list_has_no_row(tmp_path: Path) -> None:
    """Input that is not a dataset has no row: .row is None and the message names the index only."""

    @lc.compute
    def fails_on_3(sample_in: Any, sample_out: Any) -> None:
        if sample_in == 3:
            raise ValueError("three")
        sample_out.x.append(sample_in)

    with pytest.raises(lc.TransformError) as info:
        fails_on_3().eval(list(range(6)), make_out(tmp_path / "out"), progressbar=False)
    assert (info.value.index, info.value.row) == (3, None)
    assert "failed on data_in[3]: ValueError: three" in str(info.value)


def test_failed_samples_carry_rows_and_a_rerun_keeps_them(tmp_path: Path) -> None:
    """ignore_errors over a view: FailedSample.row, result.failed_rows, and the no-op rerun's result (read
    back from the eval's record) says the same."""
    ds = make_numbers(tmp_path / "ds", 300)
    out = _where_out(tmp_path / "out")
    view = ds[120:260]
    result = fails_on_150().eval(view, out, ignore_errors=True, num_workers=2, progressbar=False)
    assert result.failed_indices == [30]
    assert result.failed_rows == [150]
    assert "row=150" in repr(result.failed[0])
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        again = fails_on_150().eval(view, out, ignore_errors=True, num_workers=2, progressbar=False)
    assert again.failed_rows == [150]
    rest = [i for i in range(len(view)) if i not in set(result.failed_indices)]
    assert lc.load(str(tmp_path / "out"))["row"].numpy().tolist() == [int(view.positions[i]) for i in rest]


def test_failed_sample_json_without_a_row_still_reads() -> None:
    """A record written before rows were kept (five fields) reads with row None; one with a row keeps it."""
    old = FailedSample.from_json([3, "f", "ValueError", "bad", "tb"])
    assert (old.index, old.row) == (3, None)
    new = FailedSample(3, "f", "ValueError", "bad", "tb", 103)
    assert FailedSample.from_json(new.to_json()) == new


def test_filter_error_names_the_row(tmp_path: Path) -> None:
    """ds.filter(fn) over a view fails with .index in the view and .row in the dataset."""
    ds = make_numbers(tmp_path / "ds", 200)
    with pytest.raises(lc.TransformError) as info:
        ds[100:].filter(lambda s: 1 // (int(s.x.numpy()) - 120) >= 0, progressbar=False)
    assert (info.value.index, info.value.row) == (20, 120)
    assert "(dataset row 120)" in str(info.value)


def test_rows_pickle_with_their_row(tmp_path: Path) -> None:
    """A sample_in row pickled (to a worker, into an error) keeps its index and row."""
    ds = make_numbers(tmp_path / "ds", 10)
    rows: list[Any] = []

    @lc.compute
    def keep(sample_in: Any, sample_out: Any) -> None:
        rows.append(pickle.loads(pickle.dumps(sample_in)))
        sample_out.x.append(np.int64(0))

    keep().eval(ds[[7, 2]], make_out(tmp_path / "out"), progressbar=False)
    assert [(r.index, r.row, int(r.x.numpy())) for r in rows] == [(0, 7, 7), (1, 2, 2)]
