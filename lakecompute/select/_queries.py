"""What the dataset's selecting verbs compute: the rows a condition keeps, counts, distinct values, bounds
and sort orders, as plain data (numpy arrays, dicts, lists of Python values).

Each is one column scan (`lakecompute.select._scan.scan`) of the tensors the expression names, then numpy:
``count_values`` of a label column is a ``bincount``. They take a dataset or a view and give results in the
view's order, so that a JSON API (the viewer) can call them as they are.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import ExpressionError
from lakecompute.select._evaluate import Values, truth
from lakecompute.select._expr import Expr
from lakecompute.select._keys import JsonValue, json_key, plain_value
from lakecompute.select._scan import scan, typed_for
from lakecompute.select._types import Static, Typed

if TYPE_CHECKING:
    from lakecompute.datasets import Dataset, DatasetView

__all__ = ["bounds", "count_values", "distinct", "filter_mask", "sort_order"]


def filter_mask(data: Dataset | DatasetView, expr: Expr | str) -> tuple[np.ndarray, str]:
    """Which rows of ``data`` the condition ``expr`` keeps (a bool per row, in its order), and the
    expression's text. A condition on per-object values keeps a row where any of its objects meets it.

    Raises:
        ExpressionError: the expression does not parse or fit the tensors, or gives values that are not
            conditions (numbers, text).
        DatasetCorruptError: stored data of a tensor it reads is damaged.
    """
    typed = typed_for(data, expr)
    static = typed.type_of(typed.expr)
    if static.kind not in ("bool", "json") or static.ndim:
        raise typed.error(
            typed.expr,
            f"a filter needs a condition, and this expression gives {_kind_words(static)}: compare it "
            "(x > 0, x == 'cat')",
        )
    values = scan(data, typed)
    flags = truth(values.data, static)
    if values.offsets is not None:  # a row is kept when any of its objects is
        hits = np.zeros(len(flags) + 1, dtype=np.int64)
        np.cumsum(flags, out=hits[1:])
        flags = hits[values.offsets[1:]] > hits[values.offsets[:-1]]
    return flags, typed.text


def _kind_words(static: Static) -> str:
    words = {"number": "numbers", "label": "class labels", "text": "text", "array": "arrays", "null": "None"}
    return words.get(static.kind, static.kind)


def _values(data: Dataset | DatasetView, what: Expr | str, verb: str) -> tuple[Typed, Values]:
    """The values ``verb`` aggregates: one per row, or one per object (every object counts)."""
    typed = typed_for(data, what)
    static = typed.type_of(typed.expr)
    if static.ndim or static.kind in ("array", "null"):
        raise typed.error(
            typed.expr,
            f"{verb} takes one value per row or per object; {typed.text!r} gives arrays (index a component, "
            "x[0], or count them, len(x))",
        )
    return typed, scan(data, typed)


def _python(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def count_values(data: Dataset | DatasetView, what: Expr | str) -> dict[Any, int]:
    """How often each value occurs in the rows of ``data`` (every object of per-object values counts), most
    frequent first (ties in the values' order); see ``Dataset.count_values``."""
    typed, values = _values(data, what, "count_values")
    static = typed.type_of(typed.expr)
    flat = values.data
    if static.kind == "label":
        names = static.class_names
        counts = np.bincount(flat, minlength=len(names)) if len(flat) else np.zeros(len(names), np.int64)
        order = np.argsort(-counts, kind="stable")
        return {
            (names[i] if i < len(names) else i): int(counts[i])
            for i in order.tolist()
            if counts[i] or i < len(names)
        }
    if static.kind in ("number", "bool"):
        uniq, counts = np.unique(flat, return_counts=True)
        order = np.argsort(-counts, kind="stable")
        return {_python(uniq[i]): int(counts[i]) for i in order.tolist()}
    counter = Counter(json_key(v) if static.kind == "json" else v for v in flat.tolist())
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], _order_key(kv[0])))
    return dict(ranked)


def _order_key(value: Any) -> tuple[int, Any]:
    """How mixed values sort: numbers, bools, text, lists and dicts (by their JSON text); None last."""
    if value is None:
        return (4, 0)
    if isinstance(value, JsonValue):
        return (1, value.value) if isinstance(value.value, bool) else (3, value.text)
    if isinstance(value, str):
        return (2, value)
    return (0, value)


