"""The direct local chunk reader falls back to zarr for structural causes only, and then says so once.

Whether the direct reader may read an array is decided from the array's metadata (a probe array with
the same dtype and codecs, written by zarr in memory), never from the dataset's own chunks: a chunk a
concurrent writer is filling may differ between two reads, which is no reason to warn.
"""

from __future__ import annotations

import multiprocessing
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage._probes import LAYOUT_PROBES
from tests.helpers import wait_until

_FORK = multiprocessing.get_context("fork")
COMMITS = 60
PER_COMMIT = 7


@pytest.fixture
def fresh_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget this process's layout verdicts and whether it warned, so the test decides them anew."""
    monkeypatch.setattr(LAYOUT_PROBES, "verdicts", {})
    monkeypatch.setattr(LAYOUT_PROBES, "warned", False)


@pytest.mark.usefixtures("fresh_probes")
def test_direct_reader_structural_fallback_warns_once_and_reads_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When chunks as this zarr writes them do not decode directly to what zarr wrote (a zarr that lays
    chunks out another way), values come from zarr, and one LakeComputeWarning, pointing at the
    caller's line, says why reads got slower."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.create_tensor("y", dtype="int64")
    ds.create_tensor("t", htype="text")
    ds.x.extend(np.arange(100))
    ds.y.extend(np.arange(100) * 3)
    ds.t.extend([f"s{i}" for i in range(10)])
    real = LAYOUT_PROBES.decode
    monkeypatch.setattr(LAYOUT_PROBES, "decode", lambda *args: real(*args)[::-1].copy())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fresh = lc.load(str(tmp_path / "ds"))
        values = (fresh.x.numpy().tolist(), fresh.y.numpy().tolist(), fresh.t.text())
        again = lc.load(str(tmp_path / "ds")).x.numpy().tolist()
    assert values == (list(range(100)), [3 * i for i in range(100)], [f"s{i}" for i in range(10)])
    assert again == list(range(100))
    assert [w.category for w in seen] == [lc.LakeComputeWarning]
    ours = seen
    assert "through zarr itself" in str(ours[0].message)
    assert "decodes directly to other values" in str(ours[0].message)
    assert ours[0].filename == __file__


@pytest.mark.usefixtures("fresh_probes")
def test_direct_reader_agreeing_layouts_read_directly_without_a_warning(tmp_path: Path) -> None:
    """The layouts lakecompute writes (bytes segments, int64 and uint8 data, zstd or not, crc32c) pass
    the probe: read directly, silently."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.create_tensor("u", dtype="uint8", chunk_compression=None)
    ds.create_tensor("t", htype="text")
    ds.x.extend(np.arange(50))
    ds.u.extend(np.arange(50, dtype=np.uint8))
    ds.t.extend(["a", "bb"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh = lc.load(str(tmp_path / "ds"))
        assert fresh.x.numpy().tolist() == list(range(50))
        assert fresh.u.numpy().tolist() == list(range(50))
        assert fresh.t.text() == ["a", "bb"]
    assert LAYOUT_PROBES.verdicts
    assert all(verdict is None for verdict in LAYOUT_PROBES.verdicts.values())


def _writer(path: str, reads: Any) -> None:
    ds = lc.load(path)
    for c in range(COMMITS):
        if c and c % 20 == 0:
            # Two more reads finish before going on: the second began after this pause did, so the reader
            # sees this version (on a busy machine it could otherwise see the first and the last only).
            seen = reads.value
            wait_until(lambda: reads.value >= seen + 2, 60, "the reader to read this version")  # noqa: B023
        with ds:
            for j in range(PER_COMMIT):
                ds.x.append(c * PER_COMMIT + j)
                if j == 3:
                    _ = ds.x[-1].numpy()  # part of the commit reaches its chunk before the commit


@pytest.mark.usefixtures("fresh_probes")
def test_direct_reader_never_warns_while_a_concurrent_writer_fills_a_chunk(tmp_path: Path) -> None:
    """Readers that load and read while another process keeps filling the same chunks (commit after
    commit) read whole commits and never warn: no verdict depends on bytes a writer may be changing."""
    path = str(tmp_path / "filling")
    ds = lc.empty(path, overwrite=True)
    ds.create_tensor("x", dtype="int64")
    reads = _FORK.Value("i", 0)
    writer = _FORK.Process(target=_writer, args=(path, reads))
    seen: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", lc.LakeComputeWarning)
        writer.start()
        try:
            while writer.is_alive() or not seen:
                values: Any = lc.load(path).x.numpy()
                assert values.tolist() == list(range(len(values)))
                assert len(values) % PER_COMMIT == 0
                seen.append(len(values))
                with reads.get_lock():
                    reads.value += 1
        finally:
            writer.join(120)
        final = lc.load(path).x.numpy()
    assert writer.exitcode == 0
    assert final.tolist() == list(range(COMMITS * PER_COMMIT))
    assert len(set(seen)) >= 3, f"the reader saw too few versions to test anything: {sorted(set(seen))}"
    assert all(verdict is None for verdict in LAYOUT_PROBES.verdicts.values())
