"""Finding a tensor's stored samples: positions to runs of stored items, every step checked.

A `Locator` is the one way any reader (tensor reads, views, eval input, loaders, token blocks,
compact) finds samples in storage. It knows bytes, arrays and fragments — not images or JSON: what
it returns is stored items (a fixed-shape block as an array of the fragment's dtype, or one encoded
or ragged sample's raw items with its shape); the dataset layer turns those into values.

What it checks, once per fragment, before anything is read by it: index rows (sizes and shapes that
are not negative, agree with each other and with the fragment's stored bytes), and a typed array's
metadata against the fragment that names it. Reads go through `ArrayCache`, which verifies every
chunk and reads long runs in bounded groups, so a declared size larger than what is stored fails at
the first chunk that is not there instead of allocating it.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from lakecompute.errors import DatasetCorruptError
from lakecompute.storage import ArrayCache, chunk_key
from lakecompute.versioned._keys import TYPED_PREFIX, segment_key
from lakecompute.versioned._manifest import Fragment, TensorState
from lakecompute.versioned._segments import DATA_CHUNK, INDEX_CHUNK
from lakecompute.versioned._versions import needed_by_a_version

if TYPE_CHECKING:
    from lakecompute.storage import Backend

__all__ = ["Located", "Locator", "Run", "located_error", "undecodable_error"]


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
    key = chunk_key(segment_key(seg, "data"), at // DATA_CHUNK)
    return cache.damaged(key, f"a stored sample does not decode ({exc})")


class Located(NamedTuple):
    """Samples wanted from one fragment (a named tuple: one is built per read, and a frozen dataclass
    costs ~1 us more to build).

    Attributes:
        j: the fragment's number in the tensor state.
        frag: the fragment.
        first: the first sample wanted, counted in the fragment's stored run (``frag.k`` included).
        length: samples wanted.
    """

    j: int
    frag: Fragment
    first: int
    length: int


@dataclass(frozen=True, slots=True)
class Run:
    """A fragment's used samples as one contiguous run of values in a stored array.

    Attributes:
        path: the stored array.
        first: the run's first item in the array's flat item space.
        unit: items per value (the value's itemsize in a byte array, 1 in a typed array).
        dtype: the values' dtype.
        count: values in the run.
    """

    path: str
    first: int
    unit: int
    dtype: np.dtype[Any]
    count: int


class Locator:
    """Where the samples of one tensor state are stored (immutable: build a new one when the state
    changes), checked before use.

    Raises (from every method that reads):
        DatasetCorruptError: stored data is missing, damaged, or disagrees with the manifest (the
            error names the storage key; readers name the tensor and samples with `located`).
    """

    def __init__(self, state: TensorState, cache: ArrayCache) -> None:
        self.name = state.spec.name
        #: "array" (samples are values of the fragment's dtype) or "bytes" (encoded, sized freely).
        self.kind = state.spec.kind
        self.frags = list(state.fragments)
        self.starts = [0]
        for f in self.frags:
            self.starts.append(self.starts[-1] + f.n)
        self.bounds = np.asarray(self.starts, dtype=np.int64)
        self.length = self.starts[-1]
        self.cache = cache
        self._offsets: dict[tuple[str, int, int], np.ndarray] = {}
        self._typed_ok: set[str] = set()
        # Data paths of self.frags' fragments checked by _data, by id (hashing a fragment costs ~1 us).
        self._stored_ok: dict[int, str] = {}
        self._fixed: dict[int, tuple[str, int, np.dtype[Any]]] = {}

    def located(self, exc: DatasetCorruptError, start: int, stop: int) -> DatasetCorruptError:
        """``exc`` naming this tensor and samples ``start..stop``."""
        return located_error(exc, self.cache.backend, self.name, (start, stop))

    # -- positions ----------------------------------------------------------------------------
    def locate(self, start: int, stop: int) -> list[Located]:
        """The fragments holding samples ``start..stop``, in order."""
        j = bisect.bisect_right(self.starts, start) - 1
        if start < stop <= self.starts[j + 1]:  # the common case, kept short: one fragment
            f = self.frags[j]
            return [Located(j, f, f.k + start - self.starts[j], stop - start)]
        out = []
        pos = start
        while pos < stop:
            f = self.frags[j]
            count = min(stop, self.starts[j + 1]) - pos
            out.append(Located(j, f, f.k + pos - self.starts[j], count))
            pos += count
            j += 1
        return out

    def group(self, positions: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Positions (any order, repeats) grouped by fragment: ``(j, where in positions, samples in
        the fragment's stored run)`` for each fragment that holds some."""
        which = np.searchsorted(self.bounds, positions, side="right") - 1
        out = []
        for j in np.unique(which).tolist():
            sel = np.flatnonzero(which == j)
            f = self.frags[j]
            out.append((j, sel, positions[sel] - self.starts[j] + f.k))
        return out

    def prepare(self, position: int) -> None:
        """Open, and check as a read checks them, the arrays that reading sample ``position`` starts
        with (its fragment's data, or its typed array), reading no chunk: see `ArrayCache.prepare`.

        Raises:
            DatasetCorruptError: as the read would (not `located`: the caller names the samples).
        """
        (loc,) = self.locate(position, position + 1)
        f = loc.frag
        if f.seg.startswith(TYPED_PREFIX):
            self.cache.prepare(self.typed(f))
            return
        self.cache.prepare(self._data(f))

    # -- checks, once per fragment ------------------------------------------------------------
    def rows(self, f: Fragment) -> np.ndarray:
        """The ``[size, *shape]`` index rows of fragment ``f``'s stored run, checked."""
        assert f.idx is not None
        rows = self.cache.index_rows(segment_key(f.seg, "index"), f.idx, f.total, 1 + f.ndim)
        if (f.seg, f.idx, f.total) not in self._offsets:
            self._offsets[(f.seg, f.idx, f.total)] = self._checked_offsets(f, rows)
        return rows

    def offsets(self, f: Fragment) -> np.ndarray:
        """Item offsets of each sample of ``f``'s stored run (one more than samples), checked."""
        offs = self._offsets.get((f.seg, f.idx or 0, f.total))
        if offs is None:
            self.rows(f)
            offs = self._offsets[(f.seg, f.idx or 0, f.total)]
        return offs

    def _checked_offsets(self, f: Fragment, rows: np.ndarray) -> np.ndarray:
        """The offsets of a fragment's samples, after checking its index rows: sizes and shapes that
        are not negative, agree with each other, and add up to the fragment's stored items."""
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
        elif self.kind == "array":
            # Sizes count items of the segment's data array: bytes, or values in a typed stream.
            data = self.cache.array(segment_key(f.seg, "data")).dtype.itemsize
            itemsize = np.dtype(f.dtype).itemsize / data
            expected = np.prod(rows[:, 1:].astype(np.float64), axis=1) * itemsize
            if not np.array_equal(expected, sizes.astype(np.float64)):
                problem = f"sizes that disagree with the shapes of {f.dtype} samples"
        if problem:
            key = chunk_key(segment_key(f.seg, "index"), f.idx // INDEX_CHUNK)
            raise self.cache.damaged(key, f"the index rows from entry {f.idx} hold {problem}")
        return offs

    def _data(self, f: Fragment) -> str:
        """The path of a segment fragment's data, after checking once that the chunk holding its last
        item is stored: a fragment declaring more than was written fails here, before its samples
        are read or allocated (a missing chunk inside it fails when read)."""
        path = self._stored_ok.get(id(f))
        if path is None:
            path = segment_key(f.seg, "data")
            if f.nbytes:
                self.cache.require(path, f.off + f.nbytes - 1)
            self._stored_ok[id(f)] = path
        return path

    def typed(self, f: Fragment) -> str:
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

    # -- shapes -------------------------------------------------------------------------------
    def shape_of(self, i: int) -> tuple[int, ...]:
        """The shape of sample ``i``."""
        (loc,) = self.locate(i, i + 1)
        f = loc.frag
        if f.shape is not None:
            return f.shape
        try:
            row = self.rows(f)[loc.first]
        except DatasetCorruptError as exc:
            raise self.located(exc, i, i + 1) from exc
        return tuple(int(x) for x in row[1:])

    def shapes(self, start: int, stop: int) -> list[tuple[int, ...]]:
        """The shapes of samples ``start..stop``."""
        out: list[tuple[int, ...]] = []
        for loc in self.locate(start, stop):
            f = loc.frag
            if f.shape is not None:
                out.extend([f.shape] * loc.length)
                continue
            try:
                rows = self.rows(f)[loc.first : loc.first + loc.length, 1:]
            except DatasetCorruptError as exc:
                raise self.located(exc, start, stop) from exc
            out.extend(tuple(int(x) for x in r) for r in rows)
        return out

    def used_shapes(self, j: int) -> set[tuple[int, ...]]:
        """The distinct shapes of fragment ``j``'s used samples."""
        f = self.frags[j]
        if f.shape is not None:
            return {f.shape}
        used = self.rows(f)[f.k : f.k + f.n, 1:]
        return {tuple(int(x) for x in row) for row in np.unique(used, axis=0)}

    # -- fixed-shape samples ------------------------------------------------------------------
    def fixed(self, f: Fragment, first: int, count: int) -> np.ndarray:
        """Samples ``first .. first + count`` of a fixed-shape fragment's stored run: a new
        ``(count, *shape)`` array of the fragment's dtype."""
        assert f.shape is not None
        if f.seg.startswith(TYPED_PREFIX):
            return self.cache.read_rows(self.typed(f), f.off + first, count)
        path, width, dtype = self._fixed.get(id(f)) or self._fixed_layout(f)
        raw = self.cache.read_rows(path, f.off + first * width, count * width)
        return raw.view(dtype).reshape((count, *f.shape))

    def _fixed_layout(self, f: Fragment) -> tuple[str, int, np.dtype[Any]]:
        """A fixed-shape segment fragment's data path (checked), bytes per sample and dtype, kept by
        id: a sample read uses them and working them out costs a microsecond."""
        assert f.shape is not None
        dtype = np.dtype(f.dtype)
        found = self._fixed[id(f)] = (self._data(f), math.prod(f.shape) * dtype.itemsize, dtype)
        return found

    def fixed_at(self, f: Fragment, samples: np.ndarray) -> np.ndarray:
        """The samples at ``samples`` (any order, repeats) of a fixed-shape fragment's stored run: a
        new ``(len(samples), *shape)`` array of the fragment's dtype, each chunk decoded once."""
        assert f.shape is not None
        if f.seg.startswith(TYPED_PREFIX):
            width = math.prod(f.shape)
            block = self.cache.gather(self.typed(f), (f.off + samples) * width, width)
        else:
            width = math.prod(f.shape) * np.dtype(f.dtype).itemsize
            block = self.cache.gather(self._data(f), f.off + samples * width, width)
        return block.view(np.dtype(f.dtype)).reshape((len(samples), *f.shape))

    # -- indexed samples (varying shapes, or encoded) -----------------------------------------
    def indexed(self, f: Fragment, first: int, count: int) -> list[tuple[np.ndarray, tuple[int, ...], int]]:
        """Samples ``first .. first + count`` of an indexed fragment's stored run, as stored: for each,
        its items (bytes, or values of a typed stream; the caller's own), its shape, and the item where
        it starts in the segment's data (for errors). One read covers them all."""
        offs = self.offsets(f)
        rows = self.rows(f)
        lo, hi = int(offs[first]), int(offs[first + count])
        raw = self.cache.span(self._data(f), f.off + lo, hi - lo)
        out = []
        for s in range(first, first + count):
            a, b = int(offs[s]) - lo, int(offs[s + 1]) - lo
            out.append((raw[a:b], tuple(int(x) for x in rows[s, 1:]), f.off + lo + a))
        return out

    def flat(self, f: Fragment, first: int, count: int) -> np.ndarray:
        """The items of samples ``first .. first + count`` of an indexed fragment of numbers, back to back
        as one flat array of the fragment's dtype (the caller's own): one read, nothing per sample."""
        offs = self.offsets(f)
        lo, hi = int(offs[first]), int(offs[first + count])
        return self.cache.span(self._data(f), f.off + lo, hi - lo).view(np.dtype(f.dtype))

    def packed_sizes(self, f: Fragment, first: int, count: int) -> np.ndarray:
        """Each size in items of samples ``first .. first + count`` of an indexed fragment (from its
        checked index: what `packed` reads, known before it reads)."""
        return np.diff(self.offsets(f)[first : first + count + 1])

    def packed(
        self, f: Fragment, first: int, count: int, out: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The stored items of samples ``first .. first + count`` of an indexed fragment as they lie in
        the segment, back to back (one read, the caller's own, or into ``out`` of their items' count),
        and each sample's size in items: what a bulk copy of encoded samples needs (`flat`, for any
        stored dtype)."""
        offs = self.offsets(f)
        lo, hi = int(offs[first]), int(offs[first + count])
        data = self.cache.span(self._data(f), f.off + lo, hi - lo, out)
        return data, np.diff(offs[first : first + count + 1])

    def indexed_at(self, f: Fragment, samples: np.ndarray) -> list[tuple[np.ndarray, tuple[int, ...], int]]:
        """As `indexed`, for the samples at ``samples`` (any order, repeats), each read on its own
        from chunks decoded once."""
        offs = self.offsets(f)
        rows = self.rows(f)
        path = self._data(f)
        # The batch's chunks read together (concurrently from a remote store), then each sample cut out.
        self.cache.warm(path, f.off + offs[samples], rows[samples, 0])
        out = []
        for s in samples.tolist():
            at = f.off + int(offs[s])
            items = self.cache.span(path, at, int(rows[s, 0]))
            out.append((items, tuple(int(x) for x in rows[s, 1:]), at))
        return out

    # -- streams ------------------------------------------------------------------------------
    def run(self, j: int) -> Run:
        """Fragment ``j``'s used samples as one run of values (for numeric tensors)."""
        f = self.frags[j]
        dtype = np.dtype(f.dtype)
        if f.seg.startswith(TYPED_PREFIX):
            assert f.shape is not None
            width = math.prod(f.shape)
            return Run(self.typed(f), (f.off + f.k) * width, 1, dtype, f.n * width)
        path = self._data(f)
        # A segment's data array holds bytes, or (compacted streams) values of the tensor's dtype.
        unit = dtype.itemsize if self.cache.array(path).dtype == np.uint8 else 1
        if f.shape is not None:
            width = math.prod(f.shape)
            return Run(path, f.off + f.k * width * unit, unit, dtype, f.n * width)
        offs = self.offsets(f)
        count = int(offs[f.k + f.n] - offs[f.k]) // unit
        return Run(path, f.off + int(offs[f.k]), unit, dtype, count)
