"""Compaction's writes: a tensor copied into one typed array, or one typed stream segment.

``compact()`` (in the dataset layer) decides which tensors to rewrite and reads their rows; what it
writes is the table's: a fixed-shape numeric tensor becomes one typed ``(n, *shape)`` zarr array under
``tensors/<name>/`` (readable with plain zarr), numeric samples of varying shapes one *typed stream*
segment. Both are created under the writer's lease like every segment.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
from zarr.abc.store import Store

from lakecompute.storage import ArrayCache
from lakecompute.versioned._keys import TYPED_PREFIX, segment_key, typed_array_key
from lakecompute.versioned._manifest import Fragment, TensorState
from lakecompute.versioned._segments import (
    DATA_CHUNK,
    INDEX_CHUNK,
    STREAM_SEGMENT,
    Compressors,
    create_typed_array,
)

__all__ = ["Rows", "is_compact", "typed_chunks", "write_stream", "write_typed"]

_BLOCK = 4096
_WRITE_BYTES = 64 << 20  # compact reads and writes at most about this much at a time


class Rows(Protocol):
    """The rows of a tensor, as compaction reads them (a column reader of the dataset layer)."""

    def read_range(self, start: int, stop: int) -> Any:
        """Samples ``start..stop``: a stacked array, or a list of arrays."""

    def shapes(self, start: int, stop: int) -> Any:
        """The shapes of samples ``start..stop``."""


def is_compact(cache: ArrayCache, state: TensorState) -> bool:
    """Whether tensor ``state`` is stored as compact as ``compact()`` makes it."""
    if len(state.fragments) != 1:
        return False
    f = state.fragments[0]
    whole = f.k == 0 and f.n == f.total
    if not whole:
        return False
    if f.seg.startswith(TYPED_PREFIX) or state.spec.kind == "bytes":
        return True
    # Numeric samples of varying shapes are compact once they are a typed stream of their own.
    data = cache.array(segment_key(f.seg, "data"))
    return f.shape is None and data.attrs.get("lakecompute") == STREAM_SEGMENT


def write_stream(
    store: Store, seg: str, rows_of: Rows, state: TensorState, compressors: Compressors, bar: Any
) -> Fragment:
    """Copy numeric samples of varying shapes into a new *typed stream* segment; returns its fragment.

    The segment's ``data`` array has the tensor's dtype (not bytes) and exactly as many values as the
    samples hold, back to back in order: for a tensor of token ids it is the whole token stream as one
    typed zarr array (attribute ``"lakecompute": "compacted-stream"``), which plain zarr opens. Its
    ``index`` array has the usual rows ``[size, *shape]``, with sizes, like the fragment's ``off`` and
    ``nbytes``, counted in items of the data array (for the byte arrays of other segments, items are
    bytes): the fragment reader then reads it unchanged. Chunks hold ``DATA_CHUNK`` items, so chunk
    numbers computed from the fragment (as vacuum does) stay right. ``seg``: a fresh segment id, covered
    by the writer's lease.
    """
    dtype = np.dtype(state.spec.dtype)
    n = state.length
    ndim = state.ndim or 0
    rows = np.empty((n, 1 + ndim), dtype=np.int64)
    if ndim:
        rows[:, 1:] = rows_of.shapes(0, n)
    rows[:, 0] = np.prod(rows[:, 1:], axis=1) if ndim else 1
    total = int(rows[:, 0].sum())
    # Checksummed, and every chunk stored (a missing one is damage, not zeros), like every typed array.
    data = create_typed_array(
        store, segment_key(seg, "data"), (total,), (DATA_CHUNK,), dtype,
        compressors(state.spec.chunk_compression),
        {"lakecompute": STREAM_SEGMENT, "tensor": state.spec.name},
    )  # fmt: skip
    index = create_typed_array(
        store, segment_key(seg, "index"), (rows.size,), (INDEX_CHUNK,), np.dtype("int64"),
        compressors("zstd"), {"lakecompute": "segment-index"},
    )  # fmt: skip
    index[:] = rows.reshape(-1)
    pos = 0
    for start in range(0, n, _BLOCK):
        values = rows_of.read_range(start, min(n, start + _BLOCK))
        flat = np.concatenate([np.asarray(v, dtype=dtype).reshape(-1) for v in values])
        data[pos : pos + flat.size] = flat
        pos += flat.size
        bar.update(len(values))
    return Fragment(seg, 0, total, n, dtype.name, None, 0, ndim, 0, n)


def write_typed(
    store: Store, array_id: str, rows_of: Rows, state: TensorState, compressors: Compressors, bar: Any
) -> Fragment:
    """Copy a fixed-shape numeric tensor into a new typed zarr array; returns its fragment (``array_id``:
    a fresh segment id, covered by the writer's lease)."""
    shape = state.fragments[0].shape
    assert shape is not None
    assert state.spec.dtype is not None
    dtype = np.dtype(state.spec.dtype)
    n = state.length
    sample_bytes = max(1, math.prod(shape) * dtype.itemsize)
    chunks = typed_chunks(shape, dtype.itemsize)
    rows = chunks[0]
    path = typed_array_key(state.spec.name, array_id)
    arr = create_typed_array(
        store,
        path,
        (n, *shape),
        chunks,
        dtype,
        compressors(state.spec.chunk_compression),
        {"lakecompute": "compacted-tensor", "tensor": state.spec.name},
    )
    # Whole chunks per write (no read-modify-write), at most about _BLOCK samples or _WRITE_BYTES at once.
    step = rows * max(1, min(_BLOCK // rows, _WRITE_BYTES // (rows * sample_bytes)))
    for start in range(0, n, step):
        stop = min(n, start + step)
        arr[start:stop] = np.asarray(rows_of.read_range(start, stop))
        bar.update(stop - start)
    return Fragment(TYPED_PREFIX + path, 0, n * sample_bytes, n, dtype.name, shape, None, len(shape), 0, n)


def typed_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The chunk shape of a typed ``(n, *shape)`` array: whole samples, as many as fit in ``DATA_CHUNK``
    bytes; a sample larger than that is split across chunks along its own axes (a chunk of one whole
    sample would grow without bound, and readers refuse chunks over 64 MiB as hostile).
    """
    sample_bytes = math.prod(shape) * itemsize
    if sample_bytes <= DATA_CHUNK:
        return (max(1, DATA_CHUNK // max(1, sample_bytes)), *shape)
    budget = max(1, DATA_CHUNK // itemsize)  # items per chunk
    inner: list[int] = []
    for dim in reversed(shape):  # keep trailing axes whole while they fit, split the next one
        if budget >= dim:
            inner.append(dim)
            budget //= dim
        else:
            inner.append(max(1, budget))
            budget = 1
    return (1, *reversed(inner))
