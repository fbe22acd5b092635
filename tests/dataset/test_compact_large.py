"""compact() keeps samples of any size readable: a typed array splits samples over 64 MiB across chunks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import zarr

import lakecompute as lc
from lakecompute.versioned._compact import typed_chunks


@pytest.mark.slow
def test_compact_sample_over_64mib_stays_readable(tmp_path: Path) -> None:
    """Two 2-D samples of 72 MiB each read back unchanged after compact, from chunks of at most 1 MiB."""
    path = tmp_path / "ds"
    ds = lc.empty(str(path))
    ds.create_tensor("big", dtype="uint8")
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, 256, (3 * 1024, 24 * 1024), dtype=np.uint8) for _ in range(2)]
    for s in samples:
        ds.big.append(s)
    ds.compact()
    again = lc.load(str(path), read_only=True)
    for i, s in enumerate(samples):
        np.testing.assert_array_equal(again.big[i].numpy(), s)
    (arrays,) = [p.parent for p in (path / "tensors" / "big").glob("*/zarr.json")]
    arr = zarr.open_array(str(arrays), mode="r")
    assert arr.shape == (2, 3 * 1024, 24 * 1024)
    assert math.prod(arr.chunks) <= 1 << 20


def test_compact_typed_chunks_bound_every_sample_shape() -> None:
    """Chunks hold whole samples when they fit in 1 MiB, and split a larger sample along its own axes."""
    assert typed_chunks((3,), 8) == ((1 << 20) // 24, 3)
    assert typed_chunks((9000, 9000), 8) == (1, 14, 9000)
    assert typed_chunks((1 << 25,), 4) == (1, 1 << 18)
    assert typed_chunks((5, 3, 1 << 24), 8) == (1, 1, 1, 1 << 17)
    for shape in [(70_000_000,), (4096, 4096, 3), (2, 2, 2, 1 << 22)]:
        assert math.prod(typed_chunks(shape, 8)) * 8 <= 1 << 20
