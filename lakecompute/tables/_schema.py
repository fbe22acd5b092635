"""What each column of a table is: read from the field's lakecompute layout, else from the Hugging Face
features in the schema's metadata, else from its Arrow type; and the schema an export writes.

Metadata from outside is untrusted: a layout or a Hugging Face feature that does not fit the column's
Arrow type (``Image`` over an int column, a layout over another type) is refused with an
`InvalidArgumentError` naming the column, what the metadata says and what the column holds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.tables._arrow import pyarrow
from lakecompute.tables._cells import COLUMN_CELLS, CellReader
from lakecompute.tables._layout import (
    HF_KEY,
    META_KEY,
    ColumnLayout,
    arrow_type,
    hf_feature,
    same_type,
)

__all__ = ["export_schema", "hf_features", "infer_reader", "schema_readers"]


def export_schema(layouts: Sequence[ColumnLayout]) -> Any:
    """The Arrow schema of an export: a field per tensor with its layout in the field's metadata, and
    the Hugging Face features of them all in the schema's (so ``datasets`` reads the columns typed)."""
    pa = pyarrow()
    # Nullable (though no cell is null): Hugging Face `datasets` takes a field's feature from the metadata
    # only when the field is what the feature makes, and its fields are nullable.
    fields = [pa.field(lay.name, arrow_type(lay), metadata=lay.metadata()) for lay in layouts]
    features = {lay.name: hf_feature(lay) for lay in layouts}
    meta = {
        HF_KEY: json.dumps({"info": {"features": features}}).encode(),
        META_KEY: json.dumps({"format": 1, "tensors": [lay.name for lay in layouts]}).encode(),
    }
    return pa.schema(fields, metadata=meta)


def hf_features(schema: Any) -> dict[str, Any]:
    """The Hugging Face features the schema's metadata names, by column (empty when it names none, or
    the metadata is not what ``datasets`` writes: then the columns' types decide)."""
    raw = (schema.metadata or {}).get(HF_KEY)
    if raw is None:
        return {}
    try:
        features = json.loads(raw).get("info", {}).get("features", {})
    except (ValueError, AttributeError, RecursionError):
        return {}
    return features if isinstance(features, dict) else {}


def _lies(name: str, said: str, got: Any) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Column {name!r}: the schema's {said}, but the column holds {got}. The metadata does not fit "
        "the data; pass htypes= to say what the column is, or fix the file's metadata."
    )


def _layout_reader(field: Any) -> CellReader | None:
    raw = (field.metadata or {}).get(META_KEY)
    if raw is None:
        return None
    layout = ColumnLayout.from_metadata(field.name, raw)
    want = arrow_type(layout)
    if not same_type(field.type, want):
        said = f"lakecompute metadata says it is a {layout.htype} tensor stored as {want}"
        raise _lies(field.name, said, field.type)
    return CellReader(field.name, COLUMN_CELLS[layout.mapping.column], layout, recorded=True)


def _numbers_layout(name: str, dtype: Any, htype: str = "generic") -> ColumnLayout | None:
    """A generic (or class_label) layout of a column of numbers in nested lists, from its Arrow type;
    None when it is not one."""
    pa = pyarrow()
    t = pa.types
    dims: list[int | None] = []
    while t.is_list(dtype) or t.is_large_list(dtype) or t.is_fixed_size_list(dtype):
        dims.append(dtype.list_size if t.is_fixed_size_list(dtype) else None)
        dtype = dtype.value_type
    if t.is_dictionary(dtype) or not (t.is_integer(dtype) or t.is_floating(dtype) or t.is_boolean(dtype)):
        return None
    return ColumnLayout(name, htype, np.dtype(dtype.to_pandas_dtype()).name, dims=tuple(dims))


def _is_image_struct(dtype: Any) -> bool:
    pa = pyarrow()
    if not pa.types.is_struct(dtype):
        return False
    names = {dtype.field(i).name: dtype.field(i).type for i in range(dtype.num_fields)}
    blob, path = names.get("bytes"), names.get("path")
    t = pa.types
    binary = blob is None or t.is_binary(blob) or t.is_large_binary(blob) or t.is_null(blob)
    text = path is None or t.is_string(path) or t.is_large_string(path) or t.is_null(path)
    return (blob is not None or path is not None) and binary and text


