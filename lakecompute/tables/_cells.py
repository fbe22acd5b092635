"""Arrow columns back into samples: a `CellReader` per column turns a block of it into one value per row,
the inverse of `lakecompute.tables._encode` for the kind the column's layout (or type) says.

A cell that cannot be what its column says (a null, a list that is not an array, JSON that does not
parse) becomes a `Bad` naming the rule it breaks; the caller decides whether that row is skipped or
refused. Nothing here trusts the data: every length comes from the column's own buffers, checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.specs import HTYPES, ArrowColumn
from lakecompute.tables._arrow import pyarrow
from lakecompute.tables._images import ImageBytes
from lakecompute.tables._layout import ColumnLayout

__all__ = ["COLUMN_CELLS", "Bad", "CellKind", "CellReader", "read_cells"]

CellKind = Literal["numbers", "image", "text", "json", "polygons", "path", "value"]
"""What a column's cells are read as: numbers (arrays of the layout's dtype and shape), images
(`ImageBytes`, or a path for a struct without bytes), text, json (the parsed JSON text), polygons,
paths (strings naming image files), or plain values (``to_pylist``: strings, bytes, dicts, ...)."""


@dataclass(frozen=True, slots=True)
class Bad:
    """A cell that breaks its column's rule (the rule, in words)."""

    reason: str


@dataclass(frozen=True)
class CellReader:
    """How one column's cells are read.

    Attributes:
        name: the column.
        kind: what its cells are (`CellKind`).
        layout: for numbers, images and polygons: the dtype, rank and fixed extents (recorded in the
            field's metadata, or read from its Arrow type); for others the htype they suggest.
        recorded: the layout is one lakecompute recorded (``to_arrow``, ``to_pandas``): the tensor it
            describes is made again exactly, compressions included.
    """

    name: str
    kind: CellKind
    layout: ColumnLayout | None = None
    recorded: bool = False


_NULL: Final = Bad("the value is null (missing)")

COLUMN_CELLS: Final[Mapping[ArrowColumn, CellKind]] = MappingProxyType(
    {"numbers": "numbers", "image": "image", "text": "text", "json": "json", "polygons": "polygons"}
)
"""How the cells of each column kind an htype may declare are read."""

_unread = {d.arrow.column for d in HTYPES.values()} - set(COLUMN_CELLS)
if _unread:  # pragma: no cover - a declaration names a column kind nobody reads
    raise InvalidArgumentError(
        f"Expected a cell reader for every column kind an htype declares. Got none for {sorted(_unread)}: "
        "add it to lakecompute/tables/_cells.py (see docs/how-it-works.md, 'Adding an htype')."
    )


def read_cells(reader: CellReader, array: Any) -> list[Any]:
    """One value (or `Bad`) per row of ``array`` (a pyarrow Array or ChunkedArray) as ``reader`` says.

    Raises:
        InvalidArgumentError: a column of numbers, images or polygons whose buffers cannot be read at all
            (naming the column); a value of another column that cannot be read is a `Bad` of its row.
    """
    pa = pyarrow()
    if isinstance(array, pa.ChunkedArray):  # one chunk (a row group's, a table's slice): not copied
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    try:
        return _read(reader, array)
    except (pa.ArrowException, UnicodeDecodeError, ValueError, TypeError, OverflowError, IndexError) as exc:
        if reader.kind in ("text", "path", "json", "value"):
            return [_one(reader, array, i) for i in range(len(array))]
        raise InvalidArgumentError(
            f"Column {reader.name!r}: its values cannot be read as {reader.kind} ({type(exc).__name__}: "
            f"{str(exc)[:200]})."
        ) from exc


def _one(reader: CellReader, array: Any, i: int) -> Any:
    """Row ``i`` alone, read as Python (a damaged value, invalid UTF-8 say, is a `Bad`)."""
    try:
        value = array[i].as_py()
    except (UnicodeDecodeError, ValueError, TypeError, OverflowError, IndexError) as exc:
        return Bad(f"the value cannot be read ({type(exc).__name__}: {str(exc)[:120]})")
    return _plain(reader, [value])[0]


def _plain(reader: CellReader, values: list[Any]) -> list[Any]:
    if reader.kind == "json":
        return [_NULL if v is None else _json(v) for v in values]
    if reader.kind in ("text", "path"):
        return [v if isinstance(v, str) else _NULL if v is None else Bad("expected a string") for v in values]
    return values


def _read(reader: CellReader, array: Any) -> list[Any]:
    pa = pyarrow()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if reader.kind == "numbers":
        assert reader.layout is not None
        return _numbers(reader.layout, array)
    if reader.kind == "polygons":
        assert reader.layout is not None
        return _polygons(reader.layout, array)
    if reader.kind == "image":
        return _images(reader.layout, array)
    return _plain(reader, array.to_pylist())


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return text  # a column of values (not of JSON text) said to be json: the values themselves
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        return Bad(f"the text is not JSON ({str(exc)[:80]})")


