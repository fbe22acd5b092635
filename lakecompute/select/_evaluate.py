"""Evaluating a checked expression over a block of rows, one numpy operation per node.

A node's values over a block are `Values`: one per row (``offsets`` None) or one per object (``offsets``
says where each row's objects start), numbers as arrays of their stored dtype or of the exact result of
arithmetic (int64, uint64 past int64, float64), class labels as integer indices, text and json as object
arrays. Per-object and per-row values meet by repeating the row's value for each of its objects; two
per-object operands must list the same objects in every row.
json values are compared, combined and indexed one by one, with JSON's types: a number never equals a
string or a bool, and an order between different types does not hold.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

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
from lakecompute.select._types import ColumnType, Static, Typed

__all__ = ["Block", "Values", "concat", "evaluate", "take", "truth"]

_PYTHON_OPS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
}
_INT64: Final = (-(2**63), 2**63 - 1)
_UINT64_MAX: Final = 2**64 - 1
_NUMPY_OPS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    **_PYTHON_OPS,
    "/": np.true_divide,
    "//": np.floor_divide,
    "%": np.mod,
}


@dataclass(frozen=True, slots=True)
class Values:
    """A node's values over a block of ``n`` rows."""

    data: np.ndarray
    """One value per row (``(n, ...)``), or one per object (``(m, ...)``, rows' objects back to back)."""
    offsets: np.ndarray | None = None
    """For per-object values: row ``i``'s objects are ``data[offsets[i]:offsets[i + 1]]`` (``n + 1``)."""

    @property
    def counts(self) -> np.ndarray:
        """Objects per row (per-object values only)."""
        assert self.offsets is not None
        return np.diff(self.offsets)


@dataclass(frozen=True, slots=True)
class Block:
    """The columns of ``n`` rows that an expression reads: per tensor its samples' shapes and, unless
    only shapes are read, their values (as `lakecompute.datasets.ColumnReader.scan` gives them)."""

    n: int
    shapes: Mapping[str, np.ndarray]
    values: Mapping[str, np.ndarray | list[Any] | None]


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _numbers(arr: np.ndarray) -> np.ndarray:
    """Stored numbers as they are compared: floats as float64 (so that ``score > 0.1`` compares the stored
    value exactly, not in float32), integers and bools as stored (numpy compares them exactly with any
    Python number; arithmetic widens them, see `_arith_operand`)."""
    if arr.dtype.kind == "f" and arr.dtype != np.float64:
        return arr.astype(np.float64)
    return arr


