"""Samples as Arrow arrays: one function per column kind of `lakecompute.specs.ArrowMapping`, each
turning a block of a tensor's rows (as its reader gives them) into the column its `ColumnLayout` types.

Nothing here decodes an encoded sample: images go out as their stored bytes, text and json as their
stored UTF-8 and JSON text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, overload

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.specs import HTYPES, ArrowColumn
from lakecompute.tables._arrow import pyarrow
from lakecompute.tables._layout import ColumnLayout, arrow_type

__all__ = ["ENCODERS", "Blobs", "Block", "encode_column"]


@dataclass(frozen=True, eq=False)
class Blobs(Sequence[bytes]):
    """Stored blobs (encoded images, text, json) of consecutive rows, back to back in one buffer, as
    `lakecompute.datasets.ColumnReader.read_stored_at` reads them: an Arrow binary column is made of
    them without a copy (`_binary`); as a sequence, each row's blob is its own ``bytes``.

    Attributes:
        data: the blobs' bytes, uint8, back to back.
        offsets: where each blob starts in ``data``, and where the last ends (one more than blobs).
    """

    data: np.ndarray
    offsets: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self.data[int(self.offsets[i]) : int(self.offsets[i + 1])].tobytes()


Block = np.ndarray | list[Any] | Blobs
"""A block of a tensor's rows as its reader gives them: a stacked array, a list of arrays or values, or
(images, text, json) their stored blobs (`Blobs`, or a list of bytes)."""

_INT32: Final = 2**31 - 1


def _flat(values: Block, dtype: np.dtype[Any]) -> np.ndarray:
    """Every number of the block's samples, in order, as one 1-D array of ``dtype``."""
    if isinstance(values, np.ndarray):
        return values.reshape(-1).astype(dtype, copy=False)
    if not values:
        return np.zeros(0, dtype)
    return np.concatenate([np.asarray(v).reshape(-1) for v in values]).astype(dtype, copy=False)


def _leaf(layout: ColumnLayout, flat: np.ndarray) -> Any:
    """The Arrow array of the numbers themselves (a complex number as a pair of floats)."""
    pa = pyarrow()
    if flat.dtype.kind == "c":
        floats = flat.view(np.dtype(f"f{flat.dtype.itemsize // 2}"))
        return pa.FixedSizeListArray.from_arrays(pa.array(floats), 2)
    cast = layout.mapping.cast
    if cast is not None and flat.dtype != np.dtype(cast):
        target = np.dtype(cast)
        if flat.size and flat.dtype.kind in "iu" and int(flat.max()) > np.iinfo(target).max:
            raise InvalidArgumentError(
                f"Tensor {layout.name!r}: value {int(flat.max())} does not fit the {cast} its column is "
                "written as."
            )
        flat = flat.astype(target)
    if layout.dtype is None:
        return pa.nulls(len(flat))
    return pa.array(flat)


def _offsets(lengths: np.ndarray, name: str) -> Any:
    pa = pyarrow()
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _INT32:
        raise InvalidArgumentError(
            f"Tensor {name!r}: a batch holds {offsets[-1]} values in one list level, more than an Arrow "
            "list holds; export with a smaller batch_size."
        )
    return pa.array(offsets.astype(np.int32))


def _nest(layout: ColumnLayout, leaf: Any, shapes: np.ndarray) -> Any:
    """``leaf`` in one list level per dimension, outermost last: fixed-size lists where the layout
    knows the extent, else lists with offsets from each row's shape."""
    pa = pyarrow()
    n, rank = shapes.shape
    child = leaf
    for k in reversed(range(rank)):
        prefix = np.prod(shapes[:, :k], axis=1, dtype=np.int64) if k else np.ones(n, np.int64)
        d = layout.dims[k]
        if d is None:
            lengths = np.repeat(shapes[:, k], prefix)
            child = pa.ListArray.from_arrays(_offsets(lengths, layout.name), child)
        else:
            count = int(prefix.sum())
            child = pa.Array.from_buffers(pa.list_(child.type, d), count, [None], children=[child])
    return child


