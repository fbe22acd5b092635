"""A dataset handle is freed when its last reference goes, not at the garbage collector's next run: its
transaction, head and chunk reader call back the objects that hold them through weak references, so no
cycle keeps a handle, its chunk cache (a loader's decoded chunks) and its lease alive."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import dataset_core


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic garbage collector off: whatever is freed is freed by its reference count."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _made(tmp_path: Path) -> str:
    path = str(tmp_path / "ds")
    ds = lc.empty(path)
    ds.create_tensor("a")
    ds.create_tensor("images", htype="image", sample_compression="png")
    with ds:
        ds.a.extend(np.arange(300))
        ds.images.extend([np.full((8, 8, 3), i % 256, dtype=np.uint8) for i in range(300)])
    return path


def _epoch(ds: Any) -> None:
    for batch in ds.batches(batch_size=64):
        assert batch["a"].shape[0] <= 64


def _write(ds: Any) -> None:
    ds.a.append(np.int64(7))  # a commit of its own
    with ds:
        ds.a.extend(np.arange(3))


USES: dict[str, Callable[[Any], object]] = {
    "opened": lambda ds: None,
    "read": lambda ds: (ds.a.numpy(), ds.images[5].numpy()),
    "an epoch of batches": _epoch,
    "a view read": lambda ds: ds[10:40].images.numpy(),
    "a filter": lambda ds: ds.filter(lc.col("a") > 250).a.numpy(),
    "commits": _write,
}


@pytest.mark.parametrize("use", list(USES))
def test_a_handle_is_freed_with_its_last_reference(tmp_path: Path, no_collector: None, use: str) -> None:
    path = _made(tmp_path)
    ds = lc.load(path)
    USES[use](ds)
    handle, cache = weakref.ref(ds), weakref.ref(dataset_core(ds).cache)
    del ds
    assert handle() is None
    assert cache() is None  # the decoded chunks go with it
    again = lc.load(path)  # and the dataset is whole for the next handle
    assert again.a.numpy()[:5].tolist() == [0, 1, 2, 3, 4]


def test_a_freed_writer_lets_its_lease_go_so_vacuum_can_clean_up(tmp_path: Path, no_collector: None) -> None:
    """A handle that committed keeps renewing its lease a while, in case it writes again; freed, its lease
    file is deleted, so a vacuum may remove the data the versions it dropped held (before, the file stayed
    until it expired, a minute, keeping the vacuum off those segments)."""
    path = _made(tmp_path)
    ds = lc.load(path)
    _write(ds)
    leases = tmp_path / "ds" / "leases"
    assert [p.suffix for p in leases.iterdir()] == [".json"]  # renewed after the commit, as it should
    del ds
    assert list(leases.iterdir()) == []  # a local file: deleted as the handle is freed
    other = lc.load(path)
    with other:
        other.delete_tensor("images")
    removed = other.vacuum(grace_seconds=0, keep_versions=1, progressbar=False)
    assert removed["segments"] >= 1  # the images' segments, no longer held by any lease
    assert other.a.numpy()[-4:].tolist() == [7, 0, 1, 2]


@lc.compute
def _doubled(sample_in: Any, sample_out: Any) -> None:
    sample_out.a.append(sample_in.a.numpy() * 2)


def test_an_eval_lets_go_of_its_input_and_output_when_it_returns(tmp_path: Path, no_collector: None) -> None:
    """An eval's tasks, its job and its writers are freed when it returns: the input and output handles
    (and their chunk caches) go with their last references, as does a Parquet input's last row group."""
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    src = lc.load(_made(tmp_path))
    out = lc.empty(str(tmp_path / "out"))
    out.create_tensor("a")
    _doubled().eval(src, out, num_workers=0, progressbar=False)
    assert out.a.numpy()[:3].tolist() == [0, 2, 4]
    handles = [weakref.ref(src), weakref.ref(out), weakref.ref(dataset_core(src).cache)]
    del src, out
    assert [h() for h in handles] == [None, None, None]
    pq.write_table(pa.table({"a": list(range(500))}), str(tmp_path / "t.parquet"), row_group_size=100)
    table = lc.read_parquet(str(tmp_path / "t.parquet"))
    rows = lc.empty(str(tmp_path / "rows"))
    rows.create_tensor("a")
    _doubled_rows().eval(table, rows, num_workers=0, progressbar=False)
    assert rows.a.numpy()[-1] == 998
    kept = weakref.ref(table)
    del rows, table
    assert kept() is None  # nothing of the eval holds its input
    assert pa.total_allocated_bytes() == 0  # nor the row groups it read


@lc.compute
def _doubled_rows(row: Any, sample_out: Any) -> None:
    sample_out.a.append(row["a"] * 2)
