"""Expressions: a small immutable tree that prints as the text it parses from.

``lc.col("labels") == "cat"`` builds a tree of nodes (`Column`, `Literal`, `Compare`, ...). Nothing is read
or evaluated when it is built: evaluation is a separate pass over a dataset's columns
(`lakecompute.select.evaluate`). ``str(expr)`` is the expression's text in the language `parse_expression`
reads, so ``lc.expr(str(e))`` is ``e`` again (`Expr.equals`), and an expression pickles as its text.

The language (docs/selecting.md has it in full), from the loosest binding to the tightest:

``or`` (also ``|``) · ``and`` (also ``&``) · ``not`` (also ``~``) · comparisons ``== != < <= > >=`` and
``in [...]`` / ``not in [...]`` · ``+ -`` · ``* / // %`` · unary ``-`` · ``x['key']`` / ``x[2]`` · names,
literals, ``(...)``, ``len(x)``, ``any(x)``, ``all(x)``.

Unlike Python, ``&`` and ``|`` bind as loosely as ``and`` and ``or``, so ``a == 1 & b == 2`` means what it
says; ``and`` and ``or`` chains are one node each (`Logical`), so long chains of conditions stay shallow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np

from lakecompute.errors import ExpressionError, InvalidTypeError
from lakecompute.specs import parse_tensor_name

__all__ = [
    "KEYWORDS",
    "MAX_DEPTH",
    "MAX_INT",
    "Arith",
    "ArithOp",
    "Column",
    "Compare",
    "CompareOp",
    "Constant",
    "Expr",
    "Function",
    "FunctionName",
    "Index",
    "IsIn",
    "Logical",
    "Scalar",
    "Unary",
    "col",
    "lift",
]

#: How deep an expression may nest (parentheses, operators, functions): deeper ones are refused when built
#: or parsed, so that printing, checking and evaluating them (which recurse) never exhaust the stack.
MAX_DEPTH: Final = 100

#: Words of the language: a tensor with one of these names is written in backticks (`` `len` ``).
KEYWORDS: Final = frozenset(
    {
        "and",
        "or",
        "not",
        "in",
        "True",
        "False",
        "None",
        "true",
        "false",
        "null",
        "len",
        "any",
        "all",
        "inf",
        "nan",
    }
)

#: A literal value: what ``lc.col(x) == value`` compares with.
Scalar = bool | int | float | str | None

CompareOp = Literal["==", "!=", "<", "<=", ">", ">="]
ArithOp = Literal["+", "-", "*", "/", "//", "%"]
FunctionName = Literal["len", "any", "all"]


#: The largest integer literal (uint64's largest: above it no tensor holds the value).
MAX_INT: Final = 2**64 - 1


class Expr:
    """An expression over a dataset's tensors: build one with `lakecompute.col` or parse one with
    `lakecompute.expr`, then give it to ``ds.filter``, ``ds.filter_labels``, ``ds.count_values`` or
    ``ds.sort``.

    Operators build bigger expressions (nothing is evaluated): comparisons ``== != < <= > >=``,
    `isin`, ``&`` (and), ``|`` (or), ``~`` (not), arithmetic ``+ - * / // %`` and unary ``-``, ``x["key"]``
    into a json value (or ``x[2]``: a component of each value, such as a box's width), `len`, `any` and
    `all`. ``str(expr)`` is its text (`lakecompute.expr` parses it back); ``repr`` shows the call that
    makes it. An expression is immutable and pickles as its text.

    Example:
        >>> e = (lc.col("labels") == "cat") & (lc.col("score") > 0.5)
        >>> str(e)
        "labels == 'cat' and score > 0.5"
        >>> lc.expr(str(e)).equals(e)
        True
    """

    __slots__ = ()

    # -- what every node has ------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """How deep the tree is (a name or literal is 1)."""
        raise NotImplementedError

    def children(self) -> tuple[Expr, ...]:
        """The expressions this one is made of, in the order its text shows them."""
        return ()

    def key(self) -> tuple[Any, ...]:
        """What makes two trees equal (`equals`): the node's kind, its own values and its children's keys."""
        raise NotImplementedError

    def equals(self, other: object) -> bool:
        """Whether ``other`` is the same expression: the same tree (``==`` builds a comparison instead)."""
        return isinstance(other, Expr) and self.key() == other.key()

    def tensors(self) -> tuple[str, ...]:
        """The tensors the expression names, in the order they first appear (all it ever reads)."""
        seen: dict[str, None] = {}
        stack: list[Expr] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, Column):
                seen.setdefault(node.name)
            stack.extend(reversed(node.children()))
        return tuple(seen)

    # -- building -----------------------------------------------------------------------------------
    def __eq__(self, other: object) -> Expr:  # type: ignore[override]  # builds a comparison, as in Polars
        return Compare("==", self, lift(other))

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return Compare("!=", self, lift(other))

    def __lt__(self, other: object) -> Expr:
        return Compare("<", self, lift(other))

    def __le__(self, other: object) -> Expr:
        return Compare("<=", self, lift(other))

    def __gt__(self, other: object) -> Expr:
        return Compare(">", self, lift(other))

    def __ge__(self, other: object) -> Expr:
        return Compare(">=", self, lift(other))

    def __and__(self, other: object) -> Expr:
        return Logical.of("and", self, lift(other))

    def __rand__(self, other: object) -> Expr:
        return Logical.of("and", lift(other), self)

    def __or__(self, other: object) -> Expr:
        return Logical.of("or", self, lift(other))

    def __ror__(self, other: object) -> Expr:
        return Logical.of("or", lift(other), self)

    def __invert__(self) -> Expr:
        return Unary("not", self)

    def __neg__(self) -> Expr:
        return Unary("-", self)

    def __add__(self, other: object) -> Expr:
        return Arith("+", self, lift(other))

    def __radd__(self, other: object) -> Expr:
        return Arith("+", lift(other), self)

    def __sub__(self, other: object) -> Expr:
        return Arith("-", self, lift(other))

    def __rsub__(self, other: object) -> Expr:
        return Arith("-", lift(other), self)

    def __mul__(self, other: object) -> Expr:
        return Arith("*", self, lift(other))

    def __rmul__(self, other: object) -> Expr:
        return Arith("*", lift(other), self)

    def __truediv__(self, other: object) -> Expr:
        return Arith("/", self, lift(other))

    def __rtruediv__(self, other: object) -> Expr:
        return Arith("/", lift(other), self)

    def __floordiv__(self, other: object) -> Expr:
        return Arith("//", self, lift(other))

    def __rfloordiv__(self, other: object) -> Expr:
        return Arith("//", lift(other), self)

    def __mod__(self, other: object) -> Expr:
        return Arith("%", self, lift(other))

    def __rmod__(self, other: object) -> Expr:
        return Arith("%", lift(other), self)

    def __getitem__(self, key: str | int) -> Expr:
        """``x["key"]``: the value under ``key`` of a json value (None where there is none); ``x[2]``: item 2
        of a json list, or component 2 of each value of a tensor of vectors (a box's width in ``xywh``)."""
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (str, int, np.integer)):
            raise InvalidTypeError(f"An expression is indexed by a str key or an int. Got {key!r:.80}.")
        return Index(self, key if isinstance(key, str) else _literal_int(int(key)))

    def isin(self, values: Iterable[Scalar]) -> Expr:
        """Whether the value is one of ``values`` (class names or indices for class labels)."""
        if isinstance(values, (str, bytes, dict)) or not isinstance(values, Iterable):
            raise InvalidTypeError(
                f"isin() takes a list of values, e.g. isin(['cat', 'dog']). Got {type(values).__name__}."
            )
        items = sorted(values, key=repr) if isinstance(values, (set, frozenset)) else list(values)
        return IsIn(self, tuple(_scalar(v) for v in items))

    def len(self) -> Expr:
        """How many values each row holds: objects of a per-object tensor (boxes, their labels, a mask's
        channels, polygons), characters of a text, items of a json list or dict."""
        return Function("len", self)

    def any(self) -> Expr:
        """Whether any of a row's per-object conditions holds (False for a row without objects)."""
        return Function("any", self)

    def all(self) -> Expr:
        """Whether all of a row's per-object conditions hold (True for a row without objects)."""
        return Function("all", self)

    def __bool__(self) -> bool:
        raise InvalidTypeError(
            f"An expression has no truth value of its own ({str(self)!r:.80}): combine conditions with & | ~ "
            "(or write them as text with and / or / not), and give the expression to ds.filter()."
        )

    def __hash__(self) -> int:
        return hash(self.key())

    def __iter__(self) -> Any:
        raise InvalidTypeError("An expression is not iterable; use .isin([...]) to test membership.")

    def __contains__(self, item: object) -> bool:
        raise InvalidTypeError("`x in expr` is not an expression; write expr.isin([...]).")

    # -- text -----------------------------------------------------------------------------------------
    def __str__(self) -> str:
        from lakecompute.select._text import render  # the text form is written there

        return render(self)[0]

    def __repr__(self) -> str:
        return f"lc.expr({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        from lakecompute.select._parse import parse_expression

        return (parse_expression, (str(self),))


def _depth_of(*children: Expr) -> int:
    depth = 1 + max((c.depth for c in children), default=0)
    if depth > MAX_DEPTH:
        raise ExpressionError(
            f"the expression nests {depth} levels deep; at most {MAX_DEPTH} are allowed. Combine long "
            "chains with & and | (one level each), or split the selection into several filters."
        )
    return depth


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Column(Expr):
    """The values of a tensor: ``lc.col("labels")``."""

    name: str
    """The tensor's name."""

    @property
    def depth(self) -> int:
        return 1

    def key(self) -> tuple[Any, ...]:
        return ("col", self.name)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Constant(Expr):
    """A constant: a number, a string, True/False, or None."""

    value: Scalar
    """The value (a bool, an int, a float, a str or None)."""

    @property
    def depth(self) -> int:
        return 1

    def key(self) -> tuple[Any, ...]:
        # By type and text: 1 and True differ, and a nan literal equals itself.
        return ("lit", type(self.value).__name__, repr(self.value))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Compare(Expr):
    """``left op right`` for a comparison ``op``."""

    op: CompareOp
    left: Expr
    right: Expr
    depth: int = field(init=False)  # a stored value in place of the base's property

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.left, self.right))

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def key(self) -> tuple[Any, ...]:
        return ("cmp", self.op, self.left.key(), self.right.key())


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Arith(Expr):
    """``left op right`` for an arithmetic ``op``."""

    op: ArithOp
    left: Expr
    right: Expr
    depth: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.left, self.right))

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def key(self) -> tuple[Any, ...]:
        return ("arith", self.op, self.left.key(), self.right.key())


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Logical(Expr):
    """``a and b and ...`` or ``a or b or ...``: one node for a whole chain."""

    op: Literal["and", "or"]
    operands: tuple[Expr, ...]
    depth: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(*self.operands))

    @classmethod
    def of(cls, op: Literal["and", "or"], left: Expr, right: Expr) -> Logical:
        """``left op right``, joined into one chain with either side that is already such a chain."""
        parts: list[Expr] = []
        for side in (left, right):
            parts.extend(side.operands if isinstance(side, Logical) and side.op == op else (side,))
        return cls(op, tuple(parts))

    def children(self) -> tuple[Expr, ...]:
        return self.operands

    def key(self) -> tuple[Any, ...]:
        return ("logic", self.op, *(o.key() for o in self.operands))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Unary(Expr):
    """``not x`` or ``-x``."""

    op: Literal["not", "-"]
    operand: Expr
    depth: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.operand))

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def key(self) -> tuple[Any, ...]:
        return ("unary", self.op, self.operand.key())


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IsIn(Expr):
    """``x in [v, ...]``."""

    operand: Expr
    values: tuple[Scalar, ...]
    depth: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.operand))

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def key(self) -> tuple[Any, ...]:
        return ("in", self.operand.key(), *(Constant(v).key() for v in self.values))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Index(Expr):
    """``x['key']`` or ``x[2]``."""

    operand: Expr
    item: str | int
    depth: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.operand))

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def key(self) -> tuple[Any, ...]:
        return ("index", self.operand.key(), type(self.item).__name__, self.item)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Function(Expr):
    """``len(x)``, ``any(x)`` or ``all(x)``."""

    name: FunctionName
    operand: Expr
    depth: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.operand))

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def key(self) -> tuple[Any, ...]:
        return ("fn", self.name, self.operand.key())