def _numbers(layout: ColumnLayout, values: Block, shapes: np.ndarray) -> Any:
    pa = pyarrow()
    dtype = np.dtype(layout.dtype or "float64")
    leaf = _leaf(layout, _flat(values, dtype))
    if not layout.shaped:
        return _nest(layout, leaf, shapes)
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    flat = pa.ListArray.from_arrays(_offsets(sizes, layout.name), leaf)
    dims = pa.ListArray.from_arrays(
        _offsets(np.full(len(shapes), shapes.shape[1]), layout.name), pa.array(shapes.reshape(-1))
    )
    return pa.StructArray.from_arrays([flat, dims], ["values", "shape"])


def _binary(blobs: Sequence[bytes], name: str) -> Any:
    """One binary array of ``blobs``: over `Blobs`' own buffer (no copy), else one copy of the bytes (no
    Python object per row)."""
    pa = pyarrow()
    if isinstance(blobs, Blobs):
        offsets = _offsets(np.diff(blobs.offsets), name)
        start = int(blobs.offsets[0])
        data = pa.py_buffer(blobs.data[start : start + blobs.nbytes])
    else:
        offsets = _offsets(np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs)), name)
        data = pa.py_buffer(b"".join(blobs))
    return pa.Array.from_buffers(pa.binary(), len(blobs), [None, offsets.buffers()[1], data])


def _image(layout: ColumnLayout, values: Block, shapes: np.ndarray) -> Any:
    pa = pyarrow()
    blobs = values if isinstance(values, Blobs) else list(values)
    fields = [_binary(blobs, layout.name), pa.nulls(len(blobs), pa.string())]
    names = ["bytes", "path"]
    if layout.shaped:
        rank = np.full(len(shapes), shapes.shape[1])
        fields.append(pa.ListArray.from_arrays(_offsets(rank, layout.name), pa.array(shapes.reshape(-1))))
        names.append("shape")
    return pa.StructArray.from_arrays(fields, names)


def _text(layout: ColumnLayout, values: Block, shapes: np.ndarray) -> Any:
    # The stored UTF-8 (text) or JSON text (json), as they are: checked as UTF-8 by the cast.
    return _binary(values if isinstance(values, Blobs) else list(values), layout.name).cast(
        pyarrow().string()
    )


def _polygons(layout: ColumnLayout, values: Block, shapes: np.ndarray) -> Any:
    pa = pyarrow()
    objects, parts, points, coords = [], [], [], []
    sample: Any
    for sample in values:
        objects.append(len(sample))
        for obj in sample:
            parts.append(len(obj))
            for poly in obj:
                points.append(len(poly))
                coords.append(np.asarray(poly).reshape(-1))
    dtype = np.dtype(layout.dtype or "float32")
    flat = np.concatenate(coords).astype(dtype) if coords else np.zeros(0, dtype)
    child = pa.FixedSizeListArray.from_arrays(pa.array(flat), 2)
    for counts in (points, parts, objects):
        child = pa.ListArray.from_arrays(_offsets(np.asarray(counts, np.int64), layout.name), child)
    return child


Encoder = Callable[[ColumnLayout, Block, np.ndarray], Any]

ENCODERS: Final[Mapping[ArrowColumn, Encoder]] = MappingProxyType(
    {"numbers": _numbers, "image": _image, "text": _text, "json": _text, "polygons": _polygons}
)
"""The encoder of each column kind an htype may declare."""

_missing = {d.arrow.column for d in HTYPES.values()} - set(ENCODERS)
if _missing:  # pragma: no cover - a declaration names a column kind nobody writes
    raise InvalidArgumentError(
        "Expected an Arrow encoder for every column kind an htype declares. Got none for "
        f"{sorted(_missing)}: add it to lakecompute/tables/_encode.py (see docs/how-it-works.md, "
        "'Adding an htype')."
    )


def encode_column(layout: ColumnLayout, values: Block, shapes: np.ndarray) -> Any:
    """A block of the tensor's rows as the Arrow array of its column.

    Args:
        layout: the column's layout.
        values: the rows as the tensor's reader gives them (stored blobs for images, text and json).
        shapes: each row's shape, ``(rows, rank)`` (numbers and images).
    """
    array = ENCODERS[layout.mapping.column](layout, values, shapes)
    want = arrow_type(layout)
    return array if array.type == want else array.cast(want)
