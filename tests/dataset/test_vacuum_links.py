"""vacuum() and loading never touch a path outside the dataset: symbolic links inside it are not followed."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import dataset_core

_FORK = multiprocessing.get_context("fork")


def _write(path: str, n: int) -> None:
    ds = lc.load(path)
    ds.x.extend(np.arange(n))


def _dataset_by_dead_writer(path: Path) -> lc.Dataset:
    """A dataset whose only segment was written by a process that is gone (so vacuum may clean it)."""
    ds = lc.empty(str(path))
    ds.create_tensor("x", dtype="int64")
    proc = _FORK.Process(target=_write, args=(str(path), 300_000))  # 2.4 MB: three data chunks
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    return lc.load(str(path))


def _outside(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    for name in names:
        (folder / name).write_text("precious")
    return folder


def test_vacuum_does_not_follow_a_symlinked_chunk_folder(tmp_path: Path) -> None:
    """A segment's chunk folder replaced by a link to another folder: vacuum deletes nothing there."""
    ds = _dataset_by_dead_writer(tmp_path / "ds")
    seg = dataset_core(ds).txn.head.tensors["x"].fragments[0].seg
    chunks = tmp_path / "ds" / "segments" / seg / "index" / "c"  # x has no index rows: no chunks here
    assert not chunks.exists()
    outside = _outside(tmp_path, ["0", "7", "123"])  # chunk-like names no version needs
    chunks.symlink_to(outside)
    ds.vacuum(grace_seconds=0)
    assert sorted(p.name for p in outside.iterdir()) == ["0", "123", "7"]
    assert all(p.read_text() == "precious" for p in outside.iterdir())


def test_vacuum_removes_a_linked_segment_as_a_link(tmp_path: Path) -> None:
    """An unreferenced 'segment' that is a link to a folder outside: the link goes, the folder stays whole."""
    ds = _dataset_by_dead_writer(tmp_path / "ds")
    outside = _outside(tmp_path, ["zarr.json", "precious.txt"])
    link = tmp_path / "ds" / "segments" / "1000000000000-999999999-abcdef01"  # old, by a writer that is gone
    link.symlink_to(outside, target_is_directory=True)
    removed = ds.vacuum(grace_seconds=0)
    assert removed["segments"] == 1
    assert not os.path.lexists(link)
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt", "zarr.json"]
    np.testing.assert_array_equal(lc.load(str(tmp_path / "ds")).x.numpy(), np.arange(300_000))


def test_vacuum_does_not_follow_a_linked_segments_folder(tmp_path: Path) -> None:
    """The whole 'segments' folder a link out of the dataset: vacuum lists and deletes nothing through it."""
    ds = _dataset_by_dead_writer(tmp_path / "ds")
    real = tmp_path / "ds" / "segments"
    moved = tmp_path / "moved-segments"
    real.rename(moved)
    real.symlink_to(moved, target_is_directory=True)
    (moved / "1000000000000-999999999-abcdef01").mkdir()
    ds.vacuum(grace_seconds=0)
    assert (moved / "1000000000000-999999999-abcdef01").is_dir()


def test_load_refuses_a_linked_manifest(tmp_path: Path) -> None:
    """A version manifest that is a link (possibly out of the dataset) is refused by name, not read."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("x")
    manifest = tmp_path / "ds" / "versions" / "0000000001.json"
    manifest.rename(tmp_path / "elsewhere.json")
    manifest.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(
        lc.DatasetCorruptError, match=r"cannot read 'versions/0000000001\.json' \(its path goes"
    ):
        lc.load(str(tmp_path / "ds"))


def test_delete_removes_links_not_what_they_point_to(tmp_path: Path) -> None:
    """lc.delete of a dataset holding a link to an outside folder leaves that folder whole."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("x")
    outside = _outside(tmp_path, ["a", "b"])
    (tmp_path / "ds" / "segments").mkdir(exist_ok=True)
    (tmp_path / "ds" / "segments" / "link").symlink_to(outside, target_is_directory=True)
    (tmp_path / "ds" / "tensors").symlink_to(outside, target_is_directory=True)
    lc.delete(str(tmp_path / "ds"))
    assert not (tmp_path / "ds").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["a", "b"]
