"""Every damage case through every read path: tensor reads, views, eval input, ds.batches, ds.pytorch
with 0 and 2 workers, token blocks and compact each raise DatasetCorruptError naming the tensor and
samples — never a wrong value, a raw error or a large allocation (issue 15: one reader)."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned import Fragment
from lakecompute.versioned._segments import DATA_CHUNK, INDEX_CHUNK


@dataclass(frozen=True)
class Damaged:
    """A damaged dataset of one tensor: where it is, the tensor, and the storage key at fault."""

    path: Path
    tensor: str
    key: str
    length: int


def _frag(ds: lc.Dataset, tensor: str) -> Fragment:
    (frag,) = dataset_core(ds).txn.head.tensors[tensor].fragments
    return frag


def _index_rows_disagree(path: Path) -> Damaged:
    """r: 50 ragged int16 samples; sample 1's index row says 1 value (2 bytes) where 2 are stored, so
    every later sample would be read shifted (the issue's ``ds.batches(6)`` case)."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("r", dtype="int16")
    ds.r.extend([np.arange(i % 7 + 1, dtype=np.int16) for i in range(50)])
    frag = _frag(ds, "r")
    assert frag.idx is not None
    index = zarr.open_array(str(path), path=f"segments/{frag.seg}/index", mode="r+")
    index.with_config({"write_empty_chunks": True})[frag.idx + 2 : frag.idx + 4] = [2, 1]
    return Damaged(path, "r", f"segments/{frag.seg}/index/c/{frag.idx // INDEX_CHUNK}", 50)


def _huge_sample(path: Path) -> Damaged:
    """h: one int64 sample of 30 values (240 stored bytes) that the manifest declares as 10**10 values
    (74.5 GiB, as a (100000, 100000) sample would be): the declared size runs past what is stored."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("h", dtype="int64")
    ds.h.append(np.arange(30))
    frag = _frag(ds, "h")
    file = path / "versions" / f"{ds.version:010d}.json"
    body = json.loads(file.read_text())
    (entry,) = body["tensors"]["h"]["fragments"]
    assert (entry[2], entry[5]) == (240, [30])
    entry[2], entry[5] = 8 * 10**10, [10**10]
    file.write_text(json.dumps(body))
    last = (frag.off + 8 * 10**10 - 1) // DATA_CHUNK
    return Damaged(path, "h", f"segments/{frag.seg}/data/c/{last}", 1)


def _undecodable_png(path: Path, compression: str = "png") -> Damaged:
    """img: 20 PNG (or ``compression``) images in two commits (two fragments: compact() rewrites them);
    image 3's first bytes are overwritten through zarr, so its chunk passes its checksum but the image
    does not decode."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("img", htype="image", sample_compression=compression)
    ds.img.extend([np.full((5, 6, 3), i, np.uint8) for i in range(10)])
    ds = lc.load(str(path))  # another handle writes to another slot: a second fragment
    ds.img.extend([np.full((5, 6, 3), i, np.uint8) for i in range(10, 20)])
    frag, _ = dataset_core(ds).txn.head.tensors["img"].fragments
    assert frag.idx is not None
    sizes = np.asarray(
        zarr.open_array(str(path), path=f"segments/{frag.seg}/index")[frag.idx : frag.idx + 40]
    )
    at = frag.off + int(sizes[0:6:2].sum())  # image 3's first byte
    data = zarr.open_array(str(path), path=f"segments/{frag.seg}/data", mode="r+")
    data.with_config({"write_empty_chunks": True})[at : at + 16] = np.arange(16, dtype=np.uint8)
    return Damaged(path, "img", f"segments/{frag.seg}/data/c/{at // DATA_CHUNK}", 20)


def _x(path: Path) -> tuple[lc.Dataset, str]:
    """x: 3,000 samples of 256 int32 (three 1 MiB chunks); returns it and the key of its second chunk."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int32", chunk_compression=None)
    ds.x.extend(np.arange(3000 * 256, dtype=np.int32).reshape(3000, 256))
    frag = _frag(ds, "x")
    key = f"segments/{frag.seg}/data/c/{frag.off // DATA_CHUNK + 1}"
    assert (path / key).exists()
    return ds, key


def _missing_chunk(path: Path) -> Damaged:
    """x with its second data chunk deleted."""
    _, key = _x(path)
    os.remove(path / key)
    return Damaged(path, "x", key, 3000)


def _flipped_byte(path: Path) -> Damaged:
    """x with one bit flipped inside its second data chunk (its crc32c no longer matches)."""
    _, key = _x(path)
    data = bytearray((path / key).read_bytes())
    data[1000] ^= 0x01
    (path / key).write_bytes(bytes(data))
    return Damaged(path, "x", key, 3000)


DAMAGE: dict[str, Callable[[Path], Damaged]] = {
    "index-rows-disagree": _index_rows_disagree,
    "huge-sample": _huge_sample,
    "undecodable-png": _undecodable_png,
    "missing-chunk": _missing_chunk,
    "flipped-byte": _flipped_byte,
}


@lc.compute
def count_values(sample_in: Any, sample_out: Any) -> None:
    """An eval that reads every tensor of its input (module level: sent to workers)."""
    sample_out.n.append(sum(np.asarray(v).size for v in sample_in.to_dict().values()))


def _eval(ds: lc.Dataset, d: Damaged, **options: Any) -> Any:
    """An eval reading every tensor: a damaged input is read inside the function (on first use), and
    is still DatasetCorruptError, not a failed sample, on workers and with ignore_errors too."""
    out = lc.empty(str(d.path.parent / "out"), overwrite=True)
    out.create_tensor("n", dtype="int64")
    return count_values().eval(ds, out, progressbar=False, **options)


READS: dict[str, Callable[[lc.Dataset, Damaged], Any]] = {
    "tensor": lambda ds, d: ds[d.tensor].numpy(aslist=True),
    "sample": lambda ds, d: [ds[d.tensor][i].numpy() for i in range(d.length)],
    "view": lambda ds, d: ds[list(range(d.length))[::-1]][d.tensor].numpy(aslist=True),
    "eval": _eval,
    "eval-ignore-errors": lambda ds, d: _eval(ds, d, ignore_errors=True),
    "eval-2": lambda ds, d: _eval(ds, d, num_workers=2),
    "batches": lambda ds, d: list(ds.batches(6, tensors=d.tensor)),
    "batches-shuffled": lambda ds, d: list(ds.batches(6, tensors=d.tensor, shuffle=True)),
    "batches-2": lambda ds, d: list(ds.batches(6, tensors=d.tensor, num_workers=2)),
    "pytorch-0": lambda ds, d: list(ds.pytorch(6, tensors=d.tensor, num_workers=0)),
    "pytorch-2": lambda ds, d: list(ds.pytorch(6, tensors=d.tensor, num_workers=2)),
    "blocks": lambda ds, d: list(ds[d.tensor].blocks(4).batches(8)),
    "compact": lambda ds, d: ds.compact(),
}
IN_PROCESS = [name for name in READS if not name.endswith("-2")]


@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_read_path_refuses_damaged_data(tmp_path: Path, damage: str, read: str) -> None:
    """Each read path raises DatasetCorruptError naming the tensor, samples within it, and the key."""
    if read == "pytorch-2":
        pytest.importorskip("torch")
    if read == "blocks" and damage == "undecodable-png":
        pytest.skip("token blocks read 1-D integer tensors, not images")
    d = DAMAGE[damage](tmp_path / "ds")
    ds = lc.load(str(d.path))
    with pytest.raises(lc.DatasetCorruptError) as info:
        READS[read](ds, d)
    err = info.value
    assert err.tensor == d.tensor
    assert err.samples is not None
    assert 0 <= err.samples[0] < err.samples[1] <= d.length
    assert err.file == d.key
    assert f"tensor {d.tensor!r}" in str(err)
    assert "restore it from a backup" in str(err)


@pytest.mark.parametrize("read", IN_PROCESS)
def test_huge_declared_sample_allocates_nothing_large(tmp_path: Path, read: str) -> None:
    """A sample declared as 74.5 GiB over 240 stored bytes fails before anything near its size is
    allocated, on every in-process read path (traced: numpy reports its allocations)."""
    d = _huge_sample(tmp_path / "ds")
    ds = lc.load(str(d.path))
    tracemalloc.start()
    try:
        with pytest.raises(lc.DatasetCorruptError, match="the chunk is missing"):
            READS[read](ds, d)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def test_damage_outside_what_is_read_leaves_other_samples_readable(tmp_path: Path) -> None:
    """Samples in intact chunks still read exactly, on range and gather paths alike."""
    d = _missing_chunk(tmp_path / "ds")
    ds = lc.load(str(d.path))
    want = np.arange(256, dtype=np.int32) + 5 * 256
    np.testing.assert_array_equal(ds.x[5].numpy(), want)
    np.testing.assert_array_equal(ds[[7, 5]].x.numpy()[1], want)
    (batch,) = list(ds[0:6].batches(6))
    np.testing.assert_array_equal(batch["x"][5], want)
