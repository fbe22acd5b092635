"""Reading a committed version by position, chunk by chunk: the loaders' way in.

A training loader asks for the samples of one batch in any order: a shuffled batch of 256 out of 60,000
MNIST-size samples touches nearly every stored chunk. Reading them one at a time through a dataset's
small LRU cache would decode a chunk for almost every sample. Here the positions are grouped by the
stored chunk that holds them, each chunk is fetched and decoded once into a bounded cache of whole
chunks (`ChunkCache`), and the samples are sliced out of it with one vectorised gather per chunk.

Every stored array is read in a flat *item* space: a segment's ``data`` array holds bytes, a compacted
``(n, *shape)`` array holds ``prod(shape)`` values per row, so a fixed-shape sample is always a run of
``width`` consecutive items. The same gather serves fixed-shape rows and windows of a token stream.

`Snapshot` describes what a reader reads (location, version, positions) in a form that travels
to worker processes, which open their own store client from it (STORAGE-NOTES "Processes").
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from lakecompute.datasets._dataset import Dataset
from lakecompute.datasets._views import DatasetView
from lakecompute.errors import DatasetCorruptError, InvalidArgumentError, InvalidTypeError, LakeComputeError
from lakecompute.htypes import decode_sample
from lakecompute.storage import (
    TYPED_PREFIX,
    ArrayCache,
    Fragment,
    TensorState,
    located_error,
    open_backend,
    read_manifest,
    undecodable_error,
)

__all__ = ["CACHE_BYTES", "ChunkCache", "RowReader", "Snapshot", "StreamReader", "snapshot"]

#: Default budget of decoded chunks one reader keeps (per loader worker). A shuffled epoch touches every
#: chunk in every batch, so a tensor whose decoded size fits here is decoded once per epoch; a larger one
#: is decoded again as chunks fall out, but memory stays bounded.
CACHE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A committed version of a dataset, or of a view of it, that any process can open again.

    Attributes:
        url: the dataset location as the user gave it.
        storage_options: options for the object-store client (S3 only).
        version: the committed version read.
        positions: positions of the samples in the dataset (a view's selection, else ``range(len(ds))``).
        tensors: names of the dataset's tensors, in creation order.
        fork_safe: whether a forked child can still use the store (False for object stores).
        shared_between_processes: whether other processes can open it (False for ``mem://``).
    """

    url: str
    storage_options: dict[str, Any] = field(hash=False)
    version: int
    positions: range | np.ndarray = field(hash=False)
    tensors: tuple[str, ...]
    fork_safe: bool
    shared_between_processes: bool

    def __len__(self) -> int:
        return len(self.positions)

    def open(self) -> Dataset:
        """Open this version read-only: a new handle with its own store client."""
        backend = open_backend(self.url, self.storage_options)
        return Dataset(backend, read_manifest(backend, self.version), read_only=True, pinned=True)


def snapshot(data: Dataset | DatasetView) -> Snapshot:
    """Describe the committed version ``data`` reads, for readers in this or another process.

    Raises:
        InvalidArgumentError: the dataset has uncommitted changes (workers could not see them).
    """
    base = data._base_ds()
    if base.has_pending_changes:
        raise InvalidArgumentError(
            f"Dataset {base.path!r} has uncommitted changes, which a loader cannot read. "
            "Commit them first (leave the `with` block or call ds.commit())."
        )
    positions = data.positions if isinstance(data, DatasetView) else range(len(base))
    backend = base._backend
    return Snapshot(
        base.location.url,
        dict(base.location.storage_options),
        base.version,
        positions,
        tuple(base._names()),
        backend.fork_safe,
        backend.shared_between_processes,
    )


def _chunk_cache(ds: Dataset, max_bytes: int) -> ChunkCache:
    # A tiny LRU below: whole chunks are kept in the ChunkCache, not twice. The backend makes errors
    # name the dataset's location and recognise vacuumed data.
    return ChunkCache(ArrayCache(ds._cache.store, max_chunks=2, backend=ds._cache.backend), max_bytes)


