"""The text form of expressions: what ``str(expr)`` writes and `lakecompute.select.parse_expression` reads.

Names are bare where they are plain identifiers and not words of the language, else in backticks; strings
are in single quotes with ``\\``, ``'`` and control characters escaped; parentheses are written exactly
where the tree needs them, so parsing the text gives the same tree back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Final

from lakecompute.select._expr import (
    KEYWORDS,
    Arith,
    Column,
    Compare,
    Constant,
    Expr,
    Function,
    Index,
    IsIn,
    Logical,
    Scalar,
    Unary,
)

__all__ = ["literal_text", "name_text", "precedence", "quote_string", "render"]

#: Binding strength of each kind of node in the text form (higher binds tighter).
_OR, _AND, _NOT, _COMPARE, _SUM, _PRODUCT, _NEGATE, _POSTFIX, _ATOM = range(1, 10)
_ARITH_PRECEDENCE: Final = {"+": _SUM, "-": _SUM, "*": _PRODUCT, "/": _PRODUCT, "//": _PRODUCT, "%": _PRODUCT}
_PLAIN_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Characters a string literal prints escaped (besides the quote and the backslash).
_ESCAPES: Final = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote_string(value: str) -> str:
    """A string literal in the language: single quotes, with ``\\``, ``'`` and control characters escaped."""
    out = ["'"]
    for ch in value:
        if ch in ("\\", "'"):
            out.append("\\" + ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append("'")
    return "".join(out)


def literal_text(value: Scalar) -> str:
    """How a literal value is written in the language."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return quote_string(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return repr(value)


def name_text(name: str) -> str:
    """A tensor name as written in the language: bare when it is a plain identifier and not a keyword,
    else in backticks."""
    return name if _PLAIN_NAME.fullmatch(name) and name not in KEYWORDS else f"`{name}`"


def _number(value: Scalar) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _negative(value: Scalar) -> bool:
    return _number(value) and (value < 0 or (value == 0 and math.copysign(1, value) < 0))  # type: ignore[operator]


#: How tightly each kind of node's text binds, by node type (those whose strength depends on the node
#: compute it from it).
_STRENGTH: Final[dict[type, Callable[[Expr], int]]] = {
    Logical: lambda n: _OR if n.op == "or" else _AND,  # type: ignore[attr-defined]
    Unary: lambda n: _NOT if n.op == "not" else _NEGATE,  # type: ignore[attr-defined]
    Compare: lambda n: _COMPARE,
    IsIn: lambda n: _COMPARE,
    Arith: lambda n: _ARITH_PRECEDENCE[n.op],  # type: ignore[attr-defined]
    Index: lambda n: _POSTFIX,
    # A negative number prints with its sign, which binds as a unary minus.
    Constant: lambda n: _NEGATE if _negative(n.value) else _ATOM,  # type: ignore[attr-defined]
}


def precedence(node: Expr) -> int:
    """How tightly ``node``'s text binds (parentheses go around a child that binds more loosely than its
    place needs)."""
    strength = _STRENGTH.get(type(node))
    return _ATOM if strength is None else strength(node)


class _Writer:
    """Writes an expression's text, noting where each node's text starts (for messages that point at it)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.starts: dict[int, int] = {}

    def put(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def child(self, node: Expr, needed: int) -> None:
        """``node``, in parentheses when it binds more loosely than ``needed``."""
        if precedence(node) < needed:
            self.put("(")
            self.node(node)
            self.put(")")
        else:
            self.node(node)

    def node(self, node: Expr) -> None:
        self.starts.setdefault(id(node), self.size)
        if isinstance(node, Column):
            self.put(name_text(node.name))
        elif isinstance(node, Constant):
            self.put(literal_text(node.value))
        elif isinstance(node, (Compare, Arith)):
            self._binary(node)
        elif isinstance(node, Logical):
            self._logical(node)
        else:
            self._unary(node)

    def _logical(self, node: Logical) -> None:
        own = precedence(node)
        for i, operand in enumerate(node.operands):
            if i:
                self.put(f" {node.op} ")
            self.child(operand, own + 1)

    def _unary(self, node: Expr) -> None:
        """The nodes with one operand: not, -, in [...], [item], len(), any(), all()."""
        if isinstance(node, Unary):
            self.put("not " if node.op == "not" else "-")
            operand = node.operand
            if node.op == "-" and isinstance(operand, Constant) and _number(operand.value):
                # `-1` reads as the literal -1: the negation of the literal 1 is written -(1).
                self.put("(")
                self.node(operand)
                self.put(")")
            else:
                self.child(operand, precedence(node))
        elif isinstance(node, IsIn):
            self.child(node.operand, _SUM)
            self.put(" in [" + ", ".join(literal_text(v) for v in node.values) + "]")
        elif isinstance(node, Index):
            self.child(node.operand, _POSTFIX)
            item = node.item
            self.put(f"[{quote_string(item) if isinstance(item, str) else item}]")
        elif isinstance(node, Function):
            self.put(f"{node.name}(")
            self.node(node.operand)
            self.put(")")
        else:  # pragma: no cover - every node kind is handled
            raise AssertionError(type(node).__name__)

    def _binary(self, node: Compare | Arith) -> None:
        own = precedence(node)
        # Arithmetic is left-associative: a right operand of the same strength needs parentheses
        # (a - (b - c)); comparisons do not chain, so neither side may be a comparison.
        self.child(node.left, own + 1 if isinstance(node, Compare) else own)
        self.put(" ")
        self.starts[id(node)] = self.size  # messages about the operation point at its operator
        self.put(f"{node.op} ")
        self.child(node.right, own + 1)


def render(expr: Expr) -> tuple[str, dict[int, int]]:
    """The text of ``expr``, and where each of its nodes' text starts (by ``id`` of the node)."""
    writer = _Writer()
    writer.node(expr)
    return "".join(writer.parts), writer.starts
