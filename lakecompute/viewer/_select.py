"""The viewer's one door to selecting by value (API.md §7): the expression box and the sidebar's counts.

Everything the viewer asks of expressions goes through here: which rows an expression keeps
(``ds.filter(text)``, parsed by the library's expression parser, never run), each label tensor's counts
(``view.count_values(tensor)``), and the text of the expression that keeps one value (the sidebar's
toggles). So the page selects exactly what Python selects for the same text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lakecompute.errors import InvalidArgumentError

__all__ = ["available", "count_values", "select", "value_clause"]


def available(ds: Any) -> bool:
    """Whether this lakecompute selects by value (``ds.filter(text)``, ``ds.count_values``)."""
    return callable(getattr(ds, "count_values", None))


def _refuse() -> InvalidArgumentError:
    return InvalidArgumentError(
        "Selecting by value (expressions and counts) is not available in this version of lakecompute."
    )


def select(ds: Any, expr: str | None) -> np.ndarray | range:
    """The rows of ``ds`` that ``expr`` keeps, in order (all of them when ``expr`` is None).

    Raises:
        InvalidArgumentError: the expression does not parse or does not fit the tensors (the message
            names the position), or selecting is not available.
    """
    if expr is None:
        return range(len(ds))
    if not available(ds):
        raise _refuse()
    return np.asarray(ds.filter(expr).positions, dtype=np.int64)


def count_values(data: Any, tensor: str) -> list[tuple[Any, int]]:
    """``data.count_values(tensor)`` as ``(value, count)`` pairs (values keep their types in JSON).

    Raises:
        InvalidArgumentError: selecting is not available, or the tensor cannot be counted.
        TensorDoesNotExistError: no such tensor.
    """
    if not available(data):
        raise _refuse()
    return [(_plain(k), int(v)) for k, v in data.count_values(tensor).items()]


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def value_clause(tensor: str, value: Any, per_object: bool) -> str:
    """The expression text that keeps the rows whose ``tensor`` holds ``value`` (a sidebar toggle)."""
    name = tensor if tensor.isidentifier() else f"`{tensor}`"
    literal = (
        repr(value)
        if not isinstance(value, str)
        else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    )
    clause = f"{name} == {literal}"
    return f"any({clause})" if per_object else clause
