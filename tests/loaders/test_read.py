"""The one reader (issue 15) as loaders use it: values by position, each chunk decoded once, streams,
through the handle's one byte-budgeted chunk cache; gathered values equal ranged ones and belong to
the caller."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import lakecompute as lc
from lakecompute.datasets import ColumnReader, RowReader, StreamReader, snapshot
from lakecompute.loaders._sources import RowSource, TokenSource
from lakecompute.storage import LOADER_CACHE_BYTES
from lakecompute.testing.internals import dataset_core


def test_row_reader_reads_any_positions_of_every_htype(numbered: lc.Dataset) -> None:
    """Positions in any order (repeats too) read back the samples of fixed, ragged and text tensors."""
    reader = RowReader(numbered, ["idx", "img", "rag", "txt"])
    pos = np.array([102, 0, 51, 51, 7])
    out = reader.read_rows(pos)
    assert out["idx"].tolist() == pos.tolist()
    np.testing.assert_array_equal(out["img"], np.stack([np.full((4, 4), p, np.uint8) for p in pos]))
    assert isinstance(out["rag"], list)
    assert [a.tolist() for a in out["rag"]] == [[p] * (p % 3 + 1) for p in pos.tolist()]
    assert out["txt"] == [f"s{p}" for p in pos.tolist()]
    assert reader.shape("img") == (4, 4)
    assert reader.shape("rag") is None


def test_row_reader_decodes_each_chunk_once_for_a_shuffled_epoch(tmp_path: Path) -> None:
    """A shuffled batch of 256 out of 6,000 28x28 samples fetches the ~5 chunks once, not ~256 times."""
    ds = lc.empty(str(tmp_path / "mnist"))
    ds.create_tensor("images", htype="image")
    images = np.random.default_rng(0).integers(0, 255, (6000, 28, 28), dtype=np.uint8)
    ds.images.extend(images)
    chunks = -(-images.nbytes // (1 << 20))  # 1 MiB segment chunks
    reader = RowReader(ds, ["images"])
    order = np.random.default_rng(1).permutation(6000)
    first = reader.read_rows(order[:256])["images"]
    np.testing.assert_array_equal(first, images[order[:256]])
    assert reader.cache.fetched <= chunks + 1
    for lo in range(256, 6000, 256):
        np.testing.assert_array_equal(
            reader.read_rows(order[lo : lo + 256])["images"], images[order[lo : lo + 256]]
        )
    assert reader.cache.fetched <= chunks + 1  # the whole epoch: every chunk decoded once


def test_row_reader_reads_compacted_and_png_tensors(tmp_path: Path) -> None:
    """After compact() (typed arrays) and for PNG-encoded images, values read back exactly."""
    ds = lc.empty(str(tmp_path / "c"))
    ds.create_tensor("a", dtype="float32")
    ds.create_tensor("png", htype="image", sample_compression="png")
    values = np.random.default_rng(2).random((300, 3, 5)).astype(np.float32)
    images = np.random.default_rng(3).integers(0, 255, (300, 6, 7, 3), dtype=np.uint8)
    for lo in (0, 150):
        with ds:
            ds.a.extend(values[lo : lo + 150])
            ds.png.extend(images[lo : lo + 150])
    ds.compact()
    pos = np.random.default_rng(4).permutation(300)[:40]
    out = RowReader(ds, ["a", "png"]).read_rows(pos)
    np.testing.assert_array_equal(out["a"], values[pos])
    np.testing.assert_array_equal(out["png"], images[pos])


def test_row_reader_refuses_positions_outside_the_tensor(numbered: lc.Dataset) -> None:
    """A position past the end is an error naming it and the tensor's length."""
    with pytest.raises(lc.InvalidArgumentError, match="Position 103 is outside tensor 'idx' of length 103"):
        RowReader(numbered, ["idx"]).read_rows(np.array([3, 103]))


def test_stream_reader_reads_ranges_and_windows(tokens: tuple[lc.Dataset, np.ndarray]) -> None:
    """Ranges and windows of the concatenated documents equal slices of the concatenation."""
    ds, flat = tokens
    stream = StreamReader(ds, "tokens")
    assert stream.length == len(flat)
    assert stream.array_path is None
    np.testing.assert_array_equal(stream.read_values(0, len(flat)), flat)
    np.testing.assert_array_equal(stream.read_values(37, 38), flat[37:38])
    starts = np.random.default_rng(0).integers(0, len(flat) - 50, 100)
    np.testing.assert_array_equal(stream.windows(starts, 50), np.stack([flat[s : s + 50] for s in starts]))