class ChunkCache:
    """Whole decoded chunks of a dataset's arrays, seen as flat runs of items, within a byte budget.

    Chunks are fetched through the storage layer's `ArrayCache` (so its checks apply) and kept
    here, least recently used dropped first once more than ``max_bytes`` are held.

    Attributes:
        fetch: the storage-layer cache chunks are read through.
        max_bytes: the most decoded bytes kept (the chunk being read is always kept).
        fetched: how many chunks were fetched and decoded so far (a measure of read amplification).
    """

    def __init__(self, fetch: ArrayCache, max_bytes: int = CACHE_BYTES) -> None:
        self.fetch = fetch
        self.max_bytes = max_bytes
        self.fetched = 0
        self._chunks: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        # Sliding-window views of cached chunks by run width: building one costs ~50 us, more than
        # cutting a batch's runs out of it, so it is kept as long as its chunk.
        self._windows: dict[tuple[str, int], dict[int, np.ndarray]] = {}
        self._bytes = 0
        self._layout: dict[str, tuple[int, int, np.dtype[Any]]] = {}  # rows per chunk, items per row
        self._lengths: dict[str, int] = {}  # rows of each array

    def layout(self, path: str) -> tuple[int, int, np.dtype[Any]]:
        """``(rows per chunk, items per row, dtype)`` of the array at ``path``."""
        found = self._layout.get(path)
        if found is None:
            arr = self.fetch.array(path)
            found = self._layout[path] = (int(arr.chunks[0]), math.prod(arr.shape[1:]), arr.dtype)
            self._lengths[path] = int(arr.shape[0])
        return found

    def items_per_chunk(self, path: str) -> int:
        rows, per_row, _ = self.layout(path)
        return rows * per_row

    def chunk(self, path: str, c: int) -> np.ndarray:
        """Chunk ``c`` of the array at ``path`` as a flat array of items."""
        key = (path, c)
        hit = self._chunks.get(key)
        if hit is not None:
            self._chunks.move_to_end(key)
            return hit
        rows, _, _ = self.layout(path)
        # The last chunk of an array sized to its data (a typed array, a typed stream) is short.
        count = min(rows, self._lengths[path] - c * rows)
        values = self.fetch.read(path, c * rows, count).reshape(-1)
        self.fetched += 1
        self._chunks[key] = values
        self._bytes += values.nbytes
        while self._bytes > self.max_bytes and len(self._chunks) > 1:
            gone, old = self._chunks.popitem(last=False)
            self._windows.pop(gone, None)
            self._bytes -= old.nbytes
        return values

    def windows(self, path: str, c: int, width: int) -> np.ndarray:
        """Every run of ``width`` items inside chunk ``c``: row ``i`` is items ``i .. i + width``."""
        chunk = self.chunk(path, c)
        views = self._windows.setdefault((path, c), {})
        view = views.get(width)
        if view is None:
            view = views[width] = sliding_window_view(chunk, width)
        return view

    def span(self, path: str, start: int, count: int) -> np.ndarray:
        """Items ``start .. start + count`` of the array at ``path`` (a view when inside one chunk)."""
        size = self.items_per_chunk(path)
        first, last = start // size, (start + max(count, 1) - 1) // size
        if first == last:
            lo = start - first * size
            return self.chunk(path, first)[lo : lo + count]
        parts = [self.chunk(path, c) for c in range(first, last + 1)]
        lo = start - first * size
        return np.concatenate(parts)[lo : lo + count]

    def gather(self, path: str, starts: np.ndarray, width: int) -> np.ndarray:
        """Runs of ``width`` items from each of ``starts``: a ``(len(starts), width)`` array.

        Runs are grouped by the chunk they start in; each chunk is decoded at most once and its runs
        are cut out with one fancy index over a sliding window. Runs crossing into the next chunk
        (at most one per chunk boundary) are joined one by one.
        """
        dtype = self.layout(path)[2]
        out = np.empty((len(starts), width), dtype=dtype)
        if not len(starts) or not width:
            return out
        size = self.items_per_chunk(path)
        first = starts // size
        crossing = (starts + width - 1) // size != first
        order = np.argsort(first, kind="stable")
        bounds = np.flatnonzero(np.diff(first[order])) + 1
        for group in np.split(order, bounds):
            c = int(first[group[0]])
            inside = group[~crossing[group]]
            if len(inside):
                out[inside] = self.windows(path, c, width)[starts[inside] - c * size]
        for i in np.flatnonzero(crossing):
            out[i] = self.span(path, int(starts[i]), width)
        return out