# -- nested lists of numbers --------------------------------------------------------------------------


@dataclass
class _Levels:
    """A nested list column unpacked: the numbers, and per list level the length of every list and the
    row each list belongs to; ``bad`` marks rows holding a null at any level."""

    leaf: np.ndarray
    lengths: list[np.ndarray]
    owners: list[np.ndarray]
    leaf_owner: np.ndarray
    bad: np.ndarray


def _list_level(array: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """One list level: its children (nulls' values left out), each list's length (0 for a null), and
    which lists are null."""
    pa = pyarrow()
    t = pa.types
    if t.is_list_view(array.type) or t.is_large_list_view(array.type):
        array = array.cast(pa.large_list(array.type.value_type))
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if t.is_fixed_size_list(array.type):
        lengths = np.where(valid, array.type.list_size, 0).astype(np.int64)
    else:
        lengths = np.asarray(
            pa.compute.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False), np.int64
        )
    return array.flatten(), lengths, ~valid


def _unpack(array: Any, rank: int, complex_leaf: bool) -> _Levels:
    pa = pyarrow()
    n = len(array)
    bad = np.zeros(n, dtype=bool)
    owner = np.arange(n, dtype=np.int64)
    lengths: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    for _ in range(rank + int(complex_leaf)):
        array, length, null = _list_level(array)
        bad[owner[null]] = True
        lengths.append(length)
        owners.append(owner)
        owner = np.repeat(owner, length)
    nulls = np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if nulls.any():
        bad[owner[nulls]] = True
        if not pa.types.is_null(array.type):
            array = array.fill_null(pa.scalar(0).cast(array.type))
    leaf = np.asarray(array.to_numpy(zero_copy_only=False))
    return _Levels(leaf, lengths, owners, owner, bad)


