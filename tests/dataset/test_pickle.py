"""Datasets and views pickle as location and version and reopen on unpickling, in this process and in
processes started with spawn (torch.multiprocessing.spawn, as DDP launchers do)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc


def _make(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.create_tensor("caption", htype="text")
    with ds:
        ds.x.extend(np.arange(10))
        ds.caption.extend([f"c{i}" for i in range(10)])
    return ds


def test_dataset_pickles_as_its_version(tmp_path: Path) -> None:
    """A pickled handle reopens at the version it read, with its mode; later commits are not in it."""
    ds = _make(tmp_path / "ds")
    data = pickle.dumps(ds)
    ds.x.append(99)  # a later version
    back = pickle.loads(data)
    assert back.version == ds.version - 1
    assert back.x.numpy().tolist() == list(range(10))
    assert not back.read_only
    assert len(data) < 1000  # location and version, not data

    ro = pickle.loads(pickle.dumps(lc.load(str(tmp_path / "ds"), read_only=True)))
    assert ro.read_only
    assert ro.x.numpy().tolist() == [*range(10), 99]
    old = pickle.loads(pickle.dumps(lc.load(str(tmp_path / "ds"), version=back.version)))
    assert old.version == back.version
    with pytest.raises(lc.ReadOnlyError):
        old.x.append(1)


def test_view_pickles_with_its_selection(tmp_path: Path) -> None:
    """A view pickles with its positions and reads the same samples after unpickling."""
    ds = _make(tmp_path / "ds")
    view = pickle.loads(pickle.dumps(ds[[7, 2, 2]]))
    assert view.x.numpy().tolist() == [7, 2, 2]
    assert [str(c) for c in view.caption.numpy(aslist=True)] == ["c7", "c2", "c2"]


def test_dataset_with_pending_writes_refuses_to_pickle(tmp_path: Path) -> None:
    """Uncommitted writes exist only in this process: pickling says to commit first."""
    ds = _make(tmp_path / "ds")
    with ds:
        ds.x.append(5)
        with pytest.raises(lc.InvalidArgumentError, match=r"uncommitted changes.*Commit them first"):
            pickle.dumps(ds)


def _sum_in_child(rank: int, ds: lc.Dataset, out: str) -> None:
    """Runs in a spawned process: read the unpickled dataset and report what it saw."""
    Path(f"{out}.{rank}").write_text(
        f"{ds.version} {int(ds.x.numpy().sum())} {ds[rank::2].x.numpy().tolist()}"
    )


@pytest.mark.timeout(120)
def test_dataset_travels_to_spawned_processes(tmp_path: Path) -> None:
    """torch.multiprocessing.spawn with the dataset as an argument: every rank reads it (the pattern of
    Lightning's ddp_spawn and Deep Lake's DDP examples)."""
    mp = pytest.importorskip("torch.multiprocessing")
    ds = _make(tmp_path / "ds")
    out = str(tmp_path / "seen")
    mp.spawn(_sum_in_child, args=(ds, out), nprocs=2, join=True)
    seen: list[Any] = [Path(f"{out}.{rank}").read_text() for rank in range(2)]
    assert seen == [f"{ds.version} 45 [0, 2, 4, 6, 8]", f"{ds.version} 45 [1, 3, 5, 7, 9]"]
