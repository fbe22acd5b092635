"""Arrays returned by reads belong to the caller: changing them never changes a later read (API §1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc


def _dataset(path: str) -> lc.Dataset:
    ds = lc.empty(path, overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(10))
    ds.create_tensor("r", dtype="int64")
    ds.r.extend([np.arange(i + 1) for i in range(10)])
    return ds


@pytest.mark.parametrize("url", ["mem://no-alias", "local"])
def test_reads_changing_a_result_does_not_change_later_reads(tmp_path: Path, url: str) -> None:
    """Writing into what a sample, slice, tensor, row or ragged read returned leaves stored values as read."""
    ds = _dataset(str(tmp_path / "ds") if url == "local" else url)
    results: list[Any] = [ds.x[2].numpy(), ds.x[2:5].numpy(), ds.x.numpy(), ds[4].x.numpy(), ds.r[3].numpy()]
    results += ds.r[1:4].numpy(aslist=True)
    for a in results:
        a[...] = 99
    assert ds.x.numpy().tolist() == list(range(10))
    assert ds[4].x.numpy() == 4
    assert [v.tolist() for v in ds.r.numpy(aslist=True)] == [list(range(i + 1)) for i in range(10)]


@lc.compute
def add_in_place(sample_in: Any, sample_out: Any) -> None:
    a = sample_in.x.numpy()
    a += 100
    sample_out.y.append(a)


@pytest.mark.parametrize(("scheduler", "num_workers"), [("serial", 0), ("threaded", 2), ("processed", 2)])
def test_eval_function_that_changes_its_input_gives_the_same_output_everywhere(
    tmp_path: Path, scheduler: str, num_workers: int
) -> None:
    """A compute function updating its input array in place sees each stored value, on every scheduler."""
    ds = _dataset(str(tmp_path / "in"))
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("y", dtype="int64")
    add_in_place().eval(ds, out, num_workers=num_workers, scheduler=scheduler, progressbar=False)
    assert out.y.numpy().tolist() == [i + 100 for i in range(10)]
    assert ds.x.numpy().tolist() == list(range(10))
