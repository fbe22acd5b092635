"""Fixtures for the loader tests: small local datasets whose samples say which index they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

#: Seed 001's table (shared/seeds/001): world_size 2 x 4 loader workers -> the first samples each
#: (rank, worker) reads, for an unshuffled epoch of 32 samples.
SEED_001_TABLE = {
    (0, 0): [0, 8, 16, 24],
    (0, 1): [2, 10, 18, 26],
    (0, 2): [4, 12, 20, 28],
    (0, 3): [6, 14, 22, 30],
    (1, 0): [1, 9, 17, 25],
    (1, 1): [3, 11, 19, 27],
    (1, 2): [5, 13, 21, 29],
    (1, 3): [7, 15, 23, 31],
}

__all__ = ["fails_on_30", "fill_numbered", "numbered", "tokens"]

N = 103  # not a multiple of any batch size or world size used: the padding shows


def fill_numbered(ds: lc.Dataset, n: int = N) -> lc.Dataset:
    """Give ``ds`` ``n`` samples: ``idx`` (the sample's index), ``img`` (4x4 of it), ``rag`` (idx % 3 + 1
    copies of it) and ``txt`` ("s<idx>"), written in two commits (two fragments per tensor)."""
    with ds:
        ds.create_tensor("idx", dtype="int64")
        ds.create_tensor("img", htype="image")
        ds.create_tensor("rag", dtype="int32")
        ds.create_tensor("txt", htype="text")
    for lo, hi in ((0, n // 2), (n // 2, n)):
        with ds:
            ds.idx.extend(np.arange(lo, hi))
            ds.img.extend(np.stack([np.full((4, 4), i % 256, dtype=np.uint8) for i in range(lo, hi)]))
            ds.rag.extend([np.full(i % 3 + 1, i, dtype=np.int32) for i in range(lo, hi)])
            ds.txt.extend([f"s{i}" for i in range(lo, hi)])
    return ds


@pytest.fixture
def numbered(tmp_path: Path) -> lc.Dataset:
    """A local dataset of 103 numbered samples (see :func:`fill_numbered`)."""
    return fill_numbered(lc.empty(str(tmp_path / "numbered")))


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[lc.Dataset, np.ndarray]:
    """A local dataset of 200 documents of token ids (1-D int32, 1-40 long) and their concatenation."""
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, 1000, rng.integers(1, 41)).astype(np.int32) for _ in range(200)]
    ds = lc.empty(str(tmp_path / "tokens"))
    ds.create_tensor("tokens", dtype="int32")
    ds.tokens.extend(docs[:120])
    ds.tokens.extend(docs[120:])
    return ds, np.concatenate(docs)


@lc.compute
def fails_on_30(sample_in: Any, sample_out: Any) -> None:
    """A loader transform that fails on the sample whose ``idx`` is 30 (module level: sent to workers)."""
    if int(sample_in.idx.numpy()) == 30:
        raise ValueError("no 30")
    sample_out.append({"idx": sample_in.idx.numpy()})
