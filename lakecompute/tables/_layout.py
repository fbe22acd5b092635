"""A tensor as a column: its `ColumnLayout` (what the field's metadata records), the Arrow type its
htype's `lakecompute.specs.ArrowMapping` gives it, and the Hugging Face feature that types it.

The layout is everything a round trip needs beyond the values: the tensor's htype, dtype, compressions
and info (class names, box layout, keypoint names), its rank and the extent of each dimension that every
row shares. Export writes it into the field's metadata under ``lakecompute``; import reads it back and
checks it against the column it describes (metadata from outside is untrusted: a layout that does not
fit its column is refused, naming the column).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.specs import HTYPES, ArrowMapping, parse_chunk_compression, parse_sample_compression
from lakecompute.tables._arrow import pyarrow

__all__ = [
    "FORMAT",
    "HF_KEY",
    "META_KEY",
    "ColumnLayout",
    "arrow_type",
    "hf_feature",
    "numbers_dims",
    "same_type",
]

META_KEY: Final = b"lakecompute"
"""The key of a field's layout (and of the table's own note) in Arrow and Parquet metadata."""
HF_KEY: Final = b"huggingface"
"""The key under which Hugging Face ``datasets`` keeps a table's features."""
FORMAT: Final = 1
"""The version of the layout's JSON."""
_MAX_RANK: Final = 32  # numpy's limit is 64; a layout claiming more is hostile


@dataclass(frozen=True)
class ColumnLayout:
    """What a column of an exported table is as a tensor (kept in its field's metadata).

    Attributes:
        name: the tensor's (and column's) name.
        htype: the tensor's htype.
        dtype: its numpy dtype name (``str``/``json`` for text and json; None for a generic tensor that
            holds nothing yet).
        sample_compression: png, jpeg, webp or None.
        chunk_compression: zstd, lz4, gzip or None.
        info: the tensor's info: class names, box layout, keypoint names, anything the user kept there.
        dims: for numbers and images, one entry per dimension of a sample: its extent where every row
            has the same, else None (so its length is the samples' rank); empty for other htypes.
        shaped: numbers: each cell is ``{values, shape}`` (flat values and the sample's shape), used
            when some row's shape cannot be read from nested lists (an empty dimension in front of one
            that varies); images: the struct carries a ``shape`` field beside ``bytes`` and ``path``
            (WebP samples whose channel count varies).
    """

    name: str
    htype: str
    dtype: str | None
    sample_compression: str | None = None
    chunk_compression: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    dims: tuple[int | None, ...] = ()
    shaped: bool = False

    @property
    def mapping(self) -> ArrowMapping:
        """The htype's declared Arrow mapping."""
        return HTYPES[self.htype].arrow

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def class_names(self) -> list[str]:
        names = self.info.get("class_names") or []
        return list(names)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "htype": self.htype,
            "dtype": self.dtype,
            "sample_compression": self.sample_compression,
            "chunk_compression": self.chunk_compression,
            "info": dict(self.info),
            "dims": list(self.dims),
            "shaped": self.shaped,
        }

    def metadata(self) -> dict[bytes, bytes]:
        """The field metadata that carries this layout."""
        return {META_KEY: json.dumps(self.to_json(), separators=(",", ":")).encode()}

    @classmethod
    def from_metadata(cls, name: str, raw: bytes) -> ColumnLayout:
        """The layout in a field's metadata, checked.

        Raises:
            InvalidArgumentError: the metadata is not a layout this version writes, naming the column.
        """
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise _bad(name, f"it is not JSON ({exc})") from exc
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise _bad(name, f"expected an object with format {FORMAT}, got {str(obj)[:120]!r}")
        return _parse(name, obj)


def _bad(name: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Column {name!r}: its lakecompute metadata is not valid: {why}. Drop the field's metadata or "
        "pass htypes= to say what the column is."
    )