def test_compact_makes_the_stream_one_typed_zarr_array(tokens: tuple[lc.Dataset, np.ndarray]) -> None:
    """After compact() a token tensor is one int32 zarr array that plain zarr opens; reads are unchanged."""
    ds, flat = tokens
    before = [a.tolist() for a in ds.tokens.numpy(aslist=True)]
    ds.compact()
    stream = StreamReader(snapshot(ds).open(), "tokens")
    assert stream.array_path is not None
    arr = zarr.open_array(f"{ds.path}/{stream.array_path}", mode="r")
    assert arr.dtype == np.int32
    assert arr.shape == flat.shape
    assert arr.attrs["tensor"] == "tokens"
    np.testing.assert_array_equal(arr[:], flat)
    again = lc.load(ds.path)
    assert [a.tolist() for a in again.tokens.numpy(aslist=True)] == before
    assert again.compact() == again.version  # already compact: no new version
    np.testing.assert_array_equal(
        StreamReader(again, "tokens").windows(np.array([5, 900]), 30)[1], flat[900:930]
    )


def test_snapshot_refuses_uncommitted_changes(numbered: lc.Dataset) -> None:
    """Loaders read committed versions: pending writes inside `with` are an error saying to commit."""
    with numbered:
        numbered.idx.append(5)
        with pytest.raises(lc.InvalidArgumentError, match=r"uncommitted changes.*ds\.commit\(\)"):
            snapshot(numbered)
        numbered.rollback()


def test_column_reader_gather_equals_range_reads(numbered: lc.Dataset) -> None:
    """Gathered positions (any order, repeats, across fragments) read what range reads give."""
    pos = np.array([102, 0, 51, 51, 7, 50, 52])
    for name in ("idx", "img", "rag", "txt"):
        reader = dataset_core(numbered).reader(name)
        assert isinstance(reader, ColumnReader)
        got = reader.read_at(pos)
        want = [reader.read_one(p) for p in pos.tolist()]
        if name == "txt":
            assert got == want
        else:
            assert [np.asarray(v).tolist() for v in got] == [np.asarray(v).tolist() for v in want]


def test_gathered_values_belong_to_the_caller(
    numbered: lc.Dataset, tokens: tuple[lc.Dataset, np.ndarray]
) -> None:
    """Writing into gathered rows, stream ranges or windows leaves later reads unchanged."""
    reader = RowReader(numbered, ["idx", "img", "rag"])
    pos = np.array([3, 60, 3])
    first = reader.read_rows(pos)
    first["idx"][...] = -1
    first["img"][...] = 0
    for a in first["rag"]:
        a[...] = -1
    again = reader.read_rows(pos)
    assert again["idx"].tolist() == [3, 60, 3]
    assert again["img"][1].tolist() == [[60] * 4] * 4
    assert [a.tolist() for a in again["rag"]] == [[3], [60], [3]]
    ds, flat = tokens
    stream = StreamReader(ds, "tokens")
    stream.read_values(0, 10)[...] = -1
    stream.windows(np.array([0, 5]), 10)[...] = -1
    np.testing.assert_array_equal(stream.read_values(0, 20), flat[:20])


def test_loader_reads_through_one_cache_with_the_loader_budget(
    numbered: lc.Dataset, tokens: tuple[lc.Dataset, np.ndarray]
) -> None:
    """An opened loader source reads through its own handle's one chunk cache, with the loader budget."""
    rows = RowSource(snapshot(numbered), ("idx", "img")).open()
    assert rows.reader.cache.max_bytes == LOADER_CACHE_BYTES
    assert rows.read_batch(np.array([4, 1]))["idx"].tolist() == [4, 1]
    ds, flat = tokens
    blocks = TokenSource(snapshot(ds), "tokens", 8, True, len(flat)).open()
    assert blocks.reader.cache.max_bytes == LOADER_CACHE_BYTES
    np.testing.assert_array_equal(blocks.read_batch(np.array([2]))["x"][0], flat[16:24])


def test_chunk_cache_keeps_to_its_byte_budget(tmp_path: Path) -> None:
    """With a budget of two chunks, a shuffled epoch decodes chunks again instead of keeping them all."""
    ds = lc.empty(str(tmp_path / "mnist"))
    ds.create_tensor("images", htype="image")
    images = np.random.default_rng(0).integers(0, 255, (6000, 28, 28), dtype=np.uint8)
    ds.images.extend(images)
    dataset_core(ds).cache.max_bytes = 2 << 20
    reader = RowReader(ds, ["images"])
    order = np.random.default_rng(1).permutation(6000)
    for lo in range(0, 6000, 256):
        np.testing.assert_array_equal(
            reader.read_rows(order[lo : lo + 256])["images"], images[order[lo : lo + 256]]
        )
    assert reader.cache.fetched > 2 * 6000 // 256  # chunks fell out and were decoded again
    assert reader.cache.held_bytes <= 2 << 20
