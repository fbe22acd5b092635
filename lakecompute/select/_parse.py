"""Reading an expression's text: a small tokenizer and a precedence-climbing parser of our own.

The text comes from users, URLs and the command line, so it is parsed, never given to Python: nothing in
it is ever run. The language has names, literals, operators, ``x['key']``, ``[...]`` after ``in``, and
three functions of its own (``len``, ``any``, ``all``); there is no attribute access and no other call, and
text that tries either is refused naming the position. The text is at most `MAX_TEXT` characters and
nests at most `lakecompute.select.MAX_DEPTH` levels, so no input makes the parser (or anything that walks
the tree) recurse without bound.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from lakecompute.errors import ExpressionError, InvalidArgumentError, InvalidTypeError
from lakecompute.select._expr import (
    KEYWORDS,
    MAX_DEPTH,
    MAX_INT,
    Arith,
    ArithOp,
    Column,
    Compare,
    CompareOp,
    Constant,
    Expr,
    Function,
    FunctionName,
    Index,
    IsIn,
    Logical,
    Scalar,
    Unary,
)
from lakecompute.specs import parse_tensor_name

__all__ = ["MAX_TEXT", "expr", "parse_expression"]

#: The longest expression text read (longer text is refused before it is looked at).
MAX_TEXT: Final = 100_000

TokenKind = Literal["name", "number", "string", "op", "keyword", "end"]

_SPACE: Final = re.compile(r"[ \t\r\n]+")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED_NAME: Final = re.compile(r"`([^`]*)`")
_NUMBER: Final = re.compile(r"(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_OPERATORS: Final = (
    "==",
    "!=",
    "<=",
    ">=",
    "//",
    "<",
    ">",
    "+",
    "-",
    "*",
    "/",
    "%",
    "&",
    "|",
    "~",
    "(",
    ")",
    "[",
    "]",
    ",",
)
_STRING_ESCAPES: Final = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r"}
_FUNCTIONS: Final = frozenset({"len", "any", "all"})
_CONSTANTS: Final[dict[str, Scalar]] = {
    "True": True,
    "true": True,
    "False": False,
    "false": False,
    "None": None,
    "null": None,
    "inf": float("inf"),
    "nan": float("nan"),
}
#: Hints for characters that are not part of the language.
_NOT_IN_LANGUAGE: Final = {
    ".": "attribute access is not part of the expression language (write len(x), any(x), all(x), x['key'])",
    "=": "write == to compare",
    "!": "write != to compare, or not / ~ to negate",
    "^": "^ is not an operator here (use and / or / not)",
    ";": "one expression only",
    ":": "slices and lambdas are not part of the expression language",
    "@": "@ is not an operator here",
    "{": "dict literals are not part of the expression language",
    "}": "dict literals are not part of the expression language",
}


@dataclass(frozen=True, slots=True)
class Token:
    """One token of the text: its kind, its text (or value), and where it starts."""

    kind: TokenKind
    text: str
    position: int


def _string_end(text: str, start: int) -> tuple[str, int]:
    """The string literal starting at ``start`` (a quote): its value and the position after it."""
    quote = text[start]
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        escape = text[i + 1 : i + 2]
        if escape in _STRING_ESCAPES:
            out.append(_STRING_ESCAPES[escape])
            i += 2
        elif escape == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
        else:
            raise ExpressionError(
                "unknown escape in a string: use \\\\, \\', \\\", \\n, \\t, \\r or \\uXXXX", text, i
            )
    raise ExpressionError(f"the string that starts here has no closing {quote}", text, start)


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token.

    Raises:
        ExpressionError: a character or literal the language does not have, naming its position.
    """
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        space = _SPACE.match(text, i)
        if space:
            i = space.end()
            continue
        token, i = _token_at(text, i)
        tokens.append(token)
    tokens.append(Token("end", "", n))
    return tokens


def _token_at(text: str, i: int) -> tuple[Token, int]:
    """The token starting at ``i`` (not a space), and where the next one starts."""
    ch = text[i]
    if ch in "'\"":
        value, end = _string_end(text, i)
        return Token("string", value, i), end
    if ch == "`":
        quoted = _QUOTED_NAME.match(text, i)
        if quoted is None:
            raise ExpressionError("the name in backticks that starts here has no closing `", text, i)
        return Token("name", _quoted_name(text, i, quoted.group(1)), i), quoted.end()
    number = _NUMBER.match(text, i)
    if number:
        return Token("number", number.group(), i), number.end()
    name = _NAME.match(text, i)
    if name:
        word = name.group()
        return Token("keyword" if word in KEYWORDS else "name", word, i), name.end()
    op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
    if op is None:
        hint = _NOT_IN_LANGUAGE.get(ch, "it is not part of the expression language")
        raise ExpressionError(f"unexpected character {ch!r}: {hint}", text, i)
    return Token("op", op, i), i + len(op)


def _quoted_name(text: str, at: int, name: str) -> str:
    try:
        return parse_tensor_name(name)
    except (InvalidArgumentError, InvalidTypeError):
        raise ExpressionError(
            f"{name!r} cannot be a tensor name (letters, digits, '_' and '-')", text, at
        ) from None


