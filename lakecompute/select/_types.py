"""What each node of an expression gives, checked against the tensors before anything is read.

Every tensor has a `ColumnType`, derived from its htype's declaration and its rank: the kind of values it
holds, whether each row holds one value or one per object (`lakecompute.specs.ObjectAxis`), and how many
dimensions each value has beyond that (a box has one: its 4 numbers). `check` walks an expression and gives
each node a `Static` type, refusing what does not fit (an unknown tensor or class name, ``labels > 'cat'``,
text compared with a number, a box compared as a whole) with an `ExpressionError` naming the position in
``str(expr)``. Evaluation (`lakecompute.select._evaluate`) then needs no checks of its own.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal

from lakecompute.errors import ExpressionError
from lakecompute.select._expr import (
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
from lakecompute.select._text import render
from lakecompute.versioned import TensorState

__all__ = ["ColumnType", "Kind", "Static", "Typed", "check", "column_type"]

Kind = Literal["number", "bool", "label", "text", "json", "array", "null"]
"""What a value is: a number, a condition, a class label (an index with names), a text, a json value, an
array that expressions do not compare (a polygon, a mask channel), or None (a literal)."""

_ORDERED: Final = frozenset({"<", "<=", ">", ">="})


@dataclass(frozen=True, slots=True)
class ColumnType:
    """What a tensor's values are to expressions."""

    name: str
    """The tensor."""
    htype: str
    """Its htype."""
    kind: Kind
    """The kind of each value."""
    axis: int | None
    """The axis of a sample that lists objects (0 or -1), or None: one value per row."""
    ndim: int
    """Dimensions of each value beyond the objects (0: a number; 1: a box's 4 numbers, an embedding)."""
    class_names: tuple[str, ...] = ()
    """The class names of a class_label tensor."""
    image: bool = False
    """It holds images (which expressions never read)."""

    @property
    def many(self) -> bool:
        """Whether each row holds one value per object."""
        return self.axis is not None


def column_type(state: TensorState) -> ColumnType:
    """The `ColumnType` of a tensor as one version has it."""
    spec = state.spec
    declared = spec.declaration
    ndim = (
        state.ndim
        if state.ndim is not None
        else (1 if declared.objects and declared.objects.rank == 1 else 0)
    )
    axis = declared.object_axis(ndim)
    inner = max(ndim - (1 if axis is not None else 0), 0)
    names = tuple(state.info.get("class_names") or ()) if declared.class_named else ()
    if declared.image or spec.sample_compression is not None:
        return ColumnType(spec.name, spec.htype, "array", None, ndim, image=True)
    if spec.dtype == "str":
        return ColumnType(spec.name, spec.htype, "text", None, 0)
    if spec.dtype == "json":
        return ColumnType(spec.name, spec.htype, "json", None, 0)
    if declared.blob or declared.target in ("mask", "class_mask"):
        return ColumnType(spec.name, spec.htype, "array", axis, inner)
    if declared.labels:
        return ColumnType(spec.name, spec.htype, "label", axis, inner, names)
    kind: Kind = "bool" if spec.dtype == "bool" else "number"
    return ColumnType(spec.name, spec.htype, kind, axis, inner)


@dataclass(frozen=True, slots=True)
class Static:
    """What a node of an expression gives, known before anything is read."""

    kind: Kind
    many: bool
    """One value per object (aligned with the objects of ``source``'s rows)."""
    ndim: int = 0
    """Dimensions of each value (0: one number per row or object)."""
    class_names: tuple[str, ...] = ()
    source: str = ""
    """The tensor the values come from, for messages ("" for computed values)."""


@dataclass(frozen=True, slots=True)
class Typed:
    """An expression checked against a dataset's tensors: each node's type, where its text starts in
    ``text``, and what must be read of each tensor."""

    expr: Expr
    text: str
    types: Mapping[int, Static]
    """By ``id`` of each node."""
    starts: Mapping[int, int]
    columns: Mapping[str, ColumnType]
    """The tensors the expression reads."""
    shapes_only: frozenset[str]
    """Tensors of which only the samples' shapes are read (``len(polygons)``): no chunk of their data."""

    def type_of(self, node: Expr) -> Static:
        return self.types[id(node)]

    def error(self, node: Expr, detail: str) -> ExpressionError:
        """An `ExpressionError` pointing at ``node``."""
        return ExpressionError(detail, self.text, self.starts.get(id(node)))


