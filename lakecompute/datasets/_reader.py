"""The one reader of stored samples: a tensor's values by range, by gathered positions, or as a stream.

Every read path uses it: tensor reads and views (`ColumnReader.read_range`, `ColumnReader.read_one`),
eval input (`lakecompute.datasets.read_columns`), loaders (`RowReader`), token blocks
(`StreamReader`) and ``compact()``. It finds samples through the storage layer's checked
`lakecompute.versioned.Locator` and reads them through the handle's one chunk cache
(`lakecompute.storage.ArrayCache`), so a damaged dataset raises the same
`lakecompute.errors.DatasetCorruptError` on every path, naming the tensor and the samples. Decoding
stored bytes into values (images, text, json) happens here, not in storage.

Every array a read returns is the caller's own: changing it never changes a later read.

Gather access serves a training loader, which asks for the samples of one batch in any order: a
shuffled batch of 256 out of 60,000 MNIST-size samples touches nearly every stored chunk. The
positions are grouped by fragment, then by the chunk that holds them; each chunk is decoded once into
the cache and the samples are cut out of it with one vectorised gather per chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lakecompute.datasets._core import core_of
from lakecompute.errors import DatasetCorruptError, InvalidArgumentError, InvalidTypeError, LakeComputeError
from lakecompute.htypes import Encoded, decode_many, decode_sample
from lakecompute.versioned import Fragment, Locator, Run, TensorState, undecodable_error

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.storage import ArrayCache

__all__ = ["ColumnReader", "RowReader", "StreamReader"]

_Stored = list[tuple[np.ndarray, tuple[int, ...], int]]


class ColumnReader:
    """Reads the samples of one tensor state (immutable: build a new reader when the state changes).

    Every read is verified: a damaged dataset raises `lakecompute.errors.DatasetCorruptError`
    naming the tensor, the samples being read and the storage key, never wrong values.

    Attributes:
        spec: the tensor's spec.
        locator: where its samples are stored.
        dtype: the dtype samples are returned in (None for text and json).
    """

    def __init__(self, state: TensorState, cache: ArrayCache) -> None:
        self.spec = state.spec
        self.locator = Locator(state, cache)
        numeric = state.spec.dtype is not None and state.spec.declaration.numeric
        self.dtype = np.dtype(state.spec.dtype) if numeric else None
        self._shape: tuple[tuple[int, ...] | None] | None = None

    @property
    def frags(self) -> list[Fragment]:
        return self.locator.frags

    @property
    def length(self) -> int:
        return self.locator.length

    @property
    def cache(self) -> ArrayCache:
        return self.locator.cache

    # -- shapes -------------------------------------------------------------------------------
    def shape_of(self, i: int) -> tuple[int, ...]:
        return self.locator.shape_of(i)

    def shapes(self, start: int, stop: int) -> list[tuple[int, ...]]:
        return self.locator.shapes(start, stop)

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The one shape every sample has, or None (ragged, text, json: gathered as lists)."""
        if self._shape is None:
            self._shape = (self._common_shape(),)
        return self._shape[0]

    def _common_shape(self) -> tuple[int, ...] | None:
        if self.dtype is None or not self.frags:
            return None
        shapes: set[tuple[int, ...]] = set()
        try:
            for j in range(len(self.frags)):
                shapes |= self.locator.used_shapes(j)
                if len(shapes) > 1:
                    return None
        except DatasetCorruptError as exc:
            raise self.locator.located(exc, 0, self.length) from exc
        return shapes.pop()

    # -- range access -------------------------------------------------------------------------
    def prepare(self, position: int) -> None:
        """Open what reading sample ``position`` starts with (its arrays, how their chunks are read),
        reading no chunk (`lakecompute.versioned.Locator.prepare`); nothing for a position past the end.

        Raises:
            DatasetCorruptError: what that would find damaged, naming the tensor and the sample.
        """
        if not 0 <= position < self.length:
            return
        try:
            self.locator.prepare(position)
        except DatasetCorruptError as exc:
            raise self.locator.located(exc, position, position + 1) from exc

    def read_range(self, start: int, stop: int) -> list[Any] | np.ndarray:
        """Samples ``start..stop``: one stacked array when they come from uniform fragments of one
        shape, else a list of values.

        Raises:
            DatasetCorruptError: stored data the samples need is missing, damaged or was vacuumed.
        """
        locs = self.locator.locate(start, stop)
        try:
            if len(locs) == 1:  # the common case, kept short: a sample read goes through here
                (_, frag, first, count) = locs[0]
                if frag.shape is None:
                    return self._values(frag, self.locator.indexed(frag, first, count))
                arr = self.locator.fixed(frag, first, count)
                return arr if self.dtype is None or arr.dtype == self.dtype else arr.astype(self.dtype)
            parts = [self._range_part(loc.frag, loc.first, loc.length) for loc in locs]
        except DatasetCorruptError as exc:
            raise self.locator.located(exc, start, stop) from exc
        arrays = [p for p in parts if isinstance(p, np.ndarray)]
        if len(arrays) == len(parts) and len({a.shape[1:] for a in arrays}) == 1:
            return np.concatenate(arrays, axis=0)
        out: list[Any] = []
        for p in parts:
            out.extend(list(p))
        return out

    def read_one(self, i: int) -> Any:
        """Sample ``i``."""
        return self.read_range(i, i + 1)[0]

    def _range_part(self, f: Fragment, first: int, count: int) -> np.ndarray | list[Any]:
        if f.shape is not None:
            return self._cast(self.locator.fixed(f, first, count))
        return self._values(f, self.locator.indexed(f, first, count))

    def scan(
        self, start: int, stop: int, values: bool = True
    ) -> tuple[np.ndarray, np.ndarray | list[Any] | None]:
        """Samples ``start..stop`` read as a column: their shapes, and (with ``values``) their values in one
        piece, for evaluating expressions over whole chunks (`lakecompute.select`).

        Returns:
            ``(shapes, values)``: ``shapes`` is an ``(n, ndim)`` int64 array; ``values`` are, for a tensor
            of numbers, the items of every sample back to back (one flat array of the tensor's dtype: one
            read per fragment, nothing per sample), for an encoded tensor (text, json, polygons, masks) a
            list of the decoded samples, and None without ``values`` (then only index rows are read, no
            sample's data).

        Raises:
            DatasetCorruptError: stored data the samples need is missing or damaged.
        """
        shapes: list[np.ndarray] = []
        parts: list[Any] = []
        try:
            for loc in self.locator.locate(start, stop) if start < stop else []:
                f = loc.frag
                if f.shape is not None:
                    shape = np.asarray(f.shape, dtype=np.int64)
                    shapes.append(np.broadcast_to(shape, (loc.length, len(f.shape))))
                    if values:
                        parts.append(self._cast(self.locator.fixed(f, loc.first, loc.length)).reshape(-1))
                    continue
                shapes.append(self.locator.rows(f)[loc.first : loc.first + loc.length, 1:])
                if values and self.spec.kind == "bytes":
                    parts.append(self._values(f, self.locator.indexed(f, loc.first, loc.length)))
                elif values:
                    parts.append(self._cast(self.locator.flat(f, loc.first, loc.length)))
        except DatasetCorruptError as exc:
            raise self.locator.located(exc, start, stop) from exc
        ndim = self.frags[0].ndim if self.frags else 0
        joined = np.concatenate(shapes) if shapes else np.empty((0, ndim), dtype=np.int64)
        if not values:
            return joined, None
        if self.spec.kind == "bytes":
            return joined, [v for part in parts for v in part]
        empty = np.empty(0, dtype=self.dtype or np.float64)
        return joined, np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else empty)

    def read_encoded(self, start: int, stop: int) -> list[Encoded]:
        """Samples ``start..stop`` of a ``bytes`` kind tensor as stored: encoded blobs with their shapes
        (for copying them elsewhere without re-encoding).

        Each blob is decoded once to check it and the value dropped: a copy must not carry a sample
        that does not decode forward under a fresh checksum.

        Raises:
            DatasetCorruptError: as `read_range`, including a sample that does not decode.
        """
        out: list[Encoded] = []
        try:
            for loc in self.locator.locate(start, stop):
                for items, shape, at in self.locator.indexed(loc.frag, loc.first, loc.length):
                    self._decode(loc.frag, items, shape, at)
                    out.append(Encoded(None, items.tobytes(), shape))
        except DatasetCorruptError as exc:
            raise self.locator.located(exc, start, stop) from exc
        return out

    def read_encoded_at(self, positions: np.ndarray) -> list[Encoded]:
        """The samples at ``positions`` of a ``bytes`` kind tensor as stored: encoded blobs with their
        shapes, in the order asked for, for copying byte for byte (``view.save``).

        Unlike `read_encoded` the blobs are not decoded: each comes from chunks whose checksums were
        verified when read, and is copied as it is (a copy of a PNG or JPEG is the same bytes, and a
        reader of the copy decodes it as a reader of the original would).

        Raises:
            DatasetCorruptError: stored data the samples need is missing or damaged.
        """
        positions = np.asarray(positions, dtype=np.int64)
        out: list[Encoded | None] = [None] * len(positions)
        try:
            for j, sel, samples in self.locator.group(positions):
                stored = self.locator.indexed_at(self.frags[j], samples)
                for i, (items, shape, _) in zip(sel.tolist(), stored, strict=True):
                    out[i] = Encoded(None, items.tobytes(), shape)
        except DatasetCorruptError as exc:
            span = (int(positions.min()), int(positions.max()) + 1) if len(positions) else (0, 0)
            raise self.locator.located(exc, *span) from exc
        return out  # type: ignore[return-value]  # every position was filled

    def read_stored_at(
        self, positions: np.ndarray, buffer: Callable[[int], np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The stored bytes of the samples at ``positions`` of a ``bytes`` kind tensor, back to back in
        one uint8 array, and where each starts (``offsets``, one more than positions): `read_encoded_at`
        without a Python object per sample, for a bulk copy (an Arrow column of the blobs, zero-copy).

        A fragment's samples lie back to back in its segment, so each run of consecutive positions in
        one fragment is one read of its byte range, straight into its place in the result; the reads
        are verified as every read is (checked index rows, chunk checksums). Not decoded, as for
        `read_encoded_at`.

        Args:
            positions: the samples' positions.
            buffer: gives a uint8 array of at least the bytes asked for (its start is filled and
                returned): a caller that reads block after block can hand the same memory back
                (fresh pages cost more than the bytes' copy). None: a new array.

        Raises:
            DatasetCorruptError: stored data the samples need is missing or damaged.
        """
        positions = self._inside(np.asarray(positions, dtype=np.int64))
        which = np.searchsorted(self.locator.bounds, positions, side="right") - 1
        cuts = np.flatnonzero((np.diff(positions) != 1) | (np.diff(which) != 0)) + 1
        bounds = zip([0, *cuts.tolist()], [*cuts.tolist(), len(positions)], strict=True)
        runs = [(int(which[a]), a, b - a) for a, b in bounds if a < b]  # (fragment, first position, count)
        try:
            sizes = []  # each run's samples' sizes in items, from the index: known before any read
            firsts = [int(positions[a]) - self.locator.starts[j] + self.frags[j].k for j, a, _ in runs]
            for (j, _, n), first in zip(runs, firsts, strict=True):
                sizes.append(self.locator.packed_sizes(self.frags[j], first, n))
            offsets = np.zeros(len(positions) + 1, dtype=np.int64)
            if sizes:
                np.cumsum(np.concatenate(sizes), out=offsets[1:])
            nbytes = [int(s.sum()) for s in sizes]  # a bytes kind tensor's stored items are bytes
            total = sum(nbytes)
            data = np.empty(total, np.uint8) if buffer is None else buffer(total)[:total]
            at = 0
            for (j, _, n), first, size in zip(runs, firsts, nbytes, strict=True):
                self.locator.packed(self.frags[j], first, n, data[at : at + size])
                at += size
        except DatasetCorruptError as exc:
            span = (int(positions.min()), int(positions.max()) + 1) if len(positions) else (0, 0)
            raise self.locator.located(exc, *span) from exc
        return data, offsets

    # -- gather access ------------------------------------------------------------------------
    def read_at(
        self, positions: np.ndarray, stack: Literal["samples", "fragments"] = "samples"
    ) -> np.ndarray | list[Any]:
        """The samples at ``positions`` (any order, repeats allowed), stacked or as a list.

        Args:
            positions: tensor positions.
            stack: ``"samples"``: stacked when every sample of the tensor has one shape (`shape`; what
                loaders need, so that every batch has the same type; reads every index row once);
                ``"fragments"``: stacked when every fragment holds fixed-shape samples of one shape
                (known from the manifest alone).

        Raises:
            InvalidArgumentError: a position is outside the tensor.
            DatasetCorruptError: stored data the samples need is missing or damaged (naming the
                tensor and the range of positions read).
        """
        positions = self._inside(np.asarray(positions, dtype=np.int64))
        try:
            return self._gather(positions, self.shape if stack == "samples" else self._fixed_shape())
        except DatasetCorruptError as exc:
            span = (int(positions.min()), int(positions.max()) + 1)
            raise self.locator.located(exc, *span) from exc

    def _inside(self, positions: np.ndarray) -> np.ndarray:
        n = self.length
        if len(positions) and (positions.min() < 0 or positions.max() >= n):
            bad = positions[(positions < 0) | (positions >= n)][0]
            raise InvalidArgumentError(
                f"Position {int(bad)} is outside tensor {self.spec.name!r} of length {n}."
            )
        return positions

    def read_slice(self, start: int, stop: int) -> np.ndarray | list[Any]:
        """Samples ``start..stop`` as `read_at` gives them (stacked when every sample of the tensor has
        one shape, else a list), read as a range: one slice of each chunk they lie in.

        Raises:
            InvalidArgumentError: the range runs outside the tensor.
            DatasetCorruptError: as `read_range`.
        """
        if start < 0 or stop > self.length:
            raise InvalidArgumentError(
                f"Position {stop - 1 if start >= 0 else start} is outside tensor {self.spec.name!r} of "
                f"length {self.length}."
            )
        values = self.read_range(start, stop)
        if self.shape is None:
            return list(values)
        if isinstance(values, list):  # the fragments differ in layout: stack as read_at does
            assert self.dtype is not None
            out = np.empty((stop - start, *self.shape), dtype=self.dtype)
            for i, v in enumerate(values):
                out[i] = v
            return out
        return values

    def _fixed_shape(self) -> tuple[int, ...] | None:
        shapes = {f.shape for f in self.frags}
        return shapes.pop() if self.dtype is not None and len(shapes) == 1 else None

    def _gather(self, positions: np.ndarray, shape: tuple[int, ...] | None) -> np.ndarray | list[Any]:
        # Every block is read before the result is allocated: a damaged size fails reading.
        blocks: list[tuple[np.ndarray, np.ndarray | list[Any]]] = []
        for j, sel, samples in self.locator.group(positions):
            f = self.frags[j]
            if f.shape is not None:
                blocks.append((sel, self._cast(self.locator.fixed_at(f, samples))))
            else:
                blocks.append((sel, self._values(f, self.locator.indexed_at(f, samples))))
        if shape is not None:
            assert self.dtype is not None
            if len(blocks) == 1 and isinstance(blocks[0][1], np.ndarray):
                return blocks[0][1]  # one fragment: in the order asked for already
            out = np.empty((len(positions), *shape), dtype=self.dtype)
            for sel, block in blocks:
                out[sel] = np.asarray(block) if isinstance(block, list) else block
            return out
        values: list[Any] = [None] * len(positions)
        for sel, block in blocks:
            for i, v in zip(sel.tolist(), block, strict=True):
                values[i] = v
        return values

    # -- values -------------------------------------------------------------------------------
    def _cast(self, arr: np.ndarray) -> np.ndarray:
        if self.dtype is not None and arr.dtype != self.dtype:
            return arr.astype(self.dtype)
        return arr

    def _values(self, f: Fragment, stored: _Stored) -> list[Any]:
        """Values of indexed samples: decoded (``bytes`` kind) or viewed in the fragment's dtype."""
        if self.spec.kind == "bytes":
            values = decode_many(self.spec, [(items, shape) for items, shape, _ in stored])
            for value, (_, _, at) in zip(values, stored, strict=True):
                if isinstance(value, (LakeComputeError, ValueError)):
                    raise undecodable_error(self.cache, f.seg, at, value) from value
            return values
        dtype = np.dtype(f.dtype)
        return [self._cast(items.view(dtype).reshape(shape)) for items, shape, _ in stored]

    def _decode(self, f: Fragment, blob: np.ndarray, shape: tuple[int, ...], at: int) -> Any:
        try:
            return decode_sample(self.spec, blob, shape)
        except (LakeComputeError, ValueError) as exc:
            raise undecodable_error(self.cache, f.seg, at, exc) from exc


class RowReader:
    """Reads whole rows of a dataset version by position, each stored chunk decoded once.

    Reads go through the dataset handle's own readers and its one chunk cache (`cache`).

    Example:
        >>> import numpy as np
        >>> from lakecompute.datasets import RowReader
        >>> ds = lc.empty("mem://row-reader-doc", overwrite=True)
        >>> _ = ds.create_tensor("x", dtype="int16")
        >>> ds.x.extend(np.arange(10))
        >>> RowReader(ds, ["x"]).read_rows(np.array([7, 2, 7]))["x"].tolist()
        [7, 2, 7]
    """

    def __init__(self, ds: Dataset, names: Sequence[str]) -> None:
        core = core_of(ds)
        self.cache = core.cache
        self._columns = {name: core.reader(name) for name in names}

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape every sample of ``name`` has, or None when they differ (read as lists)."""
        return self._columns[name].shape

    def read_rows(self, positions: np.ndarray) -> dict[str, np.ndarray | list[Any]]:
        """The samples at ``positions`` (dataset positions, any order) of every tensor, by name.

        Positions that follow one another (an unshuffled batch) are read as one slice of each chunk
        they lie in, as a range read; any others are gathered chunk by chunk.
        """
        positions = np.asarray(positions, dtype=np.int64)
        span = _contiguous(positions)
        if span is not None:
            return self.read_span(*span)
        return {name: column.read_at(positions) for name, column in self._columns.items()}

    def read_span(self, start: int, stop: int) -> dict[str, np.ndarray | list[Any]]:
        """The samples at positions ``start .. stop - 1`` of every tensor, by name: `read_rows` of those
        positions, for a caller that knows they are a run (one slice of each chunk they lie in)."""
        return {name: column.read_slice(start, stop) for name, column in self._columns.items()}


def _contiguous(positions: np.ndarray) -> tuple[int, int] | None:
    """``(start, stop)`` when ``positions`` are ``start, start + 1, ..., stop - 1``; else None."""
    n = len(positions)
    if not n:
        return None
    start = int(positions[0])
    if int(positions[-1]) - start != n - 1 or (n > 2 and not (positions[1:] - positions[:-1] == 1).all()):
        return None
    return start, start + n


class StreamReader:
    """The samples of a 1-D numeric tensor, read as one concatenated stream of values.

    A fragment's samples are stored back to back, so any range of the stream is a few contiguous
    runs (one per fragment it crosses), read from the chunks that cover it and nothing else.

    Attributes:
        length: values in the stream (the sum of the samples' lengths).
        dtype: the tensor's dtype.
        starts: where each fragment's run begins in the stream (one more than runs).
    """

    def __init__(self, ds: Dataset, name: str) -> None:
        core = core_of(ds)
        state = core.state(name)
        spec = state.spec
        if spec.kind != "array" or spec.dtype is None or state.ndim not in (None, 1):
            raise InvalidTypeError(
                f"Tensor {name!r} is not a tensor of 1-D numeric samples (htype {spec.htype!r}, "
                f"dtype {spec.dtype!r}, ndim {state.ndim!r}); a stream is read from 1-D samples such as "
                "token ids."
            )
        self.dtype = np.dtype(spec.dtype)
        self._locator = core.reader(name).locator
        self.cache = self._locator.cache
        try:
            self._runs: list[Run] = [self._locator.run(j) for j in range(len(self._locator.frags))]
        except DatasetCorruptError as exc:
            raise self._locator.located(exc, 0, self._locator.length) from exc
        self.starts = np.cumsum([0, *(r.count for r in self._runs)], dtype=np.int64)
        self.length = int(self.starts[-1])

    @property
    def array_path(self) -> str | None:
        """Where the whole stream is one typed zarr array of its own (after ``compact()``): its path in
        the dataset's store; else None (the stream spans runs of bytes in shared segments)."""
        if len(self._runs) != 1:
            return None
        run = self._runs[0]
        typed = run.unit == 1 and run.first == 0 and self.cache.items(run.path)[2] == self.dtype
        return run.path if typed and self.cache.items(run.path)[1] == self.length else None

    def _check(self, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= self.length:
            raise InvalidArgumentError(
                f"Stream range {start}..{stop} is outside the stream of {self.length} values."
            )

    def _samples(self, start: int, stop: int) -> tuple[int, int]:
        """The samples (positions in the tensor) that hold stream values ``start..stop``, roughly:
        the fragments they cross (errors name these)."""
        j0 = int(np.searchsorted(self.starts, start, side="right")) - 1
        j1 = int(np.searchsorted(self.starts, max(start, stop - 1), side="right")) - 1
        bounds = self._locator.starts
        return bounds[max(j0, 0)], bounds[min(j1 + 1, len(bounds) - 1)]

    def read_values(self, start: int, stop: int) -> np.ndarray:
        """Values ``start .. stop`` of the stream (the caller's own array)."""
        self._check(start, stop)
        try:
            return self._read_values(start, stop)
        except DatasetCorruptError as exc:
            raise self._locator.located(exc, *self._samples(start, stop)) from exc

    def _read_values(self, start: int, stop: int) -> np.ndarray:
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
        joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return joined if joined.dtype == self.dtype else joined.astype(self.dtype)

    def windows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Windows of ``width`` values from each of ``starts``: a new ``(len(starts), width)`` array.

        Windows inside one fragment (nearly all, once compacted) are gathered together, chunk by
        chunk; the few that cross fragments are joined one by one.
        """
        starts = np.asarray(starts, dtype=np.int64)
        if not len(starts):
            return np.empty((0, width), dtype=self.dtype)
        self._check(int(starts.min()), int(starts.max()) + width)
        try:
            return self._windows(starts, width)
        except DatasetCorruptError as exc:
            lo, hi = int(starts.min()), int(starts.max()) + width
            raise self._locator.located(exc, *self._samples(lo, hi)) from exc

    def _windows(self, starts: np.ndarray, width: int) -> np.ndarray:
        out = np.empty((len(starts), width), dtype=self.dtype)
        which = np.searchsorted(self.starts, starts, side="right") - 1
        whole = starts + width <= self.starts[np.minimum(which + 1, len(self._runs))]
        for j in np.unique(which[whole]).tolist():
            sel = np.flatnonzero(whole & (which == j))
            run = self._runs[j]
            items = run.first + (starts[sel] - self.starts[j]) * run.unit
            out[sel] = self.cache.gather(run.path, items, width * run.unit).view(run.dtype)
        for i in np.flatnonzero(~whole).tolist():
            out[i] = self._read_values(int(starts[i]), int(starts[i]) + width)
        return out
