"""pandas DataFrames as tables: what each column is (the layouts ``to_pandas`` leaves in ``frame.attrs``,
else the column's dtype and first value), its cells, and a digest of its content.

A frame's cells are taken as they are (numpy arrays stay arrays of their dtype and shape), so that a
frame made by ``ds.to_pandas()`` comes back exactly; a missing value (None, NaN in an object column,
``pd.NA``) is a `Bad` cell, except in a float column, where NaN is a number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from lakecompute.errors import FingerprintError, InvalidArgumentError
from lakecompute.tables._arrow import content_hasher, pandas
from lakecompute.tables._cells import COLUMN_CELLS, Bad, CellReader
from lakecompute.tables._images import ImageBytes
from lakecompute.tables._layout import META_KEY, ColumnLayout

__all__ = ["frame_cells", "frame_digest", "frame_readers"]

_NULL: Final = Bad("the value is missing (None, NaN or NA)")


def _missing(value: Any) -> bool:
    return value is None or value is pandas().NA or (isinstance(value, float) and math.isnan(value))


def _recorded(frame: Any) -> dict[str, ColumnLayout]:
    """The layouts ``to_pandas`` recorded in ``frame.attrs`` (checked; empty when there are none)."""
    note = frame.attrs.get(META_KEY.decode()) if isinstance(frame.attrs, dict) else None
    if not isinstance(note, dict) or not isinstance(note.get("tensors"), list):
        return {}
    out = {}
    for entry in note["tensors"]:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            raw = {k: v for k, v in entry.items() if k != "name"}
            out[entry["name"]] = ColumnLayout.from_metadata(entry["name"], json.dumps(raw).encode())
    return out


def _first(series: Any) -> Any:
    """The column's first value that is not missing (None when every value is)."""
    for value in series:
        if isinstance(value, (np.ndarray, list, dict)) or not _missing(value):
            return value
    return None


def _object_reader(name: str, series: Any) -> CellReader:
    """What an object column holds, from its first value that is not missing."""
    first = _first(series)
    if isinstance(first, str):
        return CellReader(name, "text", ColumnLayout(name, "text", "str"))
    if isinstance(first, dict) and ("bytes" in first or "path" in first):
        return CellReader(name, "image", ColumnLayout(name, "image", "uint8"))
    if isinstance(first, (np.ndarray, list, tuple, int, float, np.generic)) and not isinstance(first, bool):
        try:
            arr = np.asarray(first)
        except ValueError:
            arr = np.asarray([], dtype=object)
        if arr.dtype.kind in "biufc":
            layout = ColumnLayout(name, "generic", None, dims=(None,) * arr.ndim)
            return CellReader(name, "numbers", layout)
    if isinstance(first, (dict, list, bool)):
        return CellReader(name, "json", ColumnLayout(name, "json", "json"))
    return CellReader(name, "value")


def _category_reader(name: str, dtype: Any) -> CellReader:
    """A pandas category of strings: a class_label tensor whose class names are the categories."""
    categories = list(dtype.categories)
    if all(isinstance(c, str) for c in categories):
        layout = ColumnLayout(name, "class_label", "uint32", info={"class_names": categories})
        return CellReader(name, "value", layout)
    return CellReader(name, "value")


def _numbers_dtype(name: str, dtype: Any) -> np.dtype[Any]:
    """The numpy dtype of a column of numbers: a pandas extension dtype's values' (nullable Int64:
    int64; a sparse column, read as its dense values: its subtype's).

    Raises:
        InvalidArgumentError: an extension dtype of numbers that has no numpy dtype, naming the column.
    """
    pd = pandas()
    if isinstance(dtype, pd.SparseDtype):
        dtype = dtype.subtype
    dtype = getattr(dtype, "numpy_dtype", dtype)
    try:
        found: np.dtype[Any] = np.dtype(dtype)
    except TypeError as exc:
        raise InvalidArgumentError(
            f"Column {name!r} holds numbers of the pandas dtype {dtype}, which has no numpy dtype to store "
            f"them as; convert it first (df[{name!r}] = df[{name!r}].to_numpy(dtype=...))."
        ) from exc
    return found