def _row_extent(values: np.ndarray, owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether all of ``values`` (grouped by ``owner``, ascending) agree, and the first (-1
    for a row without any)."""
    counts = np.bincount(owner, minlength=n)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    nonempty = counts > 0
    agree = np.ones(n, dtype=bool)
    first = np.full(n, -1, dtype=np.int64)
    if values.size:
        at = starts[nonempty]
        agree[nonempty] = np.maximum.reduceat(values, at) == np.minimum.reduceat(values, at)
        first[nonempty] = values[at]
    return agree, first


def _shapes(levels: _Levels, dims: tuple[int | None, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's shape from its lists' lengths, and the rows whose lists do not make an array."""
    rank = len(dims)
    shapes = np.zeros((n, rank), dtype=np.int64)
    ragged = np.zeros(n, dtype=bool)
    for k in range(rank):
        agree, first = _row_extent(levels.lengths[k], levels.owners[k], n)
        ragged |= ~agree
        fill = dims[k] or 0  # a dimension behind an empty one: its fixed extent, if the layout knows it
        shapes[:, k] = np.where(first >= 0, first, fill)
    return shapes, ragged


def _dtype(layout: ColumnLayout, leaf: np.ndarray) -> np.dtype[Any]:
    if layout.dtype is None:
        return leaf.dtype
    want = np.dtype(layout.dtype)
    if leaf.dtype == want or leaf.size == 0 or want.kind not in "iu" or leaf.dtype.kind not in "iu":
        return want
    info = np.iinfo(want)
    fits = int(leaf.min()) >= info.min and int(leaf.max()) <= info.max
    return want if fits else leaf.dtype  # out of range: the tensor's own check refuses it, by value


def _numbers(layout: ColumnLayout, array: Any) -> list[Any]:
    if layout.shaped:
        return _shaped(layout, array)
    n = len(array)
    complex_leaf = layout.dtype is not None and np.dtype(layout.dtype).kind == "c"
    levels = _unpack(array, layout.ndim, complex_leaf)
    leaf = levels.leaf
    if complex_leaf:
        leaf = leaf.astype(np.dtype(layout.dtype).type(0).real.dtype).view(np.dtype(layout.dtype))
    leaf = leaf.astype(_dtype(layout, leaf), copy=False)
    if layout.ndim == 0:
        return [_NULL if levels.bad[i] else leaf[i] for i in range(n)]
    shapes, ragged = _shapes(levels, layout.dims, n)
    counts = np.bincount(levels.leaf_owner, minlength=n) // (2 if complex_leaf else 1)
    out: list[Any] = []
    start = 0
    for i in range(n):
        stop = start + int(counts[i])
        if levels.bad[i]:
            out.append(_NULL)
        elif ragged[i] or stop - start != int(np.prod(shapes[i])):
            out.append(Bad("its lists differ in length, so they are not an array"))
        else:
            out.append(leaf[start:stop].reshape(tuple(shapes[i])))
        start = stop
    return out


def _shaped(layout: ColumnLayout, array: Any) -> list[Any]:
    """Cells of ``{values, shape}``: flat values reshaped to the shape beside them, when they agree."""
    flat = CellReader("values", "numbers", ColumnLayout("values", "generic", layout.dtype, dims=(None,)))
    dims = CellReader("shape", "numbers", ColumnLayout("shape", "generic", "int64", dims=(None,)))
    values, shapes = read_cells(flat, array.field("values")), read_cells(dims, array.field("shape"))
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    out: list[Any] = []
    for v, s, ok in zip(values, shapes, valid, strict=True):
        if not ok or isinstance(v, Bad) or isinstance(s, Bad):
            out.append(_NULL)
        elif len(s) != layout.ndim or (s < 0).any() or int(np.prod(s)) != v.size:
            out.append(Bad(f"shape {s.tolist()} does not fit {v.size} values of rank {layout.ndim}"))
        else:
            out.append(v.reshape(tuple(int(d) for d in s)))
    return out


def _polygons(layout: ColumnLayout, array: Any) -> list[Any]:
    """Cells of objects of polygons of (x, y) points: lists (objects) of lists of ``(m, 2)`` arrays."""
    dtype = np.dtype(layout.dtype or "float32")
    out: list[Any] = []
    for row in array.to_pylist():
        if row is None:
            out.append(_NULL)
            continue
        try:
            out.append([[np.asarray(p, dtype=dtype).reshape(-1, 2) for p in obj] for obj in row])
        except (TypeError, ValueError) as exc:
            out.append(Bad(f"expected objects of polygons of (x, y) points ({exc})"))
    return out


# -- images ---------------------------------------------------------------------------------------------


def _blobs(array: Any) -> list[memoryview | None]:
    """Each row's bytes of a binary (or large binary) array as a view of the array's buffer (not copied:
    an image is stored from there), None for a null; the offsets checked against the buffer first.

    Raises:
        ValueError: offsets that run backwards or past the buffer.
    """
    n = len(array)
    offsets_buffer, data = array.buffers()[1:3]
    if n == 0 or offsets_buffer is None:
        return [None] * n
    width = np.int64 if pyarrow().types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=width)
    if len(offsets) < array.offset + n + 1:
        raise ValueError(f"{len(offsets)} offsets for {n} values from {array.offset}")
    offsets = offsets[array.offset : array.offset + n + 1]
    view = memoryview(data if data is not None else b"").cast("B")
    if int(offsets[0]) < 0 or int(offsets[-1]) > len(view) or bool((np.diff(offsets) < 0).any()):
        raise ValueError("offsets that run backwards or past the values' buffer")
    bounds = offsets.tolist()
    valid = array.is_valid().to_pylist() if array.null_count else [True] * n
    return [view[bounds[i] : bounds[i + 1]] if valid[i] else None for i in range(n)]


def _images(layout: ColumnLayout | None, array: Any) -> list[Any]:
    """Cells of an image struct (or a binary column): `ImageBytes` (of views of the column's buffer), or
    the path of a struct without bytes (a file the caller's folder must hold)."""
    pa = pyarrow()
    dims = layout.dims if layout is not None else ()
    if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
        return [_NULL if b is None else ImageBytes(b, None, None, dims) for b in _blobs(array)]
    names = {array.type.field(i).name for i in range(array.type.num_fields)}
    n = len(array)
    field = array.field("bytes") if "bytes" in names else None
    binary = field is not None and (pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type))
    blobs = _blobs(field) if binary else field.to_pylist() if field is not None else [None] * n
    paths = array.field("path").to_pylist() if "path" in names else [None] * n
    shapes: list[Any] = [None] * n
    if layout is not None and layout.shaped and "shape" in names:
        reader = CellReader("shape", "numbers", ColumnLayout("shape", "generic", "int64", dims=(None,)))
        shapes = read_cells(reader, array.field("shape"))
    valid = array.is_valid().to_pylist()
    out: list[Any] = []
    for ok, blob, path, shape in zip(valid, blobs, paths, shapes, strict=True):
        if not ok or (blob is None and path is None):
            out.append(_NULL)
        elif blob is None:
            out.append(path)
        elif isinstance(shape, np.ndarray) and len(shape) == len(dims):
            out.append(ImageBytes(blob, path, tuple(int(d) for d in shape), dims))
        else:
            out.append(ImageBytes(blob, path, None, dims))
    return out