def _parse(name: str, obj: dict[str, Any]) -> ColumnLayout:
    htype = obj.get("htype")
    if not isinstance(htype, str) or htype not in HTYPES:
        raise _bad(name, f"unknown htype {htype!r:.80}")
    dtype = obj.get("dtype")
    declared = HTYPES[htype]
    try:
        if declared.numeric and dtype is not None:
            dtype = declared.parse_dtype(name, dtype)
        elif not declared.numeric and dtype != declared.dtype:
            raise InvalidArgumentError(f"dtype {dtype!r} for htype {htype!r}")
        sample = parse_sample_compression(obj.get("sample_compression"))
        chunk = parse_chunk_compression(obj.get("chunk_compression"))
    except (InvalidArgumentError, TypeError) as exc:
        raise _bad(name, str(exc)) from exc
    info, dims, shaped = obj.get("info"), obj.get("dims"), obj.get("shaped")
    if not isinstance(dims, list) or len(dims) > _MAX_RANK:
        raise _bad(name, f"dims must be a list of at most {_MAX_RANK} extents, got {str(dims)[:80]}")
    if not all(d is None or (type(d) is int and d >= 0) for d in dims):
        raise _bad(name, f"dims must be extents >= 0 or null, got {str(dims)[:80]}")
    if not isinstance(info, dict) or not isinstance(shaped, bool):
        raise _bad(name, "info must be an object and shaped a boolean")
    return ColumnLayout(name, htype, dtype, sample, chunk, info, tuple(dims), shaped)


# -- Arrow types ------------------------------------------------------------------------------------


def value_type(layout: ColumnLayout) -> Any:
    """The Arrow type of one number of a ``numbers`` or ``polygons`` column (complex: a pair of floats)."""
    pa = pyarrow()
    name = layout.mapping.cast or layout.dtype
    if name is None:
        return pa.null()  # a generic tensor without samples has no dtype yet
    dtype = np.dtype(name)
    if dtype.kind == "c":
        return pa.list_(pa.from_numpy_dtype(np.dtype(f"f{dtype.itemsize // 2}")), 2)
    return pa.from_numpy_dtype(dtype)


def nested(child: Any, dims: tuple[int | None, ...]) -> Any:
    """``child`` in one list per dimension, outermost first: fixed-size where the extent is known."""
    pa = pyarrow()
    for d in reversed(dims):
        child = pa.list_(child) if d is None else pa.list_(child, d)
    return child


def image_type(shaped: bool) -> Any:
    """Hugging Face's image struct ``{bytes, path}`` (with ``shape`` when the layout needs it)."""
    pa = pyarrow()
    fields = [pa.field("bytes", pa.binary()), pa.field("path", pa.string())]
    if shaped:
        fields.append(pa.field("shape", pa.list_(pa.int64())))
    return pa.struct(fields)


def arrow_type(layout: ColumnLayout) -> Any:
    """The Arrow type of the column ``layout`` describes (see docs/tables.md)."""
    pa = pyarrow()
    kind = layout.mapping.column
    if kind == "image":
        return image_type(layout.shaped)
    if kind in ("text", "json"):
        return pa.string()
    value = value_type(layout)
    if kind == "polygons":  # objects -> polygons -> points -> (x, y)
        return nested(pa.list_(value, 2), (None, None, None))
    if layout.shaped:
        return pa.struct([("values", pa.list_(value)), ("shape", pa.list_(pa.int64()))])
    return nested(value, layout.dims)


def _same_struct(got: Any, want: Any) -> bool:
    t = pyarrow().types
    if not t.is_struct(got):
        return False
    names = {got.field(i).name: got.field(i).type for i in range(got.num_fields)}
    wanted = [want.field(i) for i in range(want.num_fields)]
    return all(f.name in names and same_type(names[f.name], f.type) for f in wanted)