def _class_names(feature: Any) -> list[str] | None:
    names = feature.get("names") if isinstance(feature, dict) else None
    ok = isinstance(names, list) and all(isinstance(n, str) for n in names) and len(set(names)) == len(names)
    return names if ok else None


def _feature_reader(field: Any, feature: Any) -> CellReader | None:
    """The reader a Hugging Face feature asks for, checked against the column's type; None for a feature
    that leaves it to the type (``Value``, ``Sequence`` of values, anything unknown)."""
    pa = pyarrow()
    kind = feature.get("_type") if isinstance(feature, dict) else None
    name, dtype = field.name, field.type
    if kind == "Image":
        if _is_image_struct(dtype) or pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
            return CellReader(name, "image", ColumnLayout(name, "image", "uint8"))
        if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
            return CellReader(name, "path", ColumnLayout(name, "image", "uint8"))
        raise _lies(name, "Hugging Face features say it is an Image", dtype)
    inner = feature.get("feature") if kind in ("Sequence", "List", "LargeList") else feature
    if isinstance(inner, dict) and inner.get("_type") == "ClassLabel":
        names = _class_names(inner)
        layout = _numbers_layout(name, dtype, "class_label")
        rank = 0 if inner is feature else 1
        if layout is None or layout.ndim != rank or names is None:
            raise _lies(name, "Hugging Face features say it holds ClassLabel values", dtype)
        return CellReader(name, "numbers", _with_names(layout, names))
    if kind == "Json":
        return CellReader(name, "json", ColumnLayout(name, "json", "json"))
    return None


def _with_names(layout: ColumnLayout, names: list[str]) -> ColumnLayout:
    return ColumnLayout(
        layout.name, layout.htype, layout.dtype, info={"class_names": names}, dims=layout.dims
    )


def _type_reader(field: Any) -> CellReader:
    """The reader the column's Arrow type alone suggests."""
    pa = pyarrow()
    t = pa.types
    name, dtype = field.name, field.type
    if t.is_dictionary(dtype):  # a pandas category written to Parquet, say: read as its values (decoded)
        return _type_reader(pa.field(name, dtype.value_type, metadata=field.metadata))
    numbers = _numbers_layout(name, dtype)
    if numbers is not None:
        return CellReader(name, "numbers", numbers)
    if t.is_string(dtype) or t.is_large_string(dtype) or t.is_string_view(dtype):
        return CellReader(name, "text", ColumnLayout(name, "text", "str"))
    if isinstance(dtype, pa.ExtensionType) and dtype.extension_name == "arrow.json":
        return CellReader(name, "json", ColumnLayout(name, "json", "json"))
    if _is_image_struct(dtype):
        return CellReader(name, "image", ColumnLayout(name, "image", "uint8"))
    return CellReader(name, "value")


def infer_reader(field: Any, feature: Any = None) -> CellReader:
    """How a column's cells are read: by its lakecompute layout, its Hugging Face feature, or its type.

    Raises:
        InvalidArgumentError: metadata that does not fit the column (naming the column).
    """
    reader = _layout_reader(field)
    if reader is None and feature is not None:
        reader = _feature_reader(field, feature)
    return reader if reader is not None else _type_reader(field)


def schema_readers(schema: Any, columns: Sequence[str] | None = None) -> dict[str, CellReader]:
    """A reader per column of ``schema`` (those in ``columns``, in that order, when given).

    Raises:
        InvalidArgumentError: an unknown column, or metadata that does not fit its column.
    """
    names = list(schema.names)
    wanted = names if columns is None else list(columns)
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise InvalidArgumentError(f"Unknown column(s) {unknown!r}. The table has {names!r}.")
    if len(set(wanted)) != len(wanted) or len(set(names)) != len(names):
        raise InvalidArgumentError(f"Column names must be distinct. Got {wanted!r}.")
    features = hf_features(schema)
    return {c: infer_reader(schema.field(c), features.get(c)) for c in wanted}
