"""Integrity on read: missing, truncated or corrupt chunks, missing segments, damaged array metadata and
vacuumed versions raise DatasetCorruptError naming the tensor, the samples and the storage key — never
zeros, never a raw zarr, JSON or numpy error."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned import Fragment
from lakecompute.versioned._segments import DATA_CHUNK, INDEX_CHUNK

_FORK = multiprocessing.get_context("fork")
N = 3000  # x: 3000 samples of 1 KiB: three chunks of its segment


def _make(path: Path) -> lc.Dataset:
    """x: 3,000 fixed-shape int32 samples (1 KiB each), r: ragged, img: PNG; one commit."""
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int32", chunk_compression=None)
        ds.create_tensor("r", dtype="int16")
        ds.create_tensor("img", htype="image", sample_compression="png")
        ds.x.extend(np.arange(N * 256, dtype=np.int32).reshape(N, 256))
        ds.r.extend([np.arange(i % 7, dtype=np.int16) for i in range(50)])
        ds.img.extend([np.full((5, 6, 3), i, np.uint8) for i in range(50)])
    return ds


def _frag(ds: lc.Dataset, tensor: str) -> Fragment:
    (frag,) = dataset_core(ds).txn.head.tensors[tensor].fragments
    return frag


def _chunk(path: Path, frag: Fragment, array: str = "data", which: int = 1) -> str:
    """The key of the which-th chunk a fragment's data (or index rows) use."""
    if array == "data":
        c = frag.off // DATA_CHUNK + which
    else:
        assert frag.idx is not None
        c = frag.idx // INDEX_CHUNK + which
    key = f"segments/{frag.seg}/{array}/c/{c}"
    assert (path / key).exists(), key
    return key


def _reads(ds_path: Path, read: Callable[[lc.Dataset], Any]) -> lc.DatasetCorruptError:
    with pytest.raises(lc.DatasetCorruptError) as info:
        read(lc.load(str(ds_path)))
    return info.value


def test_integrity_missing_chunk_names_tensor_samples_and_key(tmp_path: Path) -> None:
    """A chunk deleted from inside a fragment's range raises instead of reading as zeros."""
    ds = _make(tmp_path / "ds")
    key = _chunk(tmp_path / "ds", _frag(ds, "x"))
    os.remove(tmp_path / "ds" / key)
    err = _reads(tmp_path / "ds", lambda d: d.x[1500].numpy())
    assert (err.file, err.tensor, err.samples, err.vacuumed) == (key, "x", (1500, 1501), False)
    assert err.reason == "the chunk is missing"
    assert f"cannot read {key!r} (tensor 'x', samples [1500:1501]: the chunk is missing)" in str(err)
    assert "restore it from a backup" in str(err)
    # The whole tensor at once (a large read) fails the same way; samples in other chunks still read.
    assert _reads(tmp_path / "ds", lambda d: d.x.numpy()).file == key
    np.testing.assert_array_equal(lc.load(str(tmp_path / "ds")).x[5].numpy(), np.arange(256) + 5 * 256)