#: Binding strengths of the infix operators (higher binds tighter); ``not`` binds at 3 and unary ``-`` at 7.
_INFIX: Final = {
    "or": 1, "|": 1, "and": 2, "&": 2,
    "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4, "in": 4,
    "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6,
}  # fmt: skip
_NOT_LEVEL: Final = 3
_NEGATE_LEVEL: Final = 7
_CALLS: Final = "calls are not part of the expression language (only len(x), any(x) and all(x))"


class _Parser:
    """Precedence climbing (a Pratt parser) over the tokens: two frames per level of nesting, and never
    more than `MAX_DEPTH` levels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.at = 0

    # -- tokens -----------------------------------------------------------------------------------
    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def peek(self, ahead: int) -> Token:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def is_op(self, text: str) -> bool:
        token = self.token
        return token.kind == "op" and token.text == text

    def expect(self, op: str, what: str) -> Token:
        if not self.is_op(op):
            raise self.error(f"expected {op!r} {what}", self.token)
        return self.take()

    def error(self, detail: str, token: Token) -> ExpressionError:
        return ExpressionError(detail, self.text, token.position)

    def _infix(self) -> tuple[str, int] | None:
        """The infix operator at the current token and how tightly it binds (``not in`` as ``in``)."""
        token = self.token
        if token.kind == "op" or (token.kind == "keyword" and token.text in ("and", "or", "in")):
            level = _INFIX.get(token.text)
            return None if level is None else (token.text, level)
        after = self.peek(1)  # `in` the keyword: not a string 'in' nor a tensor `in`
        if token.kind == "keyword" and token.text == "not" and after.kind == "keyword" and after.text == "in":
            return ("not in", 4)
        return None

    # -- grammar ----------------------------------------------------------------------------------
    def parse(self) -> Expr:
        expr = self.expression(0, 0)
        token = self.token
        if token.kind != "end":
            if token.kind == "op" and token.text == "(":
                raise self.error(_CALLS, token)
            got = f"the string {token.text!r}" if token.kind == "string" else repr(token.text)
            raise self.error(f"expected an operator or the end, got {got}", token)
        return expr

    def expression(self, level: int, depth: int) -> Expr:
        """The expression at the current token whose infix operators bind at least as tightly as
        ``level`` (0: any)."""
        if depth > MAX_DEPTH:
            raise self.error(f"the expression nests more than {MAX_DEPTH} levels deep", self.token)
        left = self._prefix(depth)
        while (infix := self._infix()) is not None and infix[1] >= level:
            op, strength = infix
            operator = self.take()
            if op in ("and", "&", "or", "|"):
                left = self._chain(left, strength, depth)
            elif op in ("in", "not in"):
                left = self._membership(left, op == "not in")
                self._refuse_chained()
            elif strength == _INFIX["=="]:
                right = self.expression(strength + 1, depth + 1)
                left = self._built(Compare, cast("CompareOp", op), left, right, at=operator)
                self._refuse_chained()
            else:
                right = self.expression(strength + 1, depth + 1)
                left = self._built(Arith, cast("ArithOp", op), left, right, at=operator)
        return left

    def _chain(self, first: Expr, strength: int, depth: int) -> Expr:
        """``first and b and c ...`` (or ``or``): one node, however long the chain."""
        op: Literal["and", "or"] = "and" if strength == _INFIX["and"] else "or"
        operands = [first, self.expression(strength + 1, depth + 1)]
        while (infix := self._infix()) is not None and infix[1] == strength:
            self.take()
            operands.append(self.expression(strength + 1, depth + 1))
        return self._built(Logical, op, tuple(operands), at=self.token)

    def _refuse_chained(self) -> None:
        infix = self._infix()
        if infix is not None and infix[1] == _INFIX["=="]:
            raise self.error("comparisons do not chain (a < b < c): write a < b and b < c", self.token)

    def _membership(self, left: Expr, negated: bool) -> Expr:
        if negated:
            self.take()  # the `in` of `not in`
        result = self._built(IsIn, left, self._values(), at=self.token)
        return self._built(Unary, "not", result, at=self.token) if negated else result

    def _prefix(self, depth: int) -> Expr:
        token = self.token
        if (token.kind == "keyword" and token.text == "not") or (token.kind == "op" and token.text == "~"):
            self.take()
            operand = self.expression(_NOT_LEVEL, depth + 1)
            return self._built(Unary, "not", operand, at=token)
        if token.kind == "op" and token.text == "-":
            self.take()
            number, after = self.token, self.peek(1)
            literal = number.kind == "number" or (number.kind == "keyword" and number.text in ("inf", "nan"))
            if literal and not (after.kind == "op" and after.text == "["):
                self.take()  # a negative number is one literal, as the text of one prints it
                return self._postfix(Constant(-self._number(number)))
            operand = self.expression(_NEGATE_LEVEL, depth + 1)
            return self._built(Unary, "-", operand, at=token)
        return self._postfix(self._atom(depth))

    def _postfix(self, expr: Expr) -> Expr:
        while self.is_op("["):
            bracket = self.take()
            item = self._index_item()
            self.expect("]", "to close the index")
            expr = self._built(Index, expr, item, at=bracket)
        if self.is_op("("):
            raise self.error(_CALLS, self.token)
        return expr

    def _index_item(self) -> str | int:
        token = self.take()
        negative = token.kind == "op" and token.text == "-"
        if negative:
            token = self.take()
        if token.kind == "string" and not negative:
            return token.text
        if token.kind == "number" and token.text.isdigit():
            value = self._int(token)
            return -value if negative else value
        raise self.error("an index is a string key ('key') or an integer", token)

    def _atom(self, depth: int) -> Expr:
        token = self.take()
        if token.kind == "name":
            if self.is_op("("):
                raise self.error(_CALLS, self.token)
            return Column(token.text)
        if token.kind == "number":
            return Constant(self._number(token))
        if token.kind == "string":
            return Constant(token.text)
        if token.kind == "keyword" and token.text in _CONSTANTS:
            return Constant(_CONSTANTS[token.text])
        if token.kind == "keyword" and token.text in _FUNCTIONS:
            self.expect("(", f"after {token.text} (as in {token.text}(x))")
            operand = self.expression(0, depth + 1)
            self.expect(")", f"to close {token.text}(...)")
            return self._built(Function, cast("FunctionName", token.text), operand, at=token)
        if token.kind == "op" and token.text == "(":
            inner = self.expression(0, depth + 1)
            self.expect(")", "to close the parenthesis")
            return inner
        if token.kind == "op" and token.text == "[":
            raise self.error("a list is only written after in: x in [1, 2]", token)
        if token.kind == "end":
            raise self.error("the expression ends too early", token)
        raise self.error(f"unexpected {token.text!r}", token)

    def _values(self) -> tuple[Scalar, ...]:
        """The ``[v, ...]`` after ``in``: literals only."""
        self.expect("[", "after in (as in x in ['cat', 'dog'])")
        values: list[Scalar] = []
        while not self.is_op("]"):
            token = self.take()
            negative = token.kind == "op" and token.text == "-"
            if negative:
                token = self.take()
            if token.kind == "number" or (token.kind == "keyword" and token.text in ("inf", "nan")):
                value = self._number(token)
                values.append(-value if negative else value)
            elif not negative and token.kind == "string":
                values.append(token.text)
            elif not negative and token.kind == "keyword" and token.text in _CONSTANTS:
                values.append(_CONSTANTS[token.text])
            else:
                raise self.error(
                    "the list after in holds literals only (numbers, strings, True, False, None)", token
                )
            if not self.is_op(","):
                break
            self.take()
        self.expect("]", "to close the list")
        return tuple(values)

    def _number(self, token: Token) -> int | float:
        if token.kind == "keyword":
            return float(token.text)
        if token.text.isdigit():
            return self._int(token)
        return float(token.text)

    def _int(self, token: Token) -> int:
        if len(token.text) > 20 or int(token.text) > MAX_INT:
            raise self.error("the integer is out of range: literals lie within ±(2**64 - 1)", token)
        return int(token.text)

    def _built(self, node: Callable[..., Expr], *args: Any, at: Token) -> Expr:
        """``node(*args)``, a tree nested too deep refused naming the position of ``at``."""
        try:
            return node(*args)
        except ExpressionError as exc:
            raise ExpressionError(exc.detail, self.text, at.position) from None


def expr(text: str) -> Expr:
    """Read an expression from its text: ``lc.expr("labels == 'cat' and score > 0.5")``.

    The language is the text form of `lakecompute.col` expressions (``str(expr)`` is such text): tensor
    names (in backticks where they are not plain identifiers: `` `my-tensor` ``), numbers, strings in
    single or double quotes, True/False/None (or true/false/null), comparisons, ``in [...]``, ``and``,
    ``or``, ``not`` (or ``&``, ``|``, ``~``), arithmetic, ``x['key']``, ``x[2]``, ``len(x)``, ``any(x)``,
    ``all(x)`` and parentheses. Nothing in the text is ever run.

    Args:
        text: the expression.

    Returns:
        The expression (an `lakecompute.select.Expr`).

    Raises:
        ExpressionError: text that is not an expression of the language, naming the position (an
            `InvalidArgumentError`).
        InvalidTypeError: ``text`` is not a str.

    Example:
        >>> str(lc.expr("labels=='cat' & not meta [ 'hard' ]"))
        "labels == 'cat' and not meta['hard']"
    """
    return parse_expression(text)


def parse_expression(text: str) -> Expr:
    """Check and read an expression's text (`expr`, the public name, says how)."""
    if not isinstance(text, str):
        raise InvalidTypeError(f"Expected an expression's text as str. Got {type(text).__name__}.")
    if len(text) > MAX_TEXT:
        raise ExpressionError(
            f"the text is {len(text):,} characters long; expressions are at most {MAX_TEXT:,}", text, MAX_TEXT
        )
    if not text.strip():
        raise ExpressionError("the expression is empty", text, 0)
    return _Parser(text).parse()
