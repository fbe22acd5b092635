"""Hypothesis strategies for expressions: whole trees (for round trips), and text near the language."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.select._expr import Arith, Column, Compare, Constant, Function, Index, IsIn, Logical, Unary

NAMES = st.sampled_from(["x", "labels", "my-tensor", "3d", "len", "and", "None", "_a1", "score"])
STRINGS = st.text(alphabet=st.characters(codec="utf-8"), max_size=8) | st.sampled_from(["'", '"', "\\", "\n"])
SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64) + 1, max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    STRINGS,
)


def grow(children: st.SearchStrategy[lc.Expr]) -> st.SearchStrategy[lc.Expr]:
    return st.one_of(
        st.builds(Compare, st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), children, children),
        st.builds(Arith, st.sampled_from(["+", "-", "*", "/", "//", "%"]), children, children),
        st.builds(
            Logical, st.sampled_from(["and", "or"]), st.lists(children, min_size=2, max_size=4).map(tuple)
        ),
        st.builds(Unary, st.sampled_from(["not", "-"]), children),
        st.builds(IsIn, children, st.lists(SCALARS, max_size=4).map(tuple)),
        st.builds(Index, children, st.integers(-5, 5) | STRINGS),
        st.builds(Function, st.sampled_from(["len", "any", "all"]), children),
    )


def expressions() -> st.SearchStrategy[lc.Expr]:
    """Any tree of the language's nodes (they need not make sense for a dataset: printing and parsing
    do not ask)."""
    leaves = st.builds(Column, NAMES) | st.builds(Constant, SCALARS)
    return st.recursive(leaves, grow, max_leaves=12)


TOKENS = [
    "x", "labels", "`my-t`", "`", "1", "-2", "3.5e2", ".5", "'cat'", '"dog"', "'un", "True", "None", "null",
    "inf", "nan", "==", "!=", "<", ">=", "=", "+", "-", "*", "/", "//", "%", "&", "|", "~", "and", "or",
    "not", "in", "[", "]", "(", ")", ",", "len", "any", "all", "['k']", "[0]", ".", "lambda", "__import__",
    ":", ";", "\\", "!", "{", "1e999", "99999999999999999999999",
]  # fmt: skip


@st.composite
def near_valid_text(draw: st.DrawFn) -> str:
    """Text made of the language's tokens (and a few that are not), joined with or without spaces."""
    parts = draw(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14))
    spaces = draw(st.lists(st.sampled_from(["", " ", "  ", "\n"]), min_size=len(parts), max_size=len(parts)))
    return "".join(p + s for p, s in zip(parts, spaces, strict=True))
