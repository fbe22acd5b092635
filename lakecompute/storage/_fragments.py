"""Turning buffered samples into fragments, and fragments back into samples."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import DatasetCorruptError, InvalidSampleError, LakeComputeError
from lakecompute.htypes import Encoded, TensorSpec, decode_sample
from lakecompute.storage._cache import ArrayCache
from lakecompute.storage._manifest import Fragment, TensorState, needed_by_a_version
from lakecompute.storage._segments import DATA_CHUNK, INDEX_CHUNK, SlotWriter

if TYPE_CHECKING:
    from lakecompute.storage._backend import Backend

__all__ = [
    "TYPED_PREFIX",
    "FragmentReader",
    "SampleBuffer",
    "append_fragment",
    "located_error",
    "undecodable_error",
    "write_fragment",
]

#: A fragment whose ``seg`` starts with this names a typed ``(n, *shape)`` zarr array (written by
#: ``compact()``, readable with plain zarr) instead of a segment; ``off`` is then a row number.
TYPED_PREFIX = "@"


class SampleBuffer:
    """Checked samples of one tensor waiting to be written, as stacked blocks or single samples."""

    __slots__ = ("count", "items", "nbytes")

    def __init__(self) -> None:
        self.items: list[np.ndarray | Encoded] = []  # ndarray: a block of samples stacked on axis 0
        self.count = 0
        self.nbytes = 0

    def add(self, sample: Encoded) -> None:
        self.items.append(sample)
        self.count += 1
        self.nbytes += sample.array.nbytes if sample.array is not None else len(sample.blob or b"")

    def add_block(self, block: np.ndarray) -> None:
        self.items.append(block)
        self.count += len(block)
        self.nbytes += block.nbytes

    def clear(self) -> None:
        self.items = []
        self.count = 0
        self.nbytes = 0


def _ndim_error(spec: TensorSpec, expected: int, got: int) -> InvalidSampleError:
    return InvalidSampleError(
        spec.name,
        f"every sample of a tensor has the same number of dimensions: expected {expected}, got {got}.",
    )


def write_fragment(
    spec: TensorSpec,
    state_ndim: int | None,
    buffer: SampleBuffer,
    writer: SlotWriter,
    prefer_indexed: bool,
) -> Fragment | None:
    """Write a buffer's samples into ``writer``'s slot as one fragment (None if it is empty)."""
    if buffer.count == 0:
        return None
    if spec.kind == "bytes":
        blobs: list[bytes] = []
        shapes: list[tuple[int, ...]] = []
        for item in buffer.items:
            assert isinstance(item, Encoded)
            assert item.blob is not None
            blobs.append(item.blob)
            shapes.append(item.shape)
        ndim = _common_ndim(spec, state_ndim, shapes)
        payload = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        rows = np.empty((len(blobs), 1 + ndim), dtype=np.int64)
        rows[:, 0] = [len(b) for b in blobs]
        if ndim:
            rows[:, 1:] = shapes
        off = writer.write_data(payload)
        idx = writer.write_index(rows)
        return Fragment(
            writer.seg_id, off, payload.size, len(blobs), spec.dtype or "", None, idx, ndim, 0, len(blobs)
        )

    arrays: list[np.ndarray] = []
    for item in buffer.items:
        if isinstance(item, np.ndarray):
            arrays.append(item)
        else:
            assert item.array is not None
            arrays.append(item.array[None])
    dtype = np.result_type(*arrays) if spec.dtype is None else np.dtype(spec.dtype)
    sample_shapes = {a.shape[1:] for a in arrays}
    ndim = _common_ndim(spec, state_ndim, list(sample_shapes))
    if len(sample_shapes) == 1 and not prefer_indexed:
        (shape,) = sample_shapes
        block = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
        block = np.ascontiguousarray(block, dtype=dtype)
        off = writer.write_data(block.reshape(-1).view(np.uint8))
        return Fragment(
            writer.seg_id, off, block.nbytes, len(block), dtype.name, shape, None, ndim, 0, len(block)
        )
    samples = [s for a in arrays for s in a]
    rows = np.empty((len(samples), 1 + ndim), dtype=np.int64)
    rows[:, 0] = [s.size * dtype.itemsize for s in samples]
    if ndim:
        rows[:, 1:] = [s.shape for s in samples]
    payload = np.concatenate(
        [np.ascontiguousarray(s, dtype=dtype).reshape(-1).view(np.uint8) for s in samples]
    )
    off = writer.write_data(payload)
    idx = writer.write_index(rows)
    return Fragment(
        writer.seg_id, off, payload.size, len(samples), dtype.name, None, idx, ndim, 0, len(samples)
    )


def _common_ndim(spec: TensorSpec, state_ndim: int | None, shapes: list[tuple[int, ...]]) -> int:
    ndims = {len(s) for s in shapes}
    expected = state_ndim if state_ndim is not None else min(ndims)
    for n in ndims:
        if n != expected:
            raise _ndim_error(spec, expected, n)
    return expected


def append_fragment(state: TensorState, frag: Fragment) -> None:
    """Add ``frag`` at the end of ``state``, merging it into the last fragment when contiguous."""
    if state.ndim is None:
        state.ndim = frag.ndim
    if state.fragments:
        last = state.fragments[-1]
        contiguous = (
            last.seg == frag.seg
            and last.off + last.nbytes == frag.off
            and last.k + last.n == last.total
            and frag.k == 0
            and frag.n == frag.total
            and last.dtype == frag.dtype
            and last.ndim == frag.ndim
        )
        if contiguous and last.shape is not None and last.shape == frag.shape:
            state.fragments[-1] = Fragment(
                last.seg, last.off, last.nbytes + frag.nbytes, last.total + frag.total, last.dtype,
                last.shape, None, last.ndim, last.k, last.n + frag.n,
            )  # fmt: skip
            return
        if (
            contiguous
            and last.idx is not None
            and frag.idx is not None
            and last.idx + last.total * (1 + last.ndim) == frag.idx
        ):
            state.fragments[-1] = Fragment(
                last.seg, last.off, last.nbytes + frag.nbytes, last.total + frag.total, last.dtype,
                None, last.idx, last.ndim, last.k, last.n + frag.n,
            )  # fmt: skip
            return
    state.fragments.append(frag)


def located_error(
    exc: DatasetCorruptError, backend: Backend | None, tensor: str, samples: tuple[int, int]
) -> DatasetCorruptError:
    """``exc`` with the tensor and the samples being read named, and vacuumed data recognised.

    Every reader of samples re-raises the storage layer's errors through this, so a damaged dataset
    reads the same way on every path (tensor reads, eval input, loaders, token blocks).
    """
    if exc.tensor is not None:
        return exc
    vacuumed = backend is not None and needed_by_a_version(backend, exc.file) is False
    if vacuumed:
        reason = f"{exc.reason}; vacuum() removed it with the version being read"
        hint = "That version is gone. Reopen the latest version with lc.load(path)."
    else:
        reason = exc.reason
        hint = (
            "Stored data was changed or removed outside lakecompute: restore it from a backup, "
            "or open an earlier version with lc.load(path, version=N)."
        )
    return DatasetCorruptError(
        exc.path, exc.file, reason, hint, tensor=tensor, samples=samples, vacuumed=vacuumed
    )


def undecodable_error(cache: ArrayCache, seg: str, at: int, exc: Exception) -> DatasetCorruptError:
    """The error for a stored sample at byte ``at`` of segment ``seg``'s data that passed its checksum
    (or predates checksums) and still does not decode."""
    key = f"segments/{seg}/data/c/{at // DATA_CHUNK}"
    return cache.damaged(key, f"a stored sample does not decode ({exc})")


@dataclass(slots=True)
class _Located:
    frag: Fragment
    first: int  # first used sample of the fragment wanted (relative to frag.k)
    count: int


class FragmentReader:
    """Reads samples of one tensor state (immutable: build a new reader when the state changes).

    Every read is verified (see `ArrayCache`), and index rows are checked against their
    fragment before they are used: a damaged dataset raises
    `lakecompute.errors.DatasetCorruptError` naming the tensor, the samples being read and
    the storage key, never wrong values.
    """

    def __init__(self, state: TensorState, cache: ArrayCache) -> None:
        self.spec = state.spec
        self.dtype = None if state.spec.dtype in (None, "str", "json") else np.dtype(state.spec.dtype)
        self.frags = list(state.fragments)
        self.starts = [0]
        for f in self.frags:
            self.starts.append(self.starts[-1] + f.n)
        self.length = self.starts[-1]
        self.cache = cache
        self._offsets: dict[tuple[str, int, int], np.ndarray] = {}
        self._typed_ok: set[str] = set()

    # -- errors -------------------------------------------------------------------------------
    # The public reads catch DatasetCorruptError themselves (try/except costs nothing until something
    # is raised; a context manager per sample read would cost ~1 us) and re-raise it via _located.

    def _located(self, exc: DatasetCorruptError, start: int, stop: int) -> DatasetCorruptError:
        return located_error(exc, self.cache.backend, self.spec.name, (start, stop))

    # -- locating -----------------------------------------------------------------------------
    def _locate(self, start: int, stop: int) -> list[_Located]:
        out = []
        j = bisect.bisect_right(self.starts, start) - 1
        pos = start
        while pos < stop:
            f = self.frags[j]
            first = pos - self.starts[j]
            count = min(stop, self.starts[j + 1]) - pos
            out.append(_Located(f, first, count))
            pos += count
            j += 1
        return out

    def _rows(self, f: Fragment) -> np.ndarray:
        assert f.idx is not None
        rows = self.cache.index_rows(f.seg, f.idx, f.total, 1 + f.ndim)
        if (f.seg, f.idx, f.total) not in self._offsets:
            self._offsets[(f.seg, f.idx, f.total)] = self._checked_offsets(f, rows)  # once per fragment
        return rows

    def _checked_offsets(self, f: Fragment, rows: np.ndarray) -> np.ndarray:
        """The byte offsets of a fragment's samples, after checking its index rows: sizes and shapes
        that are not negative, agree with each other, and add up to the fragment's bytes."""
        assert f.idx is not None
        sizes = rows[:, 0]
        offs = np.zeros(f.total + 1, dtype=np.int64)
        problem = ""
        if f.total and int(rows.min()) < 0:
            problem = "a negative size or shape"
        elif f.total and int(sizes.max()) > f.nbytes:
            problem = f"a sample of {int(sizes.max())} bytes in a fragment of {f.nbytes}"
        elif (total := int(np.cumsum(sizes, out=offs[1:])[-1] if f.total else 0)) != f.nbytes or (
            f.total and int(offs.max()) > f.nbytes
        ):
            # No size exceeds f.nbytes (at most 2**62), so the running sum passes f.nbytes before it
            # could overflow: a sum wrapped round by huge sizes is caught by the max.
            problem = f"sizes that add up to {total} bytes, the fragment holds {f.nbytes}"
        elif self.spec.kind == "array":
            # Sizes count items of the segment's data array: bytes, or values in a typed stream.
            data = self.cache.array(f"segments/{f.seg}/data").dtype.itemsize
            itemsize = np.dtype(f.dtype).itemsize / data
            expected = np.prod(rows[:, 1:].astype(np.float64), axis=1) * itemsize
            if not np.array_equal(expected, sizes.astype(np.float64)):
                problem = f"sizes that disagree with the shapes of {f.dtype} samples"
        if problem:
            first = f.idx // INDEX_CHUNK
            key = f"segments/{f.seg}/index/c/{first}"
            raise self.cache.damaged(key, f"the index rows from entry {f.idx} hold {problem}")
        return offs

    def _byte_offsets(self, f: Fragment) -> np.ndarray:
        offs = self._offsets.get((f.seg, f.idx or 0, f.total))
        if offs is None:
            self._rows(f)  # reads and checks the index rows, and keeps their offsets
            offs = self._offsets[(f.seg, f.idx or 0, f.total)]
        return offs

    def _typed(self, f: Fragment) -> str:
        """The path of a typed array, checked once against the fragment that names it."""
        path = f.seg[len(TYPED_PREFIX) :]
        if path not in self._typed_ok:
            arr = self.cache.array(path)
            shape = tuple(int(s) for s in arr.shape)
            if arr.dtype.name != f.dtype or shape[1:] != f.shape or f.off + f.total > shape[0]:
                raise self.cache.damaged(
                    f"{path}/zarr.json",
                    f"expected rows {f.off}..{f.off + f.total} of {f.dtype} samples of shape "
                    f"{list(f.shape or ())}, got an array of shape {list(shape)} and dtype {arr.dtype}",
                )
            self._typed_ok.add(path)
        return path

    # -- reading ------------------------------------------------------------------------------
    def shape_of(self, i: int) -> tuple[int, ...]:
        (loc,) = self._locate(i, i + 1)
        f = loc.frag
        if f.shape is not None:
            return f.shape
        try:
            row = self._rows(f)[f.k + loc.first]
        except DatasetCorruptError as exc:
            raise self._located(exc, i, i + 1) from exc
        return tuple(int(x) for x in row[1:])

    def shapes(self, start: int, stop: int) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        for loc in self._locate(start, stop):
            f = loc.frag
            if f.shape is not None:
                out.extend([f.shape] * loc.count)
                continue
            try:
                rows = self._rows(f)[f.k + loc.first : f.k + loc.first + loc.count, 1:]
            except DatasetCorruptError as exc:
                raise self._located(exc, start, stop) from exc
            out.extend(tuple(int(x) for x in r) for r in rows)
        return out

    def read_range(self, start: int, stop: int) -> list[Any] | np.ndarray:
        """Samples ``start..stop``: one stacked array when they come from uniform fragments of one
        shape, else a list of values.

        Raises:
            DatasetCorruptError: stored data the samples need is missing, damaged or was vacuumed.
        """
        try:
            parts: list[Any] = [self._read_loc(loc) for loc in self._locate(start, stop)]
        except DatasetCorruptError as exc:
            raise self._located(exc, start, stop) from exc
        if len(parts) == 1:
            return parts[0]  # type: ignore[no-any-return]
        if all(isinstance(p, np.ndarray) for p in parts) and len({p.shape[1:] for p in parts}) == 1:
            return np.concatenate(parts, axis=0)
        out: list[Any] = []
        for p in parts:
            out.extend(list(p))
        return out

    def _read_loc(self, loc: _Located) -> np.ndarray | list[Any]:
        f = loc.frag
        s0 = f.k + loc.first
        if f.seg.startswith(TYPED_PREFIX):
            # A typed (n, *shape) array written by compact(): rows are samples.
            arr = self.cache.read(self._typed(f), f.off + s0, loc.count)
            return self._cast(arr)
        if f.shape is not None:
            sb = math.prod(f.shape) * np.dtype(f.dtype).itemsize
            raw = self.cache.read(f"segments/{f.seg}/data", f.off + s0 * sb, loc.count * sb)
            arr = raw.view(np.dtype(f.dtype)).reshape((loc.count, *f.shape))
            if self.dtype is not None and arr.dtype != self.dtype:
                arr = arr.astype(self.dtype)
            return arr
        offs = self._byte_offsets(f)
        rows = self._rows(f)
        lo, hi = int(offs[s0]), int(offs[s0 + loc.count])
        raw = self.cache.read(f"segments/{f.seg}/data", f.off + lo, hi - lo)
        values: list[Any] = []
        for s in range(s0, s0 + loc.count):
            a, b = int(offs[s]) - lo, int(offs[s + 1]) - lo
            shape = tuple(int(x) for x in rows[s, 1:])
            if self.spec.kind == "bytes":
                values.append(self._decode(f, raw[a:b], shape, f.off + lo + a))
            else:
                values.append(self._cast(raw[a:b].view(np.dtype(f.dtype)).reshape(shape)))
        return values

    def read_encoded(self, start: int, stop: int) -> list[Encoded]:
        """Samples ``start..stop`` of a ``bytes`` kind tensor as stored: encoded blobs with their shapes,
        not decoded (for copying them elsewhere without re-encoding)."""
        out: list[Encoded] = []
        for loc in self._locate(start, stop):
            f = loc.frag
            offs = self._byte_offsets(f)
            rows = self._rows(f)
            s0 = f.k + loc.first
            lo, hi = int(offs[s0]), int(offs[s0 + loc.count])
            raw = self.cache.read(f"segments/{f.seg}/data", f.off + lo, hi - lo)
            for s in range(s0, s0 + loc.count):
                a, b = int(offs[s]) - lo, int(offs[s + 1]) - lo
                out.append(Encoded(None, raw[a:b].tobytes(), tuple(int(x) for x in rows[s, 1:])))
        return out

    def _cast(self, arr: np.ndarray) -> np.ndarray:
        if self.dtype is not None and arr.dtype != self.dtype:
            return arr.astype(self.dtype)
        return arr

    def _decode(self, f: Fragment, blob: np.ndarray, shape: tuple[int, ...], at: int) -> Any:
        try:
            return decode_sample(self.spec, blob, shape)
        except (LakeComputeError, ValueError) as exc:
            raise undecodable_error(self.cache, f.seg, at, exc) from exc

    def read_one(self, i: int) -> Any:
        value = self.read_range(i, i + 1)
        return value[0]
