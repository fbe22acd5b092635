"""The storage fast paths (direct chunk writes, in-place LATEST hint) keep zarr's results and the
commit guarantees."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from lakecompute import compression
from lakecompute.storage import TEMP_PREFIX, ArrayCache, open_backend
from lakecompute.versioned import Manifest, SlotWriter
from lakecompute.versioned._segments import DATA_CHUNK, SLOT_BYTES, OpenSegment, create_segment
from lakecompute.versioned._versions import commit_manifest, latest_version


@pytest.mark.parametrize("codec", [None, "zstd", "lz4", "gzip"])
def test_slot_writes_read_back_through_zarr(tmp_path, codec):
    store = LocalStore(str(tmp_path))
    create_segment(store, "s", compression.zarr_compressors(codec))
    w = SlotWriter(OpenSegment(store, "s"), 1)
    rng = np.random.default_rng(0)
    sizes = (5, 784, DATA_CHUNK - 100, 300, 3 * DATA_CHUNK + 7, 1)
    parts = [rng.integers(0, 255, size=k, dtype=np.uint8) for k in sizes]
    offs = [w.write_data(p) for p in parts]
    expected = np.concatenate(parts)
    assert offs[0] == SLOT_BYTES
    arr = zarr.open_array(store, path="segments/s/data", mode="r")
    got = np.asarray(arr[SLOT_BYTES : SLOT_BYTES + expected.size])
    np.testing.assert_array_equal(got, expected)
    cache = ArrayCache(LocalStore(str(tmp_path)))
    np.testing.assert_array_equal(cache.read_rows("segments/s/data", SLOT_BYTES + 5, 784), parts[1])
    rows = np.arange(30, dtype=np.int64)
    idx = w.write_index(rows)
    index = zarr.open_array(store, path="segments/s/index", mode="r")
    np.testing.assert_array_equal(np.asarray(index[idx : idx + 30]), rows)
    assert not list(tmp_path.rglob("*.partial"))
    assert not list(tmp_path.rglob(f"{TEMP_PREFIX}*"))


@pytest.mark.parametrize(
    "sizes",
    [
        (2 * DATA_CHUNK,),  # whole chunks, no tail before or after
        (3 * DATA_CHUNK + 5, 9),  # a tail after, then a small write into it
        (100, 2 * DATA_CHUNK - 100, 2 * DATA_CHUNK + 1, 7),  # ends on a boundary; then a tail again
        (DATA_CHUNK - 1, 4 * DATA_CHUNK),  # one byte short of a boundary before a large write
    ],
)
def test_large_writes_store_whole_chunks_from_the_values(tmp_path, sizes):
    """Writes of several chunks store their whole chunks from the values themselves: what zarr reads
    back is every byte written, in order, wherever the write starts and ends within a chunk."""
    store = LocalStore(str(tmp_path))
    create_segment(store, "s", compression.zarr_compressors(None))
    w = SlotWriter(OpenSegment(store, "s"), 2)
    rng = np.random.default_rng(1)
    parts = [rng.integers(0, 255, size=k, dtype=np.uint8) for k in sizes]
    offs = [w.write_data(p) for p in parts]
    assert offs == [2 * SLOT_BYTES + sum(sizes[:i]) for i in range(len(sizes))]
    expected = np.concatenate(parts)
    arr = zarr.open_array(store, path="segments/s/data", mode="r")
    end = -(-expected.size // DATA_CHUNK) * DATA_CHUNK
    got = np.asarray(arr[2 * SLOT_BYTES : 2 * SLOT_BYTES + end])
    np.testing.assert_array_equal(got[: expected.size], expected)
    assert not got[expected.size :].any()  # the last chunk is padded with zeros
    rows = rng.integers(-(2**40), 2**40, size=3 * 8192 + 11, dtype=np.int64)
    idx = w.write_index(rows[:5])
    w.write_index(rows[5:])
    index = zarr.open_array(store, path="segments/s/index", mode="r")
    np.testing.assert_array_equal(np.asarray(index[idx : idx + rows.size]), rows)


@pytest.mark.parametrize(
    "sizes",
    [
        (300_000,) * 10,  # many writes smaller than a chunk
        (100, 2 * DATA_CHUNK - 100, 2 * DATA_CHUNK + 1, 7),  # ends on a boundary; then a tail again
        (DATA_CHUNK - 1, 4 * DATA_CHUNK, 1),  # one byte short of a boundary before a large write
        (2 * DATA_CHUNK,),  # whole chunks only: nothing to seal
    ],
)
def test_a_writer_holding_its_tails_stores_each_chunk_once(tmp_path, monkeypatch, sizes):
    """An eval task's slot writer (``hold_tails``) stores only full chunks as it writes, and the partly
    filled last one of its data and index at `seal`: each chunk file is stored once (a writer without it
    stores the last chunk padded at every write, and again at the next), and zarr reads back every byte."""
    store = LocalStore(str(tmp_path))
    create_segment(store, "s", compression.zarr_compressors(None))
    stored: list[tuple[str, int]] = []  # (array, chunk) of every chunk file stored (renamed into place)
    replace = os.replace

    def counted(src, dst):
        array, _, chunk = os.path.relpath(dst, tmp_path / "segments" / "s").split(os.sep)[:3]
        stored.append((array, int(chunk)))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", counted)
    w = SlotWriter(OpenSegment(store, "s"), 3, concurrent=False, hold_tails=True)
    rng = np.random.default_rng(2)
    parts = [rng.integers(0, 255, size=k, dtype=np.uint8) for k in sizes]
    offs = [w.write_data(p) for p in parts]
    rows = rng.integers(0, 2**40, size=8192 + 5, dtype=np.int64)
    idx = w.write_index(rows[:5])
    w.write_index(rows[5:])
    expected = np.concatenate(parts)
    whole = expected.size // DATA_CHUNK
    assert len([c for array, c in stored if array == "data"]) == whole  # only full chunks so far
    w.seal()
    w.seal()  # nothing more to store
    chunks = -(-expected.size // DATA_CHUNK)
    data_stores = [c for path, c in stored if path.endswith("data")]
    assert sorted(data_stores) == list(
        range(3 * SLOT_BYTES // DATA_CHUNK, 3 * SLOT_BYTES // DATA_CHUNK + chunks)
    )
    assert len([c for path, c in stored if path.endswith("index")]) == 2
    assert offs == [3 * SLOT_BYTES + sum(sizes[:i]) for i in range(len(sizes))]
    arr = zarr.open_array(store, path="segments/s/data", mode="r")
    got = np.asarray(arr[3 * SLOT_BYTES : 3 * SLOT_BYTES + chunks * DATA_CHUNK])
    np.testing.assert_array_equal(got[: expected.size], expected)
    assert not got[expected.size :].any()  # the last chunk is padded with zeros
    index = zarr.open_array(store, path="segments/s/index", mode="r")
    np.testing.assert_array_equal(np.asarray(index[idx : idx + rows.size]), rows)


def test_a_writer_read_as_it_writes_cannot_hold_its_tails(tmp_path):
    store = LocalStore(str(tmp_path))
    create_segment(store, "s", compression.zarr_compressors(None))
    with pytest.raises(ValueError, match="cannot hold its tails"):
        SlotWriter(OpenSegment(store, "s"), 0, ArrayCache(store), hold_tails=True)


def test_direct_path_is_used_for_local_zstd(tmp_path):
    store = LocalStore(str(tmp_path))
    create_segment(store, "s", compression.zarr_compressors("zstd"))
    w = SlotWriter(OpenSegment(store, "s"), 0)
    w.write_data(np.full(10, 7, dtype=np.uint8))
    w.write_data(np.full(10, 8, dtype=np.uint8))
    assert w._data._put._root is not None  # verified after the first write, still on
    arr = zarr.open_array(store, path="segments/s/data", mode="r")
    assert np.asarray(arr[:20]).tolist() == [7] * 10 + [8] * 10


@pytest.mark.parametrize("concurrent", [True, False])
def test_many_chunks_go_through_zarr_only_for_a_waiting_caller(tmp_path, monkeypatch, concurrent):
    """A write of many chunks goes to zarr (which encodes them on both cores) for a caller that waits for
    it; a writer behind other work (an eval task's) stores them itself, one after another, since zarr's
    threads would take the GIL from that work. Either way zarr reads back every byte."""
    store = LocalStore(str(tmp_path))
    create_segment(store, "s", compression.zarr_compressors("zstd"))
    through_zarr: list[int] = []
    setitem = zarr.Array.__setitem__

    def counted(self, selection, value):  # zarr's own write, counted
        through_zarr.append(np.asarray(value).size)
        setitem(self, selection, value)

    monkeypatch.setattr(zarr.Array, "__setitem__", counted)
    w = SlotWriter(OpenSegment(store, "s"), 0, concurrent=concurrent)
    first = np.full(10, 1, dtype=np.uint8)
    many = (np.arange(5 * DATA_CHUNK + 123) % 251).astype(np.uint8)
    w.write_data(first)
    w.write_data(many)
    assert any(size > 2 * DATA_CHUNK for size in through_zarr) is concurrent, through_zarr
    arr = zarr.open_array(store, path="segments/s/data", mode="r")
    np.testing.assert_array_equal(np.asarray(arr[: first.size + many.size]), np.concatenate([first, many]))


@pytest.mark.parametrize("concurrent", [True, False])
def test_a_direct_format_zarr_cannot_read_switches_the_direct_path_off(tmp_path, monkeypatch, concurrent):
    """If zarr cannot read back the first chunk stored directly (a zarr whose chunk format differs from
    what the direct path writes), the direct path is switched off and the write redone through zarr: the
    data reads back whole, also when that first write is many chunks (a task's writer's first flush)."""
    import numcodecs

    class Unreadable(numcodecs.Zstd):  # what the direct path encodes with; zarr keeps its own codec
        def encode(self, buf):
            return b"not a chunk zarr can read"

    monkeypatch.setattr(numcodecs, "Zstd", Unreadable)
    store = LocalStore(str(tmp_path))
    create_segment(store, "s", compression.zarr_compressors("zstd"))
    w = SlotWriter(OpenSegment(store, "s"), 0, concurrent=concurrent)
    many = (np.arange(4 * DATA_CHUNK + 5) % 253).astype(np.uint8)
    w.write_data(many)
    w.write_data(many[:7])
    assert w._data._put._root is None  # switched off
    arr = zarr.open_array(store, path="segments/s/data", mode="r")
    np.testing.assert_array_equal(np.asarray(arr[: many.size + 7]), np.concatenate([many, many[:7]]))


def test_torn_or_odd_hint_never_gives_a_wrong_latest(tmp_path):
    backend = open_backend(str(tmp_path))
    for v in range(5):
        assert commit_manifest(backend, Manifest(version=v))
    assert backend.read("versions/LATEST") == b"0000000004"
    assert latest_version(backend) == 4
    for junk in (b"", b"00000", b"0000000001", b"0000000099", b"garbage!!!", b"00000000\x0004"):
        with open(tmp_path / "versions" / "LATEST", "wb") as fh:
            fh.write(junk)
        assert latest_version(backend) == 4, junk
    # A shorter value after a longer one leaves no trailing bytes.
    with open(tmp_path / "versions" / "LATEST", "wb") as fh:
        fh.write(b"00000000000000000002")
    backend.write_hint("versions/LATEST", b"0000000003")
    assert backend.read("versions/LATEST") == b"0000000003"
    assert not commit_manifest(backend, Manifest(version=4))  # still exclusive


def test_gather_cuts_runs_from_cached_chunks_and_refuses_runs_past_the_end(tmp_path):
    """ArrayCache.gather returns the caller's own runs (any order, repeats, across chunks) and refuses
    runs that start before the array or end past it, naming its metadata."""
    from lakecompute.errors import DatasetCorruptError
    from lakecompute.versioned._segments import create_typed_array

    store = LocalStore(str(tmp_path))
    values = np.arange(3000, dtype=np.int64)
    arr = create_typed_array(store, "tensors/t/a", (3000,), (1000,), np.dtype("int64"), (), {})
    arr[:] = values
    cache = ArrayCache(LocalStore(str(tmp_path)))
    starts = np.array([2990, 5, 995, 5, 1500])
    got = cache.gather("tensors/t/a", starts, 10)
    np.testing.assert_array_equal(got, np.stack([values[s : s + 10] for s in starts]))
    got[...] = -1
    np.testing.assert_array_equal(cache.gather("tensors/t/a", starts[:1], 10)[0], values[2990:])
    for bad in ([2991], [-1, 5]):
        with pytest.raises(DatasetCorruptError, match=r"run past its 3000 items") as info:
            cache.gather("tensors/t/a", np.array(bad), 10)
        assert info.value.file == "tensors/t/a/zarr.json"


@pytest.mark.parametrize("codec", [None, "zstd"])
def test_chunk_files_are_whole_after_short_writes(tmp_path, monkeypatch, codec):
    """A chunk file is written by ``os.writev`` from the parts of its frame, not joined first; a write that
    stores fewer bytes than asked (as the kernel may, interrupted or at a size limit) is continued where it
    ended, so every chunk reads back through zarr as the bytes appended, its checksum matching."""
    import os

    real = os.writev
    calls: list[int] = []

    def short_writev(fd: int, buffers: list) -> int:
        left, cut = 1000 + 37 * len(calls), []  # fewer bytes than any call asks for, a new count each time
        for buffer in buffers:
            view = memoryview(buffer).cast("B")[:left]
            cut.append(view)
            left -= len(view)
            if left <= 0:
                break
        calls.append(len(buffers))
        return real(fd, cut)

    monkeypatch.setattr(os, "writev", short_writev)
    through_zarr: list[int] = []
    setitem = zarr.Array.__setitem__

    def counted(self, selection, value):  # zarr's own write (the direct path's fallback), counted
        through_zarr.append(np.asarray(value).size)
        setitem(self, selection, value)

    monkeypatch.setattr(zarr.Array, "__setitem__", counted)
    store = LocalStore(str(tmp_path))
    create_segment(store, "s", compression.zarr_compressors(codec))
    w = SlotWriter(OpenSegment(store, "s"), 0, concurrent=False)
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, 3 * DATA_CHUNK + 5, dtype=np.uint8)  # incompressible: frames of raw blocks
    raw[DATA_CHUNK : DATA_CHUNK + 300_000] = 0  # and runs of one byte
    assert w.write_data(raw) == 0
    got = zarr.open_array(store, path="segments/s/data", mode="r")[: raw.size]
    np.testing.assert_array_equal(np.asarray(got), raw)
    assert len(calls) > raw.size // 20_000  # every file took many calls
    assert max(calls) > 2  # the frames went out as parts
    assert through_zarr == []  # every chunk stored directly
    assert w._data._put._root is not None  # and zarr read the first back as written
    assert not list(tmp_path.rglob(f"{TEMP_PREFIX}*"))