def _object_array(items: list[Any]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _json_kind(value: Any) -> str:
    if value is None or isinstance(value, (bool, str, list, dict)):
        return type(value).__name__
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def _json_compare(op: str, a: Any, b: Any) -> bool:
    """JSON's comparison: equal only within a type (1 is not True), ordered only within numbers or texts."""
    same = _json_kind(a) == _json_kind(b)
    if op in ("==", "!="):
        equal = same and a == b
        return equal if op == "==" else not equal
    return same and _json_kind(a) in ("number", "str") and bool(_PYTHON_OPS[op](a, b))


def _json_number(value: Any) -> bool:
    return _json_kind(value) == "number"


class _Evaluator:
    def __init__(self, typed: Typed, block: Block) -> None:
        self.typed = typed
        self.block = block

    # -- shapes of values -------------------------------------------------------------------------
    def column(self, node: Column) -> Values:
        column = self.typed.columns[node.name]
        shapes = self.block.shapes[node.name]
        values = self.block.values[node.name]
        assert values is not None
        if column.kind in ("text", "json"):
            return Values(_object_array(list(values)))
        flat = _numbers(np.asarray(values))
        if column.axis is None:
            return Values(flat.reshape((self.block.n, *self._inner(node, column, shapes))))
        counts = shapes[:, column.axis] if len(shapes) else np.zeros(0, dtype=np.int64)
        inner = self._inner(node, column, shapes[:, 1:])
        return Values(flat.reshape((int(counts.sum()), *inner)), _offsets(counts))

    def _inner(self, node: Column, column: ColumnType, shapes: np.ndarray) -> tuple[int, ...]:
        """The one shape every value has (beyond the objects), or an error naming the tensor."""
        if not len(shapes):
            return (0,) * int(shapes.shape[1])
        first = shapes[0]
        if not (shapes == first).all():
            raise self.typed.error(
                node,
                f"the values of tensor {column.name!r} differ in shape ({tuple(first.tolist())} and "
                f"{tuple(shapes[np.argmax((shapes != first).any(axis=1))].tolist())}), so they cannot be "
                "read as one column of numbers",
            )
        return tuple(int(x) for x in first)

    # -- nodes ------------------------------------------------------------------------------------
    def run(self, node: Expr) -> Values | Scalar:  # noqa: PLR0911 - one return per kind of node
        if isinstance(node, Constant):
            return node.value
        if isinstance(node, Column):
            return self.column(node)
        if isinstance(node, Function):
            return self.function(node)
        if isinstance(node, Index):
            return self.index(node)
        if isinstance(node, Unary):
            return self.unary(node)
        if isinstance(node, Logical):
            return self.logical(node)
        if isinstance(node, Arith):
            return self.arith(node)
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, IsIn):
            return self.isin(node)
        raise AssertionError(type(node).__name__)  # pragma: no cover

    def values(self, node: Expr) -> Values:
        """The node's values, a constant repeated for every row."""
        out = self.run(node)
        return out if isinstance(out, Values) else Values(_broadcast(out, self.block.n))

    def align(self, node: Expr, *parts: Values | Scalar) -> tuple[list[Any], np.ndarray | None]:
        """The operands' data side by side: per-row values repeated for each object where another operand
        holds per-object values; the common offsets (None: one value per row)."""
        if not any(isinstance(part, Values) for part in parts):  # constants alone: one value per row
            parts = (Values(_broadcast(parts[0], self.block.n)), *parts[1:])
        offsets = None
        for part in parts:
            if isinstance(part, Values) and part.offsets is not None:
                if offsets is not None and not np.array_equal(offsets, part.offsets):
                    raise self._unaligned(node, offsets, part.offsets)
                offsets = part.offsets
        out: list[Any] = []
        for part in parts:
            if not isinstance(part, Values):
                out.append(part)
            elif offsets is not None and part.offsets is None:
                out.append(np.repeat(part.data, np.diff(offsets), axis=0))
            else:
                out.append(part.data)
        return out, offsets

    def _unaligned(self, node: Expr, a: np.ndarray, b: np.ndarray) -> Exception:
        ca, cb = np.diff(a), np.diff(b)
        row = int(np.argmax(ca != cb)) if len(ca) == len(cb) else 0
        return self.typed.error(
            node,
            f"these per-object values are not aligned by object: a row holds {int(ca[row])} of one and "
            f"{int(cb[row])} of the other (row {row} of the block read). Compare per-object tensors of "
            "the same objects, or reduce one with any(...) / all(...) / len(...)",
        )

    def function(self, node: Function) -> Values:
        if node.name == "len":
            return Values(self._length(node.operand))
        inner = self.values(node.operand)
        if self.typed.type_of(node.operand).kind == "json":
            reduce = any if node.name == "any" else all
            flags = [reduce(bool(x) for x in v) if isinstance(v, list) else bool(v) for v in inner.data]
            return Values(np.asarray(flags, dtype=bool).reshape(-1))
        data = np.asarray(inner.data, dtype=bool)
        if inner.offsets is None:
            return Values(data)
        true = np.zeros(len(data) + 1, dtype=np.int64)
        np.cumsum(data, out=true[1:])
        hits = true[inner.offsets[1:]] - true[inner.offsets[:-1]]
        return Values(hits > 0 if node.name == "any" else hits == inner.counts)

    def _length(self, operand: Expr) -> np.ndarray:
        if isinstance(operand, Column) and self.typed.columns[operand.name].kind not in ("text", "json"):
            column = self.typed.columns[operand.name]
            shapes = self.block.shapes[operand.name]
            axis = column.axis if column.axis is not None else 0
            return shapes[:, axis].astype(np.int64) if len(shapes) else np.zeros(0, dtype=np.int64)
        inner = self.values(operand)
        static = self.typed.type_of(operand)
        if inner.offsets is not None:
            return inner.counts
        if static.kind == "text":
            return np.fromiter((len(v) for v in inner.data), dtype=np.int64, count=len(inner.data))
        if static.kind == "json":
            lengths = [len(v) if isinstance(v, (list, dict, str)) else None for v in inner.data]
            return _object_array(lengths)
        return np.full(len(inner.data), inner.data.shape[1] if inner.data.ndim > 1 else 0, dtype=np.int64)

    def index(self, node: Index) -> Values:
        inner = self.values(node.operand)
        item = node.item
        if self.typed.type_of(node.operand).kind == "json":
            return Values(_object_array([_json_item(v, item) for v in inner.data]), inner.offsets)
        assert isinstance(item, int)
        if not len(inner.data):  # no values in this block: nothing to index (nor to refuse)
            return Values(np.zeros(0, dtype=inner.data.dtype), inner.offsets)
        size = inner.data.shape[1] if inner.data.ndim > 1 else 0
        if not -size <= item < size:
            raise self.typed.error(node, f"there is no component {item}: each value has {size}")
        return Values(np.ascontiguousarray(inner.data[:, item]), inner.offsets)

    def unary(self, node: Unary) -> Values:
        inner = self.values(node.operand)
        if node.op == "not":
            return Values(~truth(inner.data, self.typed.type_of(node.operand)), inner.offsets)
        if self.typed.type_of(node.operand).kind == "json":
            return Values(_object_array([-v if _json_number(v) else None for v in inner.data]), inner.offsets)
        if _integers(inner.data):  # exact: -n of an unsigned n is negative
            return Values(self.integer_arith(node, "-", 0, inner.data), inner.offsets)
        return Values(-_arith_operand(inner.data), inner.offsets)

    def logical(self, node: Logical) -> Values:
        parts = [self.values(o) for o in node.operands]
        data, offsets = self.align(node, *parts)
        flags = [truth(d, self.typed.type_of(o)) for d, o in zip(data, node.operands, strict=True)]
        combine = np.logical_and if node.op == "and" else np.logical_or
        result = flags[0]
        for f in flags[1:]:
            result = combine(result, f)
        return Values(result, offsets)

    def arith(self, node: Arith) -> Values:
        left, right = self.run(node.left), self.run(node.right)
        (a, b), offsets = self.align(node, left, right)
        if self.typed.type_of(node).kind == "json":
            return Values(_object_array(_json_arith(node.op, a, b, _size(a, b))), offsets)
        if node.op != "/" and _integers(a) and _integers(b):
            return Values(self.integer_arith(node, node.op, a, b), offsets)
        a, b = _arith_operand(a), _arith_operand(b)
        with np.errstate(all="ignore"):
            try:
                result = _NUMPY_OPS[node.op](a, b)
            except OverflowError:  # an int literal beyond int64: in floats
                result = _NUMPY_OPS[node.op](np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
        return Values(np.asarray(result), offsets)

    def integer_arith(self, node: Expr, op: str, a: Any, b: Any) -> np.ndarray:
        """Arithmetic of integers, exact: in int64 where the operands and the result fit it, else in
        Python's integers, given as int64 or (a result past int64 but not negative) uint64.

        Raises:
            ExpressionError: a result that neither holds (below -2**63, from 2**64), naming ``node``.
        """
        a, b = _as_int64(a), _as_int64(b)
        if _is_int64(a) and _is_int64(b) and not _may_overflow(op, a, b):
            with np.errstate(all="ignore"):  # // and % by zero give 0, as numpy has them
                return np.asarray(_NUMPY_OPS[op](a, b), dtype=np.int64)
        exact = _exact_arith(op, np.asarray(a, dtype=object), np.asarray(b, dtype=object))
        fitted = _fitted(exact)
        if fitted is not None:
            return fitted
        wide = exact.min() if exact.min() < _INT64[0] else exact.max()
        raise self.typed.error(
            node,
            f"this arithmetic gives {wide}, past the 64-bit integers (-2**63 to 2**64 - 1) that values "
            "are computed in: compute it in floats (multiply by 1.0 first)",
        )

    def compare(self, node: Compare) -> Values:
        left, right = self.run(node.left), self.run(node.right)
        ls, rs = self.typed.type_of(node.left), self.typed.type_of(node.right)
        (a, b), offsets = self.align(node, left, right)
        n = _size(a, b)
        if "json" in (ls.kind, rs.kind):
            a, b = _plain(a, ls, n), _plain(b, rs, n)
            return Values(
                np.fromiter((_json_compare(node.op, x, y) for x, y in zip(a, b, strict=True)), bool, n),
                offsets,
            )
        if ls.kind == "label" or rs.kind == "label":
            a, b = _labels_side_by_side(a, ls, b, rs)
        result = _compare_numbers(node.op, a, b)
        return Values(result.reshape(-1) if n else np.zeros(0, bool), offsets)

    def isin(self, node: IsIn) -> Values:
        inner = self.values(node.operand)
        static = self.typed.type_of(node.operand)
        values = node.values
        if static.kind == "json":
            flags = [any(_json_compare("==", v, x) for x in values) for v in inner.data]
            return Values(np.asarray(flags, dtype=bool).reshape(-1), inner.offsets)
        if static.kind == "text":
            wanted = {v for v in values if isinstance(v, str)}
            return Values(
                np.fromiter((v in wanted for v in inner.data), bool, len(inner.data)), inner.offsets
            )
        if static.kind == "label":
            names = static.class_names
            values = tuple(names.index(v) if isinstance(v, str) else v for v in values)
        numbers = [v for v in values if isinstance(v, (int, float))]
        return Values(_members(inner.data, numbers), inner.offsets)


def _compare_numbers(op: str, a: Any, b: Any) -> np.ndarray:
    """A comparison of numbers (or label indices, or text) exactly as the values are: numpy compares
    integers of any width with any Python int exactly; bools compare as the integers 0 and 1."""
    a, b = (np.asarray(x, dtype=np.int64) if _is_bools(x) else x for x in (a, b))
    return np.asarray(_PYTHON_OPS[op](a, b), dtype=bool)


def _is_bools(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == bool


def _members(data: np.ndarray, numbers: list[int | float]) -> np.ndarray:
    """Which of ``data`` equal one of ``numbers``, each as ``==`` compares them: the numbers ``data``'s
    dtype holds exactly in one ``np.isin`` (of that dtype: the same exact comparison), any other (a float
    among integers, an integer past the dtype's range) by ``==`` itself."""
    held = [v for v in numbers if _held(data.dtype, v)]
    flags = np.isin(data, np.asarray(held, dtype=data.dtype)) if held else np.zeros(data.shape, bool)
    for v in numbers:
        if not _held(data.dtype, v):
            flags |= _compare_numbers("==", data, v)
    return flags


def _held(dtype: np.dtype[Any], value: int | float) -> bool:
    """Whether ``value`` is exactly a value of ``dtype`` (bools only in bool arrays, floats in float64)."""
    if dtype.kind in "iu":
        return isinstance(value, int) and bool(np.iinfo(dtype).min <= value <= np.iinfo(dtype).max)
    if dtype.kind == "b":
        return isinstance(value, bool)
    return dtype == np.float64 and isinstance(value, float)


def _broadcast(value: Any, n: int) -> np.ndarray:
    """A constant as one value per row."""
    if value is None or isinstance(value, str):
        return np.full(n, value, dtype=object)
    try:
        return np.full(n, value)
    except OverflowError:  # an int beyond int64
        return np.full(n, float(value))


def _size(a: Any, b: Any) -> int:
    for side in (a, b):
        if isinstance(side, np.ndarray):
            return len(side)
    return 0


def _arith_operand(value: Any) -> Any:
    """An operand of arithmetic with a float (integers alone: `_Evaluator.integer_arith`): bools and
    integers narrower than 64 bits as int64."""
    if isinstance(value, np.ndarray) and (
        value.dtype == bool or (value.dtype.kind in "iu" and value.dtype.itemsize < 8)
    ):
        return value.astype(np.int64)
    if isinstance(value, bool):
        return int(value)
    return value


def _integers(value: Any) -> bool:
    """Whether an operand of arithmetic is integers (bools among them)."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "iub"
    return isinstance(value, int)


def _as_int64(value: Any) -> Any:
    """Integers as int64 where they fit it (an unsigned array wholly below 2**63 among them); Python
    ints and wider arrays as they are."""
    if not isinstance(value, np.ndarray):
        return int(value)
    if value.dtype == np.uint64 and value.size and value.max() > _INT64[1]:
        return value
    return value.astype(np.int64, copy=False)


def _is_int64(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return bool(value.dtype == np.int64)
    return bool(_INT64[0] <= value <= _INT64[1])


def _may_overflow(op: str, a: Any, b: Any) -> bool:
    """Whether int64 ``a op b`` may lie past int64, from the operands' bounds alone (exact, in Python's
    integers: ``|a + b|``, ``|a - b|`` and ``|a * b|`` are at most the sum or product of the largest
    magnitudes; ``//`` overflows only for -2**63 // -1; ``%`` never)."""
    if op == "%":
        return False
    (a_lo, a_hi), (b_lo, b_hi) = _bounds(a), _bounds(b)
    if op == "//":
        return a_lo == _INT64[0] and b_lo <= -1 <= b_hi
    a_max, b_max = max(-a_lo, a_hi), max(-b_lo, b_hi)
    return (a_max * b_max if op == "*" else a_max + b_max) > _INT64[1]


def _bounds(value: Any) -> tuple[int, int]:
    """The least and greatest of int64 values (an array or a Python int), as Python ints."""
    if isinstance(value, np.ndarray):
        return (int(value.min()), int(value.max())) if value.size else (0, 0)
    return int(value), int(value)


def _exact_arith(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a op b`` of object arrays of Python ints (// and % by zero give 0, as numpy has them)."""
    if op in ("//", "%"):
        zero = b == 0
        return np.asarray(np.where(zero, 0, _PYTHON_OPS[op](a, np.where(zero, 1, b))), dtype=object)
    return np.asarray(_PYTHON_OPS[op](a, b), dtype=object)


def _fitted(exact: np.ndarray) -> np.ndarray | None:
    """Python ints as int64, or (none negative, some past int64) as uint64; None: neither holds them."""
    if not exact.size or (_INT64[0] <= exact.min() and exact.max() <= _INT64[1]):
        return exact.astype(np.int64)
    if exact.min() >= 0 and exact.max() <= _UINT64_MAX:
        return exact.astype(np.uint64)
    return None


def _json_item(value: Any, item: str | int) -> Any:
    if isinstance(item, str):
        return value.get(item) if isinstance(value, dict) else None
    if isinstance(value, list) and -len(value) <= item < len(value):
        return value[item]
    return None


def _json_arith(op: str, a: Any, b: Any, n: int) -> list[Any]:
    left = a if isinstance(a, np.ndarray) else [a] * n
    right = b if isinstance(b, np.ndarray) else [b] * n
    out: list[Any] = []
    for x, y in zip(left, right, strict=True):
        x = x.item() if isinstance(x, np.generic) else x
        y = y.item() if isinstance(y, np.generic) else y
        try:
            out.append(_PYTHON_OPS[op](x, y) if _json_number(x) and _json_number(y) else None)
        except (ZeroDivisionError, OverflowError):
            out.append(None)
    return out


def _plain(side: Any, static: Static, n: int) -> list[Any]:
    """One side of a comparison with a json value, as Python values (class labels as their names)."""
    if not isinstance(side, np.ndarray):
        return [side] * n
    if static.kind == "label":
        return [_name(static.class_names, int(i)) for i in side]
    return list(side.tolist())


def _name(names: tuple[str, ...], index: int) -> str | int:
    return names[index] if 0 <= index < len(names) else index


def _labels_side_by_side(a: Any, ls: Static, b: Any, rs: Static) -> tuple[Any, Any]:
    """Two sides of a comparison with class labels, made comparable: names as the label side's indices
    (-1 for a name it does not have), or labels of another tensor as names."""
    if ls.kind != "label":
        b, a = _labels_side_by_side(b, rs, a, ls)
        return a, b
    names = ls.class_names
    if isinstance(b, str):
        return a, names.index(b) if b in names else -1
    if rs.kind == "label" and isinstance(b, np.ndarray) and rs.class_names != names:
        table = np.asarray(
            [names.index(x) if x in names else -1 for x in rs.class_names] + [-2], dtype=np.int64
        )
        return a, table[np.where((b >= 0) & (b < len(rs.class_names)), b, len(rs.class_names))]
    if rs.kind == "text" and isinstance(b, np.ndarray):
        return _object_array([_name(names, int(i)) for i in a]), b
    return a, b


def truth(data: np.ndarray, static: Static) -> np.ndarray:
    """Conditions as booleans; json values by Python's truth (empty, zero, None and False are false)."""
    if static.kind == "json":
        return np.fromiter((bool(v) for v in data), bool, len(data))
    return np.asarray(data, dtype=bool)


def evaluate(typed: Typed, block: Block) -> Values:
    """The values of the checked expression ``typed`` over the rows of ``block``.

    Raises:
        ExpressionError: values that do not fit at run time (per-object operands whose rows list different
            numbers of objects, a component past a vector's end), naming the position in ``typed.text``.
    """
    return _Evaluator(typed, block).values(typed.expr)


def concat(parts: list[Values], typed: Typed) -> Values:
    """Values of consecutive blocks of ``typed``'s expression, as one.

    Raises:
        ExpressionError: integers that one block gives as int64, with negative values, and another as
            uint64 (past int64): no one dtype holds them exactly.
    """
    if len(parts) == 1:
        return parts[0]
    data = np.concatenate(_one_width([p.data for p in parts], typed))
    if parts[0].offsets is None:
        return Values(data)
    counts = np.concatenate([p.counts for p in parts])
    return Values(data, _offsets(counts))


def _one_width(arrays: list[np.ndarray], typed: Typed) -> list[np.ndarray]:
    """Blocks of integers all int64 or all uint64 (numpy would join the two as float64)."""
    if not any(a.dtype == np.uint64 for a in arrays) or not any(a.dtype == np.int64 for a in arrays):
        return arrays
    if any(a.dtype == np.int64 and a.size and a.min() < 0 for a in arrays):
        raise typed.error(
            typed.expr,
            "this arithmetic gives both negative values and values past 2**63 - 1, which no 64-bit integer "
            "type holds together: compute it in floats (multiply by 1.0 first)",
        )
    return [a.astype(np.uint64) if a.dtype == np.int64 else a for a in arrays]


def take(values: Values, rows: np.ndarray) -> Values:
    """The values of rows ``rows`` (any order, repeats)."""
    if values.offsets is None:
        return Values(values.data[rows])
    starts, counts = values.offsets[rows], values.counts[rows]
    offsets = _offsets(counts)
    items = np.repeat(starts - offsets[:-1], counts) + np.arange(int(offsets[-1]), dtype=np.int64)
    return Values(values.data[items], offsets)
