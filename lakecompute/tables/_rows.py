"""The rows of a dataset or view read in blocks for an export: each tensor's values as its reader gives
them (images, text and json as their stored bytes), a block bounded by rows and by bytes.

A block's byte size is not known before it is read (encoded images vary), so each block is read in
parts whose row count follows the bytes per row seen so far: memory stays near ``max_bytes`` whatever
the samples' sizes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.compression import encode_image
from lakecompute.datasets import DatasetView, base_dataset, core_of
from lakecompute.errors import InvalidArgumentError, InvalidSampleError, TensorDoesNotExistError
from lakecompute.parsing import parse_count
from lakecompute.tables._encode import Blobs, Block
from lakecompute.tables._layout import ColumnLayout, numbers_dims

if TYPE_CHECKING:
    from lakecompute.datasets import ColumnReader, Dataset, ObjectSelection

__all__ = ["Buffers", "Part", "TableRows"]

_FIRST_PART = 1  # rows read before the bytes per row are known (a row may be a large image)
# A group is read in parts of at most 1/_PIECES of its bytes: reading a part briefly holds its chunks
# and their copies too, and a part that is the whole group would double the memory a group takes.
_PIECES = 8
_RAMP = 3  # a ramping export's first group is 1/2**_RAMP of the budget (`TableRows.parts`)
_COUNT_NAMES = ("batch_size", "max_bytes")  # what `TableRows.parts`' errors call its counts by default
# References to a kept buffer when the pool holds the only one: its list's, and sys.getrefcount's
# argument's (fewer where an interpreter does not count a borrowed one).
_POOLED = 2
_SLACK = 1 << 16


class Buffers:
    """Byte buffers for the blobs an export reads (`ColumnReader.read_stored_at`), handed out again once
    nothing refers to them: an export reads block after block of the same size, and fresh memory costs
    more than the bytes' copy (its pages are zeroed as they are first touched).

    A buffer is free when the pool holds the only reference to it: an Arrow array made of it (`Blobs`)
    holds it until the array is gone, so memory a consumer still sees is never written over. Free
    buffers beyond ``max_bytes`` in all are let go.

    Args:
        max_bytes: the most bytes the pool keeps.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._kept: list[np.ndarray] = []

    def __len__(self) -> int:
        """How many buffers the pool keeps."""
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        """The bytes of the buffers the pool keeps."""
        return sum(b.nbytes for b in self._kept)

    def _free(self, i: int) -> bool:
        return sys.getrefcount(self._kept[i]) <= _POOLED

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 array of at least ``nbytes`` bytes that nothing else refers to."""
        free = [i for i in range(len(self._kept)) if self._free(i) and self._kept[i].nbytes >= nbytes]
        if free:
            return self._kept[min(free, key=lambda i: self._kept[i].nbytes)]
        buffer = np.empty(nbytes + (nbytes >> 3) + _SLACK, np.uint8)  # room for the next, a little larger
        while self._kept and self.nbytes + buffer.nbytes > self.max_bytes:
            unused = [i for i in range(len(self._kept)) if self._free(i)]
            if not unused:
                return buffer  # every kept one is in use: this one is not kept
            del self._kept[min(unused, key=lambda i: self._kept[i].nbytes)]
        self._kept.append(buffer)
        return buffer


@dataclass(frozen=True)
class Part:
    """Rows ``start..stop`` of the export (positions in its order), each tensor's values."""

    start: int
    stop: int
    values: dict[str, Block]
    shapes: dict[str, np.ndarray]
    """Each tensor's rows' shapes, ``(rows, rank)``."""
    nbytes: int


def _nbytes(values: Block) -> int:
    if isinstance(values, (np.ndarray, Blobs)):
        return int(values.nbytes)
    total = 0
    for v in values[:64]:
        total += v.nbytes if isinstance(v, np.ndarray) else len(v) if isinstance(v, (bytes, str)) else 64
    return total * len(values) // max(1, min(64, len(values)))