def _check_range(positions: np.ndarray, length: int, name: str) -> None:
    if len(positions) and (positions.min() < 0 or positions.max() >= length):
        bad = positions[(positions < 0) | (positions >= length)][0]
        raise InvalidArgumentError(f"Position {int(bad)} is outside tensor {name!r} of length {length}.")


class _Column:
    """One tensor of a version, read by positions through a shared `ChunkCache`."""

    def __init__(self, state: TensorState, cache: ChunkCache) -> None:
        self.spec = state.spec
        self.cache = cache
        self.frags = list(state.fragments)
        self.starts = np.cumsum([0, *(f.n for f in self.frags)], dtype=np.int64)
        self.dtype = None if self.spec.dtype in (None, "str", "json") else np.dtype(self.spec.dtype)
        self._offsets: dict[int, np.ndarray] = {}
        self.shape = self._common_shape()

    @property
    def length(self) -> int:
        return int(self.starts[-1])

    def rows(self, j: int) -> np.ndarray:
        """The index rows ``[size, *shape]`` of fragment ``j``'s stored run."""
        f = self.frags[j]
        assert f.idx is not None
        return self.cache.fetch.index_rows(f.seg, f.idx, f.total, 1 + f.ndim)

    def offsets(self, j: int) -> np.ndarray:
        """Item offsets of each sample of fragment ``j``'s stored run (one more than samples)."""
        offs = self._offsets.get(j)
        if offs is None:
            offs = np.zeros(self.frags[j].total + 1, dtype=np.int64)
            np.cumsum(self.rows(j)[:, 0], out=offs[1:])
            self._offsets[j] = offs
        return offs

    def _common_shape(self) -> tuple[int, ...] | None:
        """The one sample shape every sample has, or None (ragged, text, json: read as lists)."""
        if self.dtype is None or not self.frags:
            return None
        shapes: set[tuple[int, ...]] = set()
        for j, f in enumerate(self.frags):
            if f.shape is not None:
                shapes.add(f.shape)
            else:
                used = self.rows(j)[f.k : f.k + f.n, 1:]
                shapes.update(tuple(int(x) for x in row) for row in np.unique(used, axis=0))
            if len(shapes) > 1:
                return None
        return shapes.pop()

    def read(self, positions: np.ndarray) -> np.ndarray | list[Any]:
        """The samples at ``positions`` (any order, repeats allowed): stacked, or a list if ragged.

        Raises:
            DatasetCorruptError: stored data the samples need is missing or damaged (naming the
                tensor and the range of positions read).
        """
        _check_range(positions, self.length, self.spec.name)
        try:
            return self._read(positions)
        except DatasetCorruptError as exc:
            span = (int(positions.min()), int(positions.max()) + 1)
            raise located_error(exc, self.cache.fetch.backend, self.spec.name, span) from exc

    def _read(self, positions: np.ndarray) -> np.ndarray | list[Any]:
        which = np.searchsorted(self.starts, positions, side="right") - 1
        out: np.ndarray | list[Any]
        if self.shape is not None:
            assert self.dtype is not None
            out = np.empty((len(positions), *self.shape), dtype=self.dtype)
        else:
            out = [None] * len(positions)
        for j in np.unique(which).tolist():
            sel = np.flatnonzero(which == j)
            f = self.frags[j]
            local = positions[sel] - self.starts[j] + f.k
            if f.shape is not None:
                block = self._fixed(f, local)
                if isinstance(out, np.ndarray):
                    out[sel] = block
                else:
                    for i, v in zip(sel.tolist(), block, strict=True):
                        out[i] = v
            else:
                for i, v in zip(sel.tolist(), self._indexed(j, local), strict=True):
                    out[i] = v
        return out

    def _fixed(self, f: Fragment, local: np.ndarray) -> np.ndarray:
        """Fixed-shape samples of one fragment: one gather over the items that hold them."""
        assert f.shape is not None
        dtype = np.dtype(f.dtype)
        if f.seg.startswith(TYPED_PREFIX):
            path = f.seg[len(TYPED_PREFIX) :]
            width = math.prod(f.shape)
            block = self.cache.gather(path, (f.off + local) * width, width)
        else:
            path = f"segments/{f.seg}/data"
            width = math.prod(f.shape) * dtype.itemsize
            block = self.cache.gather(path, f.off + local * width, width)
        values = block.view(dtype).reshape((len(local), *f.shape))
        if self.dtype is not None and values.dtype != self.dtype:
            values = values.astype(self.dtype)
        return values

    def _indexed(self, j: int, local: np.ndarray) -> list[Any]:
        """Samples of a fragment with an index (varying shapes, or encoded): sliced one by one from
        chunks decoded once."""
        f = self.frags[j]
        path = f"segments/{f.seg}/data"
        rows = self.rows(j)
        offs = self.offsets(j)
        values: list[Any] = []
        for s in local.tolist():
            raw = self.cache.span(path, f.off + int(offs[s]), int(rows[s, 0]))
            shape = tuple(int(x) for x in rows[s, 1:])
            if self.spec.kind == "bytes":
                values.append(self._decode(raw, shape, f.off + int(offs[s]), f.seg))
                continue
            # astype copies: a sample must not be a view into a cached chunk the caller could change.
            values.append(raw.view(np.dtype(f.dtype)).reshape(shape).astype(self.dtype or f.dtype))
        return values

    def _decode(self, raw: np.ndarray, shape: tuple[int, ...], at: int, seg: str) -> Any:
        try:
            return decode_sample(self.spec, raw, shape)
        except (LakeComputeError, ValueError) as exc:
            raise undecodable_error(self.cache.fetch, seg, at, exc) from exc


