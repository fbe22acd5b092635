"""The viewer's one door to selecting by value (API.md §7, docs/selecting.md): the expression box and the
sidebar's counts.

Everything the viewer asks of expressions goes through here and through the dataset's own verbs: which
rows an expression keeps (``ds.filter(text)``, parsed by the library's parser, never run), each label
tensor's counts (``count_values``), and the text of the expression that keeps one value (the sidebar's
toggles: ``str(lc.col(tensor) == value)``). So the page selects exactly what Python selects for the same
text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lakecompute.select import col
from lakecompute.select._keys import plain

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
    return [(v.item() if isinstance(v, np.generic) else plain(v), int(n)) for v, n in counts.items()]


def value_clause(tensor: str, value: Any) -> str:
    """The expression text that keeps the rows whose ``tensor`` holds ``value`` (a sidebar toggle); for
    per-object values, the rows where any object does."""
    return str(col(tensor) == value)