def _nearest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"there is no tensor {name!r}.{hint} The tensors are {sorted(known)!r}"


class _Checker:
    def __init__(self, expr: Expr, columns: Mapping[str, ColumnType]) -> None:
        self.expr = expr
        self.text, self.starts = render(expr)
        self.columns = columns
        self.types: dict[int, Static] = {}
        self.read: dict[str, bool] = {}  # tensor -> whether its values are read (else its shapes)

    def error(self, node: Expr, detail: str) -> ExpressionError:
        return ExpressionError(detail, self.text, self.starts.get(id(node)))

    def typed(self) -> Typed:
        self.visit(self.expr)
        used = {name: self.columns[name] for name in self.read}
        shapes_only = frozenset(name for name, values in self.read.items() if not values)
        return Typed(self.expr, self.text, self.types, self.starts, used, shapes_only)

    def visit(self, node: Expr, values: bool = True) -> Static:
        static = self._visit(node, values)
        self.types[id(node)] = static
        return static

    def _visit(self, node: Expr, values: bool) -> Static:  # noqa: PLR0911 - one return per kind of node
        if isinstance(node, Column):
            return self._column(node, values)
        if isinstance(node, Constant):
            return _constant(node.value)
        if isinstance(node, Index):
            return self._index(node)
        if isinstance(node, Function):
            return self._function(node)
        if isinstance(node, Unary):
            return self._unary(node)
        if isinstance(node, Logical):
            operands = [self._condition(o, node.op) for o in node.operands]
            return Static("bool", any(o.many for o in operands))
        if isinstance(node, Arith):
            return self._arith(node)
        if isinstance(node, Compare):
            return self._compare(node)
        if isinstance(node, IsIn):
            return self._isin(node)
        raise AssertionError(type(node).__name__)  # pragma: no cover - every node kind is above

    def _column(self, node: Column, values: bool) -> Static:
        column = self.columns.get(node.name)
        if column is None:
            raise self.error(node, _nearest(node.name, list(self.columns)))
        if column.image:
            raise self.error(
                node,
                f"tensor {node.name!r} holds images ({column.htype}), which expressions do not read: select "
                "by the labels and values beside them, or use ds.filter(fn) with a function of a row",
            )
        self.read[node.name] = self.read.get(node.name, False) or values
        return Static(column.kind, column.many, column.ndim, column.class_names, node.name)

    def _index(self, node: Index) -> Static:
        inner = self.visit(node.operand)
        if inner.kind == "json":
            return replace(inner, source="")
        if isinstance(node.item, str):
            raise self.error(node, f"['key'] reads a key of a json value; {_what(inner)} is no json value")
        if inner.kind in ("number", "bool", "label") and inner.ndim >= 1:
            return replace(inner, ndim=inner.ndim - 1)
        raise self.error(
            node, f"[{node.item}] reads a component of a vector (a box's 4 numbers); {_what(inner)} has none"
        )

    def _function(self, node: Function) -> Static:
        if node.name == "len":
            # len() of a tensor of numbers or arrays is read from its samples' shapes alone.
            operand = node.operand
            column = self.columns.get(operand.name) if isinstance(operand, Column) else None
            inner = self.visit(operand, values=column is None or column.kind in ("text", "json"))
            if inner.kind == "json":
                return Static("json", False)
            if inner.many or inner.kind == "text" or inner.ndim >= 1:
                return Static("number", False)
            raise self.error(
                node,
                f"len() counts the objects of a per-object tensor, the characters of a text, or the items of "
                f"a "
                f"json value; {_what(inner)} holds one value per row",
            )
        inner = self._condition(node.operand, f"{node.name}()")
        return Static("bool", False)

    def _unary(self, node: Unary) -> Static:
        if node.op == "not":
            inner = self._condition(node.operand, "not")
            return Static("bool", inner.many)
        inner = self.visit(node.operand)
        if inner.kind in ("number", "bool", "json") and inner.ndim == 0:
            return Static("json" if inner.kind == "json" else "number", inner.many)
        raise self.error(node, f"- negates numbers; {_what(inner)} is not a number")

    def _condition(self, node: Expr, where: str) -> Static:
        inner = self.visit(node)
        if inner.kind in ("bool", "json") and inner.ndim == 0:
            return inner
        raise self.error(
            node,
            f"{where} takes conditions (such as x > 0, or a json value's truth); {_what(inner)} is not one",
        )

    def _arith(self, node: Arith) -> Static:
        left, right = self.visit(node.left), self.visit(node.right)
        for side, static in ((node.left, left), (node.right, right)):
            if static.kind == "label":
                raise self.error(
                    side, f"class labels are names, not numbers: {_what(static)} takes no {node.op}"
                )
            if static.kind not in ("number", "bool", "json") or static.ndim:
                raise self.error(side, f"{node.op} works on numbers; {_what(static)} is not a number")
        kind: Kind = "json" if "json" in (left.kind, right.kind) else "number"
        return Static(kind, left.many or right.many)

    def _compare(self, node: Compare) -> Static:
        left, right = self.visit(node.left), self.visit(node.right)
        for side, static in ((node.left, left), (node.right, right)):
            if static.kind == "array" or static.ndim:
                raise self.error(
                    side,
                    f"{_what(static)} holds arrays, which do not compare as a whole: compare a component "
                    f"(x[0]) or a count (len(x))",
                )
        self._comparable(node, left, right)
        return Static("bool", left.many or right.many)

    def _comparable(self, node: Compare, left: Static, right: Static) -> None:
        kinds = {left.kind, right.kind}
        if "json" in kinds:
            return
        if "null" in kinds:
            if node.op not in ("==", "!=") or kinds != {"null"}:
                other = right if left.kind == "null" else left
                raise self.error(
                    node, f"None compares only with json values; {_what(other)} always has a value"
                )
            return
        if "label" in kinds:
            self._labels(node, left, right)
            return
        if "text" in kinds and kinds != {"text"}:
            raise self.error(
                node, f"{_what(left)} and {_what(right)} do not compare: text compares with text"
            )

    def _labels(self, node: Compare, left: Static, right: Static) -> None:
        label, other, other_node = (
            (left, right, node.right) if left.kind == "label" else (right, left, node.left)
        )
        if other.kind in ("number", "bool"):
            return  # class indices
        if other.kind not in ("text", "label"):
            raise self.error(node, f"{_what(label)} compares with class names or indices, not {_what(other)}")
        if node.op in _ORDERED:
            raise self.error(
                node,
                f"class labels compare as names, with ==, != and in, not by order ({node.op}); compare their "
                f"indices (labels < 3) or list the names (labels in ['cat', 'dog'])",
            )
        if isinstance(other_node, Constant):
            self._known_name(other_node, label, other_node.value)

    def _known_name(self, node: Expr, label: Static, value: Scalar) -> None:
        if isinstance(value, str) and value not in label.class_names:
            close = difflib.get_close_matches(value, list(label.class_names), n=1, cutoff=0.5)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise self.error(
                node,
                f"{value!r} is not a class name of tensor {label.source!r}.{hint} Its class names are "
                f"{list(label.class_names)!r:.300}",
            )

    def _isin(self, node: IsIn) -> Static:
        inner = self.visit(node.operand)
        if inner.kind == "array" or inner.ndim:
            raise self.error(node, f"{_what(inner)} holds arrays, which are not in a list of values")
        for value in node.values:
            static = _constant(value)
            if inner.kind == "json":
                continue
            if inner.kind == "label" and static.kind in ("text", "number", "bool"):
                self._known_name(node, inner, value)
                continue
            if static.kind == inner.kind or {static.kind, inner.kind} <= {"number", "bool"}:
                continue
            raise self.error(node, f"{_what(inner)} is never {value!r}: the list holds {_what(static)}")
        return Static("bool", inner.many)


def _constant(value: Scalar) -> Static:
    if value is None:
        return Static("null", False)
    if isinstance(value, bool):
        return Static("bool", False)
    if isinstance(value, str):
        return Static("text", False)
    return Static("number", False)


def _what(static: Static) -> str:
    """A node's values in words, for messages."""
    kinds = {
        "number": "numbers",
        "bool": "conditions",
        "label": "class labels",
        "text": "text",
        "json": "json values",
        "array": "arrays",
        "null": "None",
    }
    words = kinds[static.kind]
    if static.ndim:
        words = f"vectors of {words}"
    if static.many:
        words = f"per-object {words}"
    return f"tensor {static.source!r} ({words})" if static.source else words


def check(expr: Expr, columns: Mapping[str, ColumnType]) -> Typed:
    """``expr`` checked against the tensors ``columns`` (by name): every node's type.

    Raises:
        ExpressionError: a tensor it names is not there (naming the nearest), or its values do not fit
            what is done with them; the position is in ``str(expr)``.
    """
    return _Checker(expr, columns).typed()
