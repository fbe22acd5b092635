"""Batches whose positions follow one another are read as slices of the chunks they lie in: the same values
and types as gathered batches, each chunk decoded once, arrays the caller's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import lakecompute as lc
from lakecompute.datasets import RowReader
from lakecompute.testing.internals import dataset_core

N = 3_000  # 1 KiB images: about a thousand to a chunk, three chunks


def _dataset(path: Path) -> lc.Dataset:
    """Fixed-shape images (two fragments), ragged vectors and text: what a loader reads."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("img", dtype="uint8")
    ds.create_tensor("rag", dtype="int32")
    ds.create_tensor("txt", htype="text")
    images = (np.arange(N * 1024) % 251).astype(np.uint8).reshape(N, 32, 32)
    for lo, hi in ((0, 1700), (1700, N)):
        with ds:
            ds.img.extend(images[lo:hi])
            ds.rag.extend([np.full(i % 3 + 1, i, np.int32) for i in range(lo, hi)])
            ds.txt.extend([f"s{i}" for i in range(lo, hi)])
    return ds


def test_slices_read_as_gathers_do(tmp_path: Path) -> None:
    """A run of positions reads the same values, dtypes and container types as the same positions gathered."""
    _dataset(tmp_path / "ds")
    reader = RowReader(lc.load(str(tmp_path / "ds"), read_only=True), ["img", "rag", "txt"])
    for lo, hi in ((0, 256), (1600, 1800), (2990, 3000), (5, 6)):
        sliced = reader.read_rows(np.arange(lo, hi))
        gathered = reader.read_rows(np.arange(lo, hi)[::-1])  # not a run: gathered
        np.testing.assert_array_equal(sliced["img"], gathered["img"][::-1])
        assert sliced["img"].dtype == np.uint8
        assert isinstance(sliced["rag"], list)
        assert [a.tolist() for a in sliced["rag"]] == [a.tolist() for a in gathered["rag"][::-1]]
        assert sliced["txt"] == gathered["txt"][::-1] == [f"s{i}" for i in range(lo, hi)]


def test_an_unshuffled_epoch_decodes_each_chunk_once(tmp_path: Path) -> None:
    """An unshuffled epoch yields the dataset in order, and decodes each stored chunk once."""
    ds = _dataset(tmp_path / "ds")
    loader = ds.batches(200, shuffle=False)
    images = np.concatenate([b["img"] for b in loader])
    np.testing.assert_array_equal(images, ds.img.numpy())
    reader = RowReader(lc.load(str(tmp_path / "ds"), read_only=True), ["img"])
    for lo in range(0, N, 200):
        reader.read_rows(np.arange(lo, min(N, lo + 200)))
    reads = reader.cache.chunk_reads
    assert reads
    assert set(reads.values()) == {1}


def test_sliced_batches_are_the_callers_own(tmp_path: Path) -> None:
    """Changing a sliced batch changes nothing later reads return."""
    ds = _dataset(tmp_path / "ds")
    reader = RowReader(lc.load(str(tmp_path / "ds"), read_only=True), ["img"])
    first = reader.read_rows(np.arange(10, 20))["img"]
    expected = first.copy()
    first[:] = 0
    np.testing.assert_array_equal(reader.read_rows(np.arange(10, 20))["img"], expected)
    np.testing.assert_array_equal(ds.img[10:20].numpy(), expected)
    assert dataset_core(ds).cache is not reader.cache