def _reader(name: str, series: Any, layout: ColumnLayout | None) -> CellReader:
    pd = pandas()
    if layout is not None:
        return CellReader(name, COLUMN_CELLS[layout.mapping.column], layout, recorded=True)
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return _category_reader(name, dtype)
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
        return CellReader(name, "numbers", ColumnLayout(name, "generic", _numbers_dtype(name, dtype).name))
    if pd.api.types.is_string_dtype(dtype) and not pd.api.types.is_object_dtype(dtype):
        return CellReader(name, "text", ColumnLayout(name, "text", "str"))
    if pd.api.types.is_object_dtype(dtype):
        return _object_reader(name, series)
    return CellReader(name, "value")


def frame_readers(frame: Any, columns: Sequence[str] | None) -> dict[str, CellReader]:
    """A reader per column of ``frame`` (those in ``columns`` when given, in that order).

    Raises:
        InvalidArgumentError: an unknown column, a name that is not a str, or names given twice.
    """
    names = list(frame.columns)
    if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise InvalidArgumentError(
            f"DataFrame columns must be distinct strings to become tensors. Got {names!r:.200}; rename them "
            "(df.columns = [...])."
        )
    wanted = names if columns is None else ([columns] if isinstance(columns, str) else list(columns))
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise InvalidArgumentError(f"Unknown column(s) {unknown!r}. The DataFrame has {names!r}.")
    recorded = _recorded(frame)
    return {c: _reader(c, frame[c], recorded.get(c)) for c in wanted}


def _image_cell(value: Any, dims: tuple[int | None, ...]) -> Any:
    if isinstance(value, dict):
        data, path, shape = value.get("bytes"), value.get("path"), value.get("shape")
        exact = isinstance(shape, tuple) and len(shape) == len(dims) and all(type(d) is int for d in shape)
        if isinstance(data, (bytes, bytearray)):
            name = path if isinstance(path, str) else None
            return ImageBytes(bytes(data), name, shape if exact else None, dims)
        if isinstance(path, str):
            return path
    if isinstance(value, (bytes, bytearray)):
        return ImageBytes(bytes(value), None, None, dims)
    if isinstance(value, str):
        return value
    return Bad("expected an image: a {bytes, path} dict, bytes or a path")


def frame_cells(reader: CellReader, series: Any) -> list[Any]:
    """One value (or `Bad`) per row of a frame's column, as ``reader`` says."""
    values = series.to_numpy()
    kind = reader.kind
    if kind == "numbers" and values.dtype.kind in "biufc":
        return list(values)  # a typed column: numpy scalars of its dtype (NaN is a number)
    dims = reader.layout.dims if reader.layout is not None else ()
    out: list[Any] = []
    for v in values:
        if kind == "json":
            out.append(v)  # None is a JSON value (null)
        elif not isinstance(v, (np.ndarray, list, dict)) and _missing(v):
            out.append(_NULL)
        elif kind == "image":
            out.append(_image_cell(v, dims))
        elif kind in ("text", "path") and not isinstance(v, str):
            out.append(Bad(f"expected a string, got {type(v).__name__}"))
        else:
            out.append(v)
    return out


# -- the content's digest ------------------------------------------------------------------------------


def _hash_value(h: Any, value: Any, where: str) -> None:
    """One value's content, tagged by its type (so that 1 and "1" and 1.0 differ)."""
    if value is None or isinstance(value, (bool, int, float, complex, np.generic)) or value is pandas().NA:
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, str):
        h.update(f"s{len(value)}:".encode() + value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, (bytes, bytearray)):
        h.update(f"b{len(value)}:".encode() + bytes(value))
    elif isinstance(value, np.ndarray) and value.dtype.kind in "biufcUSM":
        h.update(f"a{value.dtype.str}{value.shape}:".encode() + np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (list, tuple, dict)):
        items = list(value.items()) if isinstance(value, dict) else list(value)
        h.update(f"{type(value).__name__}{len(items)}:".encode())
        for item in items:
            _hash_value(h, item, where)
    else:
        raise FingerprintError(
            f"{where} holds a {type(value).__name__}, whose content lakecompute cannot digest, so an eval "
            "over the DataFrame cannot be recorded."
        )


def frame_digest(frame: Any) -> str:
    """A digest of a frame's columns and values (not its index).

    Raises:
        FingerprintError: a cell of a type whose content cannot be digested (an arbitrary object).
    """
    h = content_hasher()
    for name in frame.columns:
        series = frame[name]
        h.update(f"column {name!r} {series.dtype};".encode())
        values = series.to_numpy()
        if values.dtype.kind in "biufcmM":
            h.update(np.ascontiguousarray(values).tobytes())
            continue
        for v in values:
            _hash_value(h, v, f"Column {name!r}")
    return str(h.hexdigest())
