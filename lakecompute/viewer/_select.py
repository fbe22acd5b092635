"""The viewer's one door to selecting by value (API.md §7, docs/selecting.md): the expression box and the
sidebar's counts.

Everything the viewer asks of expressions goes through here and through the dataset's own verbs: which
rows an expression keeps (``ds.filter(text)``, parsed by the library's parser, never run), each label
tensor's counts (``count_values``), and the text of the expression that keeps one value (the sidebar's
toggles: ``str(lc.col(tensor) == value)``, see `value_clause`). So the page selects exactly what Python
selects for the same text.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lakecompute.errors import ExpressionError
from lakecompute.select import Expr, Logical, col, parse_expression, plain_value

__all__ = ["count_values", "select", "value_clause"]


def select(ds: Any, expr: str | None) -> np.ndarray | range:
    """The rows of ``ds`` that ``expr`` keeps, in order (all of them when ``expr`` is None).

    Raises:
        ExpressionError: the text does not parse or does not fit the tensors (naming the position).
    """
    if expr is None:
        return range(len(ds))
    return np.asarray(ds.filter(expr).positions, dtype=np.int64)


def count_values(data: Any, tensor: str) -> list[tuple[Any, int]]:
    """``data.count_values(tensor)`` as ``(value, count)`` pairs, most frequent first (so that values
    keep their types in JSON, where keys would be strings).

    Raises:
        TensorDoesNotExistError: no such tensor.
        ExpressionError: a tensor whose values cannot be counted.
    """
    counts = data.count_values(col(tensor))  # col: a tensor named like a keyword is still a name
    return [(v.item() if isinstance(v, np.generic) else plain_value(v), int(n)) for v, n in counts.items()]


def value_clause(tensor: str, value: Any) -> str | None:
    """The expression text that keeps the rows whose ``tensor`` holds ``value`` (a sidebar toggle); for
    per-object values, the rows where any object does. None where the language has no such text: a json
    list or dict that is empty or holds a dict with a null (a missing key reads as null too), or one past
    the language's limits.

    NaN equals nothing, itself included, so its clause is ``x != x``; a json list or dict is matched by its
    length and each item (``len(meta) == 2 and meta[0] == 1 and meta[1] == 2``), in parentheses.
    """
    try:
        clause = _clause(col(tensor), value)
        if clause is None:
            return None
        text = str(clause)
        parse_expression(text)  # within the language's limits (length, nesting)
    except ExpressionError:
        return None
    return f"({text})" if isinstance(clause, Logical) else text  # keeps its meaning when or-ed


def _clause(expr: Expr, value: Any) -> Expr | None:
    if isinstance(value, float) and math.isnan(value):
        return expr != expr
    if isinstance(value, list):
        items: list[tuple[int | str, Any]] = list(enumerate(value))
    elif isinstance(value, dict):
        if any(v is None for v in value.values()):
            return None
        items = list(value.items())
    else:
        equal: Expr = expr == value
        return equal
    if not items:  # [], {} and '' have the same length and no item to tell them apart
        return None
    clause = expr.len() == len(items)
    for key, item in items:
        part = _clause(expr[key], item)
        if part is None:
            return None
        clause = clause & part
    return clause