def col(name: str) -> Expr:
    """The values of tensor ``name``, to build an expression from: ``lc.col("labels") == "cat"``.

    Args:
        name: a tensor name (checked like one; whether the dataset has it is checked when the expression
            is evaluated, naming the nearest tensor it has).

    Raises:
        InvalidTypeError: ``name`` is not a str.
        InvalidArgumentError: ``name`` cannot be a tensor name.

    Example:
        >>> str(lc.col("labels").isin(["cat", "dog"]) & ~lc.col("meta")["hard"])
        "labels in ['cat', 'dog'] and not meta['hard']"
    """
    return Column(parse_tensor_name(name))


def _literal_int(value: int) -> int:
    if not -MAX_INT <= value <= MAX_INT:
        raise ExpressionError(f"the integer {value} is out of range: literals lie within ±(2**64 - 1).")
    return value


def _scalar(value: object) -> Scalar:
    """A Python value as a literal's value: numpy scalars become Python ones."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return _literal_int(int(value))
    if isinstance(value, (float, np.floating)):
        return float(value)
    raise InvalidTypeError(
        f"An expression compares with numbers, strings, True/False and None. Got {type(value).__name__}: "
        f"{value!r:.80}."
    )


def lift(value: object) -> Expr:
    """``value`` as an expression: expressions as they are, Python values as literals.

    Raises:
        InvalidTypeError: a value that is neither (a list: use ``isin``).
    """
    if isinstance(value, Expr):
        return value
    if isinstance(value, (list, tuple, set, frozenset, np.ndarray)):
        raise InvalidTypeError(
            f"An expression compares with one value; to test membership in {type(value).__name__} "
            "values use .isin([...])."
        )
    return Constant(_scalar(value))
