"""The direct local chunk reader falls back to zarr when it disagrees with zarr, and says so once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import _cache


def test_direct_reader_disagreeing_with_zarr_warns_once_and_reads_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the direct reader's first chunk differs from zarr's reading of it (a zarr that lays chunks out
    another way), values come from zarr, and one LakeComputeWarning says why reads got slower."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.create_tensor("y", dtype="int64")
    ds.x.extend(np.arange(100))
    ds.y.extend(np.arange(100) * 3)
    real = _cache._ChunkGet._read
    monkeypatch.setattr(_cache._ChunkGet, "_read", lambda self, file, key: real(self, file, key)[::-1].copy())
    monkeypatch.setattr(_cache, "_FELL_BACK", False)
    fresh = lc.load(str(tmp_path / "ds"))
    with pytest.warns(lc.LakeComputeWarning, match="reads local chunks through zarr itself") as seen:
        values = (fresh.x.numpy().tolist(), fresh.y.numpy().tolist())
    assert values == (list(range(100)), [3 * i for i in range(100)])
    assert len([w for w in seen if issubclass(w.category, lc.LakeComputeWarning)]) == 1