class RowReader:
    """Reads whole rows of a dataset version by position, each stored chunk decoded once.

    Example:
        >>> import numpy as np, lakecompute as lc
        >>> from lakecompute.datasets import RowReader
        >>> ds = lc.empty("mem://row-reader-doc", overwrite=True)
        >>> _ = ds.create_tensor("x", dtype="int16")
        >>> ds.x.extend(np.arange(10))
        >>> RowReader(ds, ["x"]).read(np.array([7, 2, 7]))["x"].tolist()
        [7, 2, 7]
    """

    def __init__(self, ds: Dataset, names: Sequence[str], max_bytes: int = CACHE_BYTES) -> None:
        # A tiny LRU below: whole chunks are kept in the ChunkCache, not twice.
        self.cache = _chunk_cache(ds, max_bytes)
        self._columns = {name: _Column(ds._state(name), self.cache) for name in names}

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape every sample of ``name`` has, or None when they differ (read as lists)."""
        return self._columns[name].shape

    def read(self, positions: np.ndarray) -> dict[str, np.ndarray | list[Any]]:
        """The samples at ``positions`` (dataset positions, any order) of every tensor, by name."""
        positions = np.asarray(positions, dtype=np.int64)
        return {name: column.read(positions) for name, column in self._columns.items()}


@dataclass(frozen=True, slots=True)
class _Run:
    """A fragment's samples as one contiguous run of values in a stored array."""

    path: str
    first: int  # first item of the run in the array's flat item space
    unit: int  # items per value: the value's itemsize in a byte array, 1 in a typed array
    dtype: np.dtype[Any]