def _same_list(got: Any, want: Any) -> bool:
    t = pyarrow().types
    if t.is_fixed_size_list(want):
        fixed = t.is_fixed_size_list(got) and got.list_size == want.list_size
        return fixed and same_type(got.value_type, want.value_type)
    listy = t.is_list(got) or t.is_large_list(got) or t.is_list_view(got) or t.is_large_list_view(got)
    return listy and same_type(got.value_type, want.value_type)


def same_type(got: Any, want: Any) -> bool:
    """Whether a column of type ``got`` can be read as ``want``: equal, up to the large and view
    variants of strings, binaries and lists that other writers (Polars) choose."""
    t = pyarrow().types
    if got == want:
        return True
    if t.is_struct(want):
        return _same_struct(got, want)
    if t.is_fixed_size_list(want) or t.is_list(want):
        return _same_list(got, want)
    if t.is_string(want):
        return bool(t.is_large_string(got) or t.is_string_view(got))
    if t.is_binary(want):
        return bool(t.is_large_binary(got) or t.is_binary_view(got))
    return False


# -- shapes -----------------------------------------------------------------------------------------


def numbers_dims(
    shapes: np.ndarray, varying: tuple[int, ...] = (), trailing: tuple[int, ...] = ()
) -> tuple[tuple[int | None, ...], bool]:
    """The ``dims`` and ``shaped`` of a numbers column whose rows have ``shapes`` (n, rank), and whether
    nested lists would lose some row's shape (an empty dimension in front of one whose extent varies:
    the lists say nothing of it).

    A dimension is fixed where the htype fixes it (``trailing``, the extents of the last dimensions,
    as `ArrowMapping.trailing`), else where every row has the same extent, but for those in
    ``varying`` (a tensor's objects' axis) and an extent of 0 (a fixed-size list of size 0 is written
    to Parquet as one that no reader reads back)."""
    n, rank = shapes.shape
    same = (shapes == shapes[0]).all(axis=0) if n else np.zeros(rank, dtype=bool)
    dims = [
        int(shapes[0, k]) if same[k] and shapes[0, k] > 0 and k not in varying else None for k in range(rank)
    ]
    for k, extent in zip(range(rank - len(trailing), rank), trailing, strict=True):
        if k >= 0 and (n == 0 or (same[k] and shapes[0, k] == extent)):
            dims[k] = extent
    shaped = any(dims[k] is None and bool((shapes[:, :k] == 0).any()) for k in range(1, rank))
    return tuple(dims), shaped


# -- Hugging Face features ------------------------------------------------------------------------------


def _value(dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "_type": "Value"}


def _sequence(feature: dict[str, Any], length: int | None = None) -> dict[str, Any]:
    # "Sequence" is read by every datasets version (5.x reads it as its List).
    return {"feature": feature, "length": -1 if length is None else length, "_type": "Sequence"}


def _number_feature(layout: ColumnLayout) -> dict[str, Any]:
    names = layout.class_names
    if layout.mapping.class_label and names:
        return {"names": names, "_type": "ClassLabel"}
    name = layout.mapping.cast or layout.dtype
    if name is None:
        return _value("null")
    dtype = np.dtype(name)
    if dtype.kind == "c":
        return _sequence(_value(f"float{dtype.itemsize * 4}"), 2)
    return _value(str(dtype))


def hf_feature(layout: ColumnLayout) -> dict[str, Any]:
    """The Hugging Face ``datasets`` feature of the column, as ``Features.to_dict()`` writes it:
    ``Image``, ``ClassLabel(names=...)``, ``Value``, and ``Sequence`` for each list level."""
    kind = layout.mapping.column
    if kind == "image":
        return {"_type": "Image"}
    if kind in ("text", "json"):
        return _value("string")
    inner = _number_feature(layout)
    if kind == "polygons":
        point = _sequence(inner, 2)
        return _sequence(_sequence(_sequence(point)))
    if layout.shaped:
        return {"values": _sequence(inner), "shape": _sequence(_value("int64"))}
    for d in reversed(layout.dims):
        inner = _sequence(inner, d)
    return inner