class TableRows:
    """The rows an export writes: a committed dataset's (all of them) or a view's, in its order: the
    tensors it shows (``ds[["labels", "boxes"]]``), and of per-object tensors the objects it keeps
    (``filter_labels``).

    Args:
        data: the dataset or view.
        tensors: the tensors to export (a name or names); None for all.

    Raises:
        InvalidArgumentError: uncommitted changes, or a dataset whose tensors differ in length.
        TensorDoesNotExistError: an unknown name in ``tensors``.
    """

    def __init__(self, data: Dataset | DatasetView, tensors: str | Sequence[str] | None) -> None:
        self.base = base_dataset(data)
        #: Where blobs are read into (`Buffers`), for an export that lets go of each block it wrote.
        self.buffers: Buffers | None = None
        if self.base.has_pending_changes:
            raise InvalidArgumentError(
                f"Dataset {self.base.path!r} has uncommitted changes, which an export would not hold. "
                "Commit them first (leave the `with` block or call ds.commit())."
            )
        core = core_of(self.base)
        view = data if isinstance(data, DatasetView) else None
        self.names = _names(view.keys() if view is not None else core.names(), tensors)
        self.readers: dict[str, ColumnReader] = {n: core.reader(n) for n in self.names}
        #: The objects a view keeps of each row (filter_labels), for the tensors of its groups.
        self.objects: ObjectSelection | None = view.kept_objects if view is not None else None
        lengths = {n: r.length for n, r in self.readers.items()}
        if view is not None:
            self.positions: range | np.ndarray = view.positions
        else:
            if len(set(lengths.values())) > 1:
                raise InvalidArgumentError(
                    f"The tensors of {self.base.path!r} differ in length ({lengths}), so they are not rows "
                    f"of one table. Export a view of the rows they all hold (ds[:{min(lengths.values())}])."
                )
            self.positions = range(min(lengths.values(), default=0))
        self.shapes = {n: self._shapes(n) for n in self.names}
        self.layouts = [self._layout(n) for n in self.names]

    def __len__(self) -> int:
        return len(self.positions)

    def _shapes(self, name: str) -> np.ndarray:
        """Each exported row's shape, ``(rows, rank)``, read from the index alone (no sample)."""
        reader = self.readers[name]
        state = core_of(self.base).state(name)
        rank = state.ndim or 0
        column = reader.spec.declaration.arrow.column
        if column not in ("numbers", "image") or not len(self.positions):
            return np.zeros((len(self.positions), rank), dtype=np.int64)
        every = np.asarray(reader.shapes(0, reader.length), dtype=np.int64).reshape(reader.length, rank)
        return every[np.asarray(self.positions, dtype=np.int64)]

    def _axis(self, name: str) -> int | None:
        """The objects' axis of a tensor whose objects the view filters, else None."""
        group = self.objects.group(name) if self.objects is not None else None
        return group.axis(name) if group is not None else None

    def _varying(self, name: str) -> tuple[int, ...]:
        """The axes whose extent is never fixed in the column: the objects' axis of an htype whose
        object count varies (`ArrowMapping.objects`), and of a tensor whose objects the view filters
        (objects it leaves out change a row's count)."""
        declaration = core_of(self.base).state(name).spec.declaration
        rank = self.shapes[name].shape[1]
        axis = self._axis(name)
        if axis is None and declaration.arrow.objects:
            axis = declaration.object_axis(rank)
        return () if axis is None or not rank else (axis % rank,)

    def _layout(self, name: str) -> ColumnLayout:
        state = core_of(self.base).state(name)
        spec = state.spec
        shapes = self.shapes[name]
        dims, shaped = numbers_dims(shapes, self._varying(name), spec.declaration.arrow.trailing)
        if spec.declaration.arrow.column == "image":
            varies = len(dims) == 3 and dims[2] is None
            shaped = spec.sample_compression == "webp" and varies  # WebP cannot say HxWx1 from HxWx3
        elif spec.declaration.arrow.column != "numbers":
            dims, shaped = (), False
        return ColumnLayout(
            name, spec.htype, spec.dtype, spec.sample_compression, spec.chunk_compression,
            dict(state.info), dims, shaped,
        )  # fmt: skip

    def _read(self, name: str, rows: np.ndarray) -> Block:
        reader = self.readers[name]
        spec = reader.spec
        column = spec.declaration.arrow.column
        if column in ("text", "json") or (column == "image" and spec.sample_compression is not None):
            # The stored bytes in one buffer (the pool's, where the export has one), not decoded.
            return Blobs(*reader.read_stored_at(rows, None if self.buffers is None else self.buffers.take))
        values = reader.read_at(rows, stack="fragments")
        if column == "image":  # raw arrays: written as PNG (lossless), which the image struct holds
            return [_png(name, a, int(p)) for a, p in zip(values, rows, strict=True)]
        return values

    def parts(
        self, max_rows: int, max_bytes: int, ramp: bool = False, names: tuple[str, str] = _COUNT_NAMES
    ) -> Iterator[list[Part]]:
        """Groups of parts of at most ``max_rows`` rows and about ``max_bytes`` bytes (at least a row
        each), in the export's order: one group is one record batch, one Parquet row group.

        With ``ramp`` the first group holds about an eighth of ``max_bytes``, each next one twice the
        one before, up to ``max_bytes``: a pipeline's writer starts on the first while the rest is read.

        Raises:
            InvalidArgumentError, InvalidTypeError: a count below 1 or not an int, named as the caller's
                argument (``names``); at the call, not when the first group is taken (a lazy reader or
                batched frame is handed out before that).
        """
        max_rows = parse_count(names[0], max_rows, 1)
        max_bytes = parse_count(names[1], max_bytes, 1)
        return self._groups(max_rows, max_bytes, ramp)

    def _groups(self, max_rows: int, max_bytes: int, ramp: bool) -> Iterator[list[Part]]:
        at, per_row = 0, 0.0
        budget = max(1, max_bytes >> _RAMP) if ramp else max_bytes
        while at < len(self):
            group: list[Part] = []
            rows = nbytes = 0
            while at < len(self) and rows < max_rows and nbytes < budget:
                room = min(budget - nbytes, max(1, max_bytes // _PIECES))
                step = min(max_rows - rows, _FIRST_PART if not per_row else int(room / per_row))
                part = self.part(at, at + max(1, step))
                group.append(part)
                at, rows, nbytes = part.stop, rows + part.stop - part.start, nbytes + part.nbytes
                per_row = max(1.0, nbytes / rows)
            yield group
            budget = min(max_bytes, 2 * budget)

    def part(self, start: int, stop: int) -> Part:
        """Rows ``start..stop`` of the export."""
        stop = min(stop, len(self))
        rows = np.asarray(self.positions[start:stop], dtype=np.int64)
        values = {name: self._read(name, rows) for name in self.names}
        shapes = {name: self.shapes[name][start:stop] for name in self.names}
        if self.objects is not None:
            for name in self.names:
                if self._axis(name) is not None:  # the kept objects of each row, and their shapes
                    values[name] = self.objects.samples(name, range(start, stop), values[name])
                    rank = self.shapes[name].shape[1]
                    shapes[name] = np.asarray([np.shape(v) for v in values[name]], np.int64).reshape(-1, rank)
        return Part(start, stop, values, shapes, sum(_nbytes(v) for v in values.values()))


def _names(known: list[str], tensors: str | Sequence[str] | None) -> list[str]:
    if tensors is None:
        return list(known)
    names = [tensors] if isinstance(tensors, str) else list(tensors)
    for n in names:
        if n not in known:
            raise TensorDoesNotExistError(n, known)
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"tensors names a tensor twice: {names!r}.")
    return names


def _png(name: str, arr: Any, row: int) -> bytes:
    try:
        return encode_image(np.asarray(arr), "png", tensor=name)
    except InvalidSampleError as exc:
        raise InvalidArgumentError(
            f"Tensor {name!r}, row {row}: the image cannot be written as PNG for its column ({exc.detail})"
        ) from exc
