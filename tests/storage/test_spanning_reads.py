"""Reads over many chunks (a task's block, a whole tensor): the chunks they cover whole are checked before
anything is allocated and decoded straight into the result; the ones they cover in part go through the
cache. Damage in any of them is DatasetCorruptError naming the chunk, never zeros or garbage."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned._segments import DATA_CHUNK

N = 2_500  # 4 KiB samples: 256 to a 1 MiB chunk, ten chunks


def _values() -> np.ndarray:
    rng = np.random.default_rng(7)
    values = rng.integers(0, 50, size=(N, 1024), dtype=np.int32)
    values[:, ::3] = 0  # compressible, as real data is
    return values


def _make(path: Path, compression: str | None) -> tuple[lc.Dataset, str]:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int32", chunk_compression=compression)
    ds.x.extend(_values())
    (frag,) = dataset_core(ds).txn.head.tensors["x"].fragments
    assert frag.off % DATA_CHUNK == 0
    return ds, f"segments/{frag.seg}/data/c"


@pytest.mark.parametrize("compression", ["zstd", None])
def test_ranges_over_many_chunks_read_exactly(tmp_path: Path, compression: str | None) -> None:
    """Ranges that start and end inside chunks, or on their edges, read the values written."""
    _make(tmp_path / "ds", compression)
    values = _values()
    for a, b in [(0, N), (1, N - 1), (256, 256 * 7), (300, 2000), (255, 1537), (0, 256 * 5)]:
        np.testing.assert_array_equal(lc.load(str(tmp_path / "ds")).x[a:b].numpy(), values[a:b])
    reader = lc.load(str(tmp_path / "ds"))
    np.testing.assert_array_equal(reader.x[100:1100].numpy(), values[100:1100])
    np.testing.assert_array_equal(reader.x[1100:2100].numpy(), values[1100:2100])
    reads = dataset_core(reader).cache.chunk_reads
    # Chunk 4 holds samples 1024..1280: both ranges need it, and it is decoded once.
    assert sorted(reads.values()) == [1] * len(reads)
    assert len(reads) == 9  # chunks 0..8 (samples 100..2100)


@pytest.mark.parametrize("compression", ["zstd", None])
@pytest.mark.parametrize("damage", ["missing", "flip", "truncate", "empty"])
def test_damage_inside_a_long_range_is_named(tmp_path: Path, compression: str | None, damage: str) -> None:
    """A chunk in the middle of a long read, missing or damaged, fails the read naming that chunk."""
    _, folder = _make(tmp_path / "ds", compression)
    key = f"{folder}/5"
    file = tmp_path / "ds" / key
    data = bytearray(file.read_bytes())
    if damage == "missing":
        os.remove(file)
    else:
        if damage == "flip":
            data[len(data) // 2] ^= 0x10
        data = data[: len(data) // 2] if damage == "truncate" else data
        file.write_bytes(b"" if damage == "empty" else bytes(data))
    with pytest.raises(lc.DatasetCorruptError) as info:
        lc.load(str(tmp_path / "ds")).x[10:2400].numpy()
    assert info.value.file == key
    assert info.value.tensor == "x"
    expected = "the chunk is missing" if damage == "missing" else "the chunk does not decode"
    assert info.value.reason.startswith(expected)


def test_a_frame_declaring_another_size_is_refused_before_decoding(tmp_path: Path) -> None:
    """A chunk whose zstd header declares a size other than the chunk's is refused (its checksum fixed up,
    as an attacker would): nothing is decoded into the result from it."""
    import google_crc32c

    _, folder = _make(tmp_path / "ds", "zstd")
    file = tmp_path / "ds" / f"{folder}/3"
    data = bytearray(file.read_bytes())
    payload = data[:-4]
    descriptor = payload[4]
    assert descriptor >> 6 == 2  # a 4-byte size: 1 MiB
    at = 5 + (0 if (descriptor >> 5) & 1 else 1)
    payload[at : at + 4] = (DATA_CHUNK // 2).to_bytes(4, "little")
    file.write_bytes(bytes(payload) + int(google_crc32c.value(bytes(payload))).to_bytes(4, "little"))
    with pytest.raises(lc.DatasetCorruptError) as info:
        lc.load(str(tmp_path / "ds")).x[:].numpy()
    assert info.value.file == f"{folder}/3"
    assert f"expected {DATA_CHUNK} bytes, got {DATA_CHUNK // 2}" in info.value.reason


def test_results_are_the_callers_own(tmp_path: Path) -> None:
    """Changing what a long read returned changes nothing that later reads return."""
    _make(tmp_path / "ds", "zstd")
    ds = lc.load(str(tmp_path / "ds"))
    first = ds.x[200:2300].numpy()
    first[:] = -1
    np.testing.assert_array_equal(ds.x[200:2300].numpy(), _values()[200:2300])
    np.testing.assert_array_equal(ds.x[250].numpy(), _values()[250])