def test_integrity_missing_index_chunk(tmp_path: Path) -> None:
    """A missing chunk of index rows raises naming the index key."""
    ds = _make(tmp_path / "ds")
    key = _chunk(tmp_path / "ds", _frag(ds, "r"), "index", which=0)
    os.remove(tmp_path / "ds" / key)
    err = _reads(tmp_path / "ds", lambda d: d.r[3].numpy())
    assert (err.file, err.tensor, err.samples) == (key, "r", (3, 4))


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_integrity_damaged_chunk_fails_its_checksum(tmp_path: Path, damage: str) -> None:
    """A truncated, bit-flipped or emptied chunk fails zarr's crc32c check: DatasetCorruptError naming it."""
    ds = _make(tmp_path / "ds")
    key = _chunk(tmp_path / "ds", _frag(ds, "x"))
    file = tmp_path / "ds" / key
    data = bytearray(file.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[1000] ^= 0x01
    else:
        data = bytearray()
    file.write_bytes(bytes(data))
    err = _reads(tmp_path / "ds", lambda d: d.x[1500].numpy())
    assert (err.file, err.tensor) == (key, "x")
    assert err.reason.startswith("the chunk does not decode")


def test_integrity_missing_segment(tmp_path: Path) -> None:
    """A deleted segment raises naming its array metadata, for every tensor stored there."""
    ds = _make(tmp_path / "ds")
    seg = _frag(ds, "img").seg
    shutil.rmtree(tmp_path / "ds" / "segments" / seg)
    err = _reads(tmp_path / "ds", lambda d: d.img[0].numpy())
    assert (err.file, err.tensor, err.samples) == (f"segments/{seg}/index/zarr.json", "img", (0, 1))
    assert err.reason == "the array's metadata is missing"


@pytest.mark.parametrize("damage", ["truncate", "not-an-array", "wrong-dtype", "huge-chunks"])
def test_integrity_damaged_array_metadata(tmp_path: Path, damage: str) -> None:
    """A damaged zarr.json of a segment array raises naming it (no JSONDecodeError, no wrong values)."""
    ds = _make(tmp_path / "ds")
    key = f"segments/{_frag(ds, 'x').seg}/data/zarr.json"
    file = tmp_path / "ds" / key
    meta = json.loads(file.read_text())
    if damage == "truncate":
        file.write_text(file.read_text()[:40])
    elif damage == "not-an-array":
        file.write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    elif damage == "wrong-dtype":
        file.write_text(json.dumps({**meta, "data_type": "float64"}))
    else:
        meta["chunk_grid"]["configuration"]["chunk_shape"] = [1 << 40]
        file.write_text(json.dumps(meta))
    err = _reads(tmp_path / "ds", lambda d: d.x[0].numpy())
    assert (err.file, err.tensor, err.samples) == (key, "x", (0, 1))


def test_integrity_compacted_typed_array(tmp_path: Path) -> None:
    """A compacted tensor's typed array is verified too: missing chunk, damaged chunk, damaged metadata."""
    ds = _make(tmp_path / "ds")
    ds.compact()
    frag = _frag(ds, "x")
    assert frag.seg.startswith("@tensors/x/")
    folder = tmp_path / "ds" / frag.seg[1:]
    chunks = sorted((folder / "c").iterdir(), key=lambda p: int(p.name.split("/")[0]))
    assert len(chunks) >= 3
    key = f"{frag.seg[1:]}/c/1/0"
    saved = (folder / "c" / "1" / "0").read_bytes()
    os.remove(folder / "c" / "1" / "0")
    err = _reads(tmp_path / "ds", lambda d: d.x.numpy())
    assert (err.file, err.tensor, err.reason) == (key, "x", "the chunk is missing")
    (folder / "c" / "1" / "0").write_bytes(saved[:-10])
    assert _reads(tmp_path / "ds", lambda d: d.x.numpy()).reason.startswith("the chunk does not decode")
    (folder / "c" / "1" / "0").write_bytes(saved)
    (folder / "zarr.json").write_text("{")
    err = _reads(tmp_path / "ds", lambda d: d.x[0].numpy())
    assert err.file == f"{frag.seg[1:]}/zarr.json"
    assert "does not parse" in err.reason


def test_integrity_typed_array_shorter_than_its_fragment(tmp_path: Path) -> None:
    """A typed array with fewer rows than its fragment names is refused, not clipped."""
    ds = _make(tmp_path / "ds")
    ds.compact()
    frag = _frag(ds, "x")
    file = tmp_path / "ds" / frag.seg[1:] / "zarr.json"
    meta = json.loads(file.read_text())
    meta["shape"][0] = 10
    file.write_text(json.dumps(meta))
    err = _reads(tmp_path / "ds", lambda d: d.x[0].numpy())
    assert "expected rows 0..3000" in err.reason


def test_integrity_old_segments_without_checksums_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments written before chunks carried checksums read as before; a missing chunk still raises."""
    from lakecompute.versioned import _segments

    monkeypatch.setattr(_segments, "checked_codecs", lambda compressors: tuple(compressors))
    monkeypatch.setattr(_segments, "segment_codecs", lambda compressors: tuple(compressors))
    ds = _make(tmp_path / "ds")
    monkeypatch.undo()
    seg = _frag(ds, "x").seg
    codecs = zarr.open_array(str(tmp_path / "ds"), path=f"segments/{seg}/data", mode="r").compressors
    assert codecs == ()
    again = lc.load(str(tmp_path / "ds"))
    np.testing.assert_array_equal(again.x.numpy(), np.arange(N * 256, dtype=np.int32).reshape(N, 256))
    assert again.r[6].numpy().tolist() == list(range(6))
    key = _chunk(tmp_path / "ds", _frag(ds, "x"))
    os.remove(tmp_path / "ds" / key)
    assert _reads(tmp_path / "ds", lambda d: d.x[1500].numpy()).file == key


def test_integrity_old_compacted_array_reads_skipped_zero_chunks(tmp_path: Path) -> None:
    """A typed array from before checksums (zarr skipped chunks of zeros then) reads those chunks as zeros."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("x", dtype="uint8")
    values = np.zeros((3000, 1024), np.uint8)
    values[2048:] = 7  # chunks of 1,024 rows: 0 and 1 are zeros
    ds.x.extend(values)
    ds.compact()
    path = _frag(ds, "x").seg[1:]
    shutil.rmtree(tmp_path / "ds" / path / "c")
    meta = json.loads((tmp_path / "ds" / path / "zarr.json").read_text())
    meta["codecs"] = [c for c in meta["codecs"] if c["name"] != "crc32c"]
    (tmp_path / "ds" / path / "zarr.json").write_text(json.dumps(meta))
    old = zarr.open_array(str(tmp_path / "ds"), path=path, mode="r+")
    old[:] = values  # rewritten without checksums; zarr stores no chunk of zeros
    assert sorted(p.name for p in (tmp_path / "ds" / path / "c").iterdir()) == ["2"]
    np.testing.assert_array_equal(lc.load(str(tmp_path / "ds")).x.numpy(), values)


def test_integrity_huge_total_is_refused_without_allocating(tmp_path: Path) -> None:
    """A manifest naming trillions of samples fails at the first chunk that is not stored (no MemoryError)."""
    ds = _make(tmp_path / "ds")
    key = tmp_path / "ds" / "versions" / f"{ds.version:010d}.json"
    body = json.loads(key.read_text())
    body["tensors"]["r"]["fragments"][0][3] = 3 * 10**12  # total: ~22 TiB of index rows
    key.write_text(json.dumps(body))
    err = _reads(tmp_path / "ds", lambda d: d.r[0].numpy())
    assert err.file.startswith(f"segments/{_frag(ds, 'r').seg}/index/c/")
    assert err.reason == "the chunk is missing"


def test_integrity_index_rows_checked_against_the_fragment(tmp_path: Path) -> None:
    """Index rows with negative shapes or sizes that disagree with the fragment raise (no read elsewhere)."""
    ds = _make(tmp_path / "ds")
    frag = _frag(ds, "r")
    assert frag.idx is not None
    index = zarr.open_array(str(tmp_path / "ds"), path=f"segments/{frag.seg}/index", mode="r+")
    index.with_config({"write_empty_chunks": True})[frag.idx : frag.idx + 2] = [-4, -2]
    err = _reads(tmp_path / "ds", lambda d: d.r[10].numpy())
    assert "a negative size or shape" in err.reason
    assert err.file == f"segments/{frag.seg}/index/c/{frag.idx // INDEX_CHUNK}"
    index.with_config({"write_empty_chunks": True})[frag.idx : frag.idx + 2] = [10_000, 5_000]
    assert "a sample of 10000 bytes" in _reads(tmp_path / "ds", lambda d: d.r[10].numpy()).reason


def test_integrity_symlinked_chunk_folder_is_refused(tmp_path: Path) -> None:
    """A chunk folder that is a symbolic link (possibly out of the dataset) is refused, not followed."""
    ds = _make(tmp_path / "ds")
    seg = _frag(ds, "x").seg
    chunks = tmp_path / "ds" / "segments" / seg / "data" / "c"
    shutil.move(chunks, tmp_path / "elsewhere")
    chunks.symlink_to(tmp_path / "elsewhere")
    err = _reads(tmp_path / "ds", lambda d: d.x[0].numpy())
    assert err.file == f"segments/{seg}/data/c"
    assert "symbolic link" in err.reason


def test_integrity_memory_store_missing_chunk(tmp_path: Path) -> None:
    """A missing chunk is caught on any store (here mem://), not only on a local disk."""
    ds = lc.empty("mem://integrity-missing", overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(1000))
    seg = _frag(ds, "x").seg
    key = f"segments/{seg}/data/c/0"
    dataset_core(ds).backend.delete(key)  # the memory store's dict is the backend's
    with pytest.raises(
        lc.DatasetCorruptError, match=r"cannot read 'segments/.*/data/c/0' \(tensor 'x'"
    ) as info:
        lc.load("mem://integrity-missing").x.numpy()
    assert info.value.path == "mem://integrity-missing"


def _write_in_child(path: str, values: Any, create: bool) -> None:
    """In a child process (so its segments belong to a writer that is gone): (re)write tensor x."""
    ds = lc.empty(path) if create else lc.load(path)
    with ds:
        if not create:
            ds.delete_tensor("x")
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(values)


def _in_child(*args: Any) -> None:
    proc = _FORK.Process(target=_write_in_child, args=args)
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0


def test_integrity_reader_of_vacuumed_version_is_told_to_reopen(tmp_path: Path) -> None:
    """A handle on a version that vacuum(keep_versions=1) removed gets DatasetCorruptError saying so."""
    path = str(tmp_path / "ds")
    _in_child(path, np.arange(5000), True)
    old = lc.load(path)
    old.x[0].numpy()  # opens the segment: its data chunk is cached, the others are read later
    _in_child(path, -np.arange(10), False)
    removed = lc.load(path).vacuum(grace_seconds=0, keep_versions=1)
    assert removed["versions"] >= 1
    assert removed["segments"] >= 1
    dataset_core(old).cache.clear()
    with pytest.raises(lc.DatasetCorruptError) as info:
        old.x[4000].numpy()
    err = info.value
    assert err.vacuumed
    assert (err.tensor, err.samples) == ("x", (4000, 4001))
    assert "vacuum() removed it with the version being read" in str(err)
    assert str(err).endswith("That version is gone. Reopen the latest version with lc.load(path).")
    fresh = lc.load(path, read_only=True)
    before = lc.Dataset(dataset_core(fresh).backend, dataset_core(old).txn.base, read_only=True)
    with pytest.raises(lc.DatasetCorruptError, match=r"Reopen the latest version with lc\.load"):
        before.x.numpy()  # a handle opened before
    assert fresh.x.numpy().tolist() == (-np.arange(10)).tolist()


def test_integrity_damaged_root_metadata(tmp_path: Path) -> None:
    """A truncated root zarr.json next to committed versions is a damaged dataset, not 'no dataset'."""
    path = tmp_path / "ds"
    _make(path)
    (path / "zarr.json").write_text('{"zarr_format": 3, "node_ty')
    with pytest.raises(
        lc.DatasetCorruptError, match=r"cannot read 'zarr\.json' \(the dataset's root metadata"
    ):
        lc.load(str(path))
    assert not lc.exists(str(path))
    with pytest.raises(lc.DatasetCorruptError, match=r"Pass overwrite=True to replace the dataset"):
        lc.empty(str(path))
    lc.delete(str(path))
    assert not path.exists()


def test_integrity_symlinked_chunk_file_is_refused(tmp_path: Path) -> None:
    """A single chunk file that is a symbolic link is refused by name, not followed."""
    ds = _make(tmp_path / "ds")
    key = _chunk(tmp_path / "ds", _frag(ds, "x"))
    (tmp_path / "ds" / key).rename(tmp_path / "elsewhere")
    (tmp_path / "ds" / key).symlink_to(tmp_path / "elsewhere")
    err = _reads(tmp_path / "ds", lambda d: d.x[1500].numpy())
    assert (err.file, err.tensor) == (key, "x")
    assert "the chunk is a symbolic link" in err.reason
    assert "symbolic link" in _reads(tmp_path / "ds", lambda d: d.x.numpy()).reason  # through zarr too
