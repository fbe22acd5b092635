"""Samples as JSON: every tensor's value for the sample page, and class names for the grid's captions.

Values are what Python reads (``ds[name][row].numpy()``, ``.text()``, ``.data()``), made plain for JSON:
arrays become nested lists (the first `MAX_VALUES` numbers of a larger one, marked ``truncated``), numpy
scalars become numbers, and floats JSON cannot hold (NaN, infinities) become the strings ``"nan"``,
``"inf"`` and ``"-inf"``. Image tensors are not spelled out: the page shows them from their own URL.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from lakecompute.errors import LakeComputeError
from lakecompute.viz import class_label_tensors

__all__ = ["MAX_VALUES", "captions", "jsonable", "tensor_entry"]

#: The most numbers of one value the sample page gets (a mask of a megapixel is summarised).
MAX_VALUES: Final = 4096


def jsonable(value: Any) -> Any:
    """``value`` with numpy types and non-finite floats made plain for strict JSON."""
    if isinstance(value, (np.ndarray, np.generic)):
        value = value.tolist()  # numbers, or nested lists of them
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, complex) or (isinstance(value, float) and not math.isfinite(value)):
        return repr(value)
    return value


def _error(exc: LakeComputeError) -> dict[str, str]:
    return {"error": type(exc).__name__, "message": str(exc)}


def _array_value(arr: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {"shape": list(arr.shape)}
    if arr.size > MAX_VALUES:
        out["value"] = jsonable(arr.reshape(-1)[:MAX_VALUES])
        out["truncated"] = True
    else:
        out["value"] = jsonable(arr)
    return out


def _value(ds: Any, name: str, row: int) -> dict[str, Any]:
    t = ds.tensors[name]
    if t.htype == "text":
        return {"value": ds[name][row].text()}
    if t.htype == "json":
        return {"value": jsonable(ds[name][row].data())}
    if t.htype == "polygon":
        return {"value": jsonable(ds[name][row].numpy(aslist=True))}
    out = _array_value(np.asarray(ds[name][row].numpy()))
    names = t.info.get("class_names")
    if names and t.htype == "class_label" and not out.get("truncated"):
        values = np.asarray(ds[name][row].numpy()).reshape(-1).tolist()
        out["names"] = [names[v] if 0 <= v < len(names) else None for v in values]
    return out


def tensor_entry(ds: Any, name: str, row: int, image: bool) -> dict[str, Any]:
    """Tensor ``name`` at ``row``: its htype and dtype, and its value (an image: only its shape); a
    damaged sample gives the error's name and message in place of the value."""
    t = ds.tensors[name]
    entry: dict[str, Any] = {"htype": t.htype, "dtype": str(t.dtype)}
    if row >= len(t):
        return {**entry, "missing": True}
    try:
        if image:
            entry["shape"] = list(np.shape(ds[name][row].numpy()))
            entry["image"] = True
        else:
            entry.update(_value(ds, name, row))
    except LakeComputeError as exc:
        entry.update(_error(exc))
    return entry


def captions(ds: Any, rows: Sequence[int]) -> tuple[list[dict[str, list[str]]], list[dict[str, str]]]:
    """Each row's class names, by class_label tensor (a list: per-object labels name several), and the
    errors of tensors that could not be read (damaged), which leave their captions out."""
    out: list[dict[str, list[str]]] = [{} for _ in rows]
    errors: list[dict[str, str]] = []
    if not rows:
        return out, errors
    for name in class_label_tensors(ds):
        names = list(ds.tensors[name].info.get("class_names") or [])
        try:
            values = ds[name][np.asarray(rows, dtype=np.int64)].numpy(aslist=True)
        except LakeComputeError as exc:
            errors.append({"tensor": name, **_error(exc)})
            continue
        for caption, value in zip(out, values, strict=True):
            labels = np.asarray(value).reshape(-1).tolist()
            caption[name] = list(dict.fromkeys(names[v] if 0 <= v < len(names) else str(v) for v in labels))
    return out, errors