class StreamReader:
    """The samples of a 1-D numeric tensor, read as one concatenated stream of values.

    A fragment's samples are stored back to back, so any range of the stream is a few contiguous
    runs (one per fragment it crosses), read from the chunks that cover it and nothing else.

    Attributes:
        length: values in the stream (the sum of the samples' lengths).
        dtype: the tensor's dtype.
        starts: where each fragment's run begins in the stream (one more than runs).
    """

    def __init__(self, ds: Dataset, name: str, max_bytes: int = CACHE_BYTES) -> None:
        state = ds._state(name)
        spec = state.spec
        if spec.kind != "array" or spec.dtype is None or state.ndim not in (None, 1):
            raise InvalidTypeError(
                f"Tensor {name!r} is not a tensor of 1-D numeric samples (htype {spec.htype!r}, "
                f"dtype {spec.dtype!r}, ndim {state.ndim!r}); a stream is read from 1-D samples such as "
                "token ids."
            )
        self.dtype = np.dtype(spec.dtype)
        self.cache = _chunk_cache(ds, max_bytes)
        column = _Column(state, self.cache)
        runs: list[_Run] = []
        counts: list[int] = []
        for j, f in enumerate(column.frags):
            run, count = self._run(column, j, f)
            runs.append(run)
            counts.append(count)
        self._runs = runs
        self.starts = np.cumsum([0, *counts], dtype=np.int64)
        self.length = int(self.starts[-1])

    @property
    def array_path(self) -> str | None:
        """Where the whole stream is one typed zarr array of its own (after ``compact()``): its path in
        the dataset's store; else None (the stream spans runs of bytes in shared segments)."""
        if len(self._runs) != 1:
            return None
        run = self._runs[0]
        typed = run.unit == 1 and run.first == 0 and self.cache.layout(run.path)[2] == self.dtype
        shape = self.cache.fetch.array(run.path).shape
        return run.path if typed and math.prod(shape) == self.length else None

    def _run(self, column: _Column, j: int, f: Fragment) -> tuple[_Run, int]:
        dtype = np.dtype(f.dtype)
        if f.seg.startswith(TYPED_PREFIX):
            assert f.shape is not None
            width = math.prod(f.shape)
            return _Run(f.seg[len(TYPED_PREFIX) :], (f.off + f.k) * width, 1, dtype), f.n * width
        path = f"segments/{f.seg}/data"
        # A segment's data array holds bytes, or (compacted streams) values of the tensor's dtype.
        unit = dtype.itemsize if self.cache.layout(path)[2] == np.uint8 else 1
        if f.shape is not None:
            width = math.prod(f.shape)
            return _Run(path, f.off + f.k * width * unit, unit, dtype), f.n * width
        offs = column.offsets(j)
        count = int(offs[f.k + f.n] - offs[f.k]) // unit
        return _Run(path, f.off + int(offs[f.k]), unit, dtype), count

    def _check(self, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= self.length:
            raise InvalidArgumentError(
                f"Stream range {start}..{stop} is outside the stream of {self.length} values."
            )

    def read(self, start: int, stop: int) -> np.ndarray:
        """Values ``start .. stop`` of the stream."""
        self._check(start, stop)
        parts: list[np.ndarray] = []
        j = int(np.searchsorted(self.starts, start, side="right")) - 1
        pos = start
        while pos < stop:
            run = self._runs[j]
            take = min(stop, int(self.starts[j + 1])) - pos
            raw = self.cache.span(
                run.path, run.first + (pos - int(self.starts[j])) * run.unit, take * run.unit
            )
            parts.append(raw.view(run.dtype))
            pos += take
            j += 1
        if not parts:
            return np.empty(0, dtype=self.dtype)
        # astype copies: the values must not be a view into a cached chunk the caller could change.
        return (np.concatenate(parts) if len(parts) > 1 else parts[0]).astype(self.dtype)

    def windows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Windows of ``width`` values from each of ``starts``: a ``(len(starts), width)`` array.

        Windows inside one fragment (nearly all, once compacted) are gathered together, chunk by
        chunk; the few that cross fragments are joined one by one.
        """
        starts = np.asarray(starts, dtype=np.int64)
        if len(starts):
            self._check(int(starts.min()), int(starts.max()) + width)
        out = np.empty((len(starts), width), dtype=self.dtype)
        which = np.searchsorted(self.starts, starts, side="right") - 1
        whole = starts + width <= self.starts[np.minimum(which + 1, len(self._runs))]
        for j in np.unique(which[whole]).tolist():
            sel = np.flatnonzero(whole & (which == j))
            run = self._runs[j]
            items = run.first + (starts[sel] - self.starts[j]) * run.unit
            block = self.cache.gather(run.path, items, width * run.unit).view(run.dtype)
            out[sel] = block
        for i in np.flatnonzero(~whole).tolist():
            out[i] = self.read(int(starts[i]), int(starts[i]) + width)
        return out