def distinct(data: Dataset | DatasetView, what: Expr | str) -> list[Any]:
    """The distinct values in the rows of ``data``, sorted (see ``Dataset.distinct``)."""
    counts = count_values(data, what)
    typed = typed_for(data, what)
    static = typed.type_of(typed.expr)
    present = [v for v, c in counts.items() if c]
    if static.kind in ("number", "bool"):
        return sorted(present, key=lambda v: (math.isnan(v), v) if isinstance(v, float) else (False, v))
    return [plain_value(v) for v in sorted(present, key=_order_key)]


def bounds(data: Dataset | DatasetView, what: Expr | str) -> tuple[Any, Any]:
    """The smallest and largest value in the rows of ``data`` (NaN and None left out; ``(None, None)``
    for none), see ``Dataset.bounds``."""
    typed, values = _values(data, what, "bounds")
    static = typed.type_of(typed.expr)
    flat = values.data
    if static.kind == "label":
        raise typed.error(
            typed.expr,
            "class labels are names, which have no bounds: count them (count_values) or list them (distinct)",
        )
    if static.kind in ("number", "bool"):
        kept = flat[~np.isnan(flat)] if flat.dtype.kind == "f" else flat
        return (None, None) if not len(kept) else (_python(kept.min()), _python(kept.max()))
    if static.kind == "text":
        return (min(flat), max(flat)) if len(flat) else (None, None)
    numbers = [v for v in flat.tolist() if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
    return (min(numbers), max(numbers)) if numbers else (None, None)


def sort_order(data: Dataset | DatasetView, key: Expr | str, descending: bool) -> tuple[np.ndarray, str]:
    """The order of the rows of ``data`` by ``key`` (stable: equal keys keep their order; NaN and None
    last either way), as indices into ``data``, and the key's text."""
    typed, values = _values(data, key, "sort")
    static = typed.type_of(typed.expr)
    if values.offsets is not None:
        raise typed.error(
            typed.expr,
            "sort takes one value per row; this one gives a value per object: sort by len(x), or by "
            "any(...) / all(...) of a condition",
        )
    flat = values.data
    if static.kind in ("text", "json"):
        return _python_order(flat.tolist(), static, descending, typed), typed.text
    ranks = _label_ranks(flat, static.class_names) if static.kind == "label" else _ranks(flat)
    if descending:
        last = ranks == np.iinfo(np.int64).max
        ranks = np.where(last, ranks, -ranks)
    return np.argsort(ranks, kind="stable"), typed.text


def _ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank among the distinct values (NaN: the largest int64, last either way)."""
    inverse = np.unique(values, return_inverse=True)[1]
    ranks = inverse.astype(np.int64).reshape(-1)
    if values.dtype.kind == "f":
        ranks[np.isnan(values)] = np.iinfo(np.int64).max
    return ranks


def _label_ranks(indices: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """Class labels ranked by their names (indices without a name after them, by index; a tensor without
    class names by index alone)."""
    by_name = np.zeros(len(names) + 1, dtype=np.int64)  # the last entry stands in for an unnamed index
    by_name[np.argsort(np.asarray(names, dtype=object), kind="stable")] = np.arange(len(names))
    named = (indices >= 0) & (indices < len(names))
    return np.where(named, by_name[np.where(named, indices, len(names))], len(names) + indices)


def _python_order(values: list[Any], static: Static, descending: bool, typed: Typed) -> np.ndarray:
    """The stable order of text or json values (None last either way)."""
    present = [i for i, v in enumerate(values) if v is not None]
    absent = [i for i, v in enumerate(values) if v is None]
    if any(isinstance(values[i], (list, dict)) for i in present):
        raise typed.error(typed.expr, "sort takes numbers or text; this json value holds lists or dicts")
    try:
        present.sort(key=lambda i: _order_key(values[i]), reverse=descending)
    except TypeError as exc:  # pragma: no cover - _order_key keeps kinds apart
        raise ExpressionError(str(exc), typed.text) from None
    return np.asarray(present + absent, dtype=np.int64)
