"""Expressions: built with lc.col, printed as text, parsed back by our own parser; hostile text refused."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.select import MAX_DEPTH, MAX_TEXT
from tests.select.strategies import expressions, near_valid_text


def test_col_prints_the_text_it_parses_from() -> None:
    """The API's examples print as the language's text, and that text parses to the same tree."""
    cases = {
        "labels == 'cat'": lc.col("labels") == "cat",
        "score > 0.5 and labels in ['cat', 'dog'] and not meta['hard']": (
            (lc.col("score") > 0.5) & lc.col("labels").isin(["cat", "dog"]) & ~lc.col("meta")["hard"]
        ),
        "len(boxes) >= 2 or any(categories == 'car')": (
            (lc.col("boxes").len() >= 2) | (lc.col("categories") == "car").any()
        ),
        "boxes[2] * boxes[3] > 100": lc.col("boxes")[2] * lc.col("boxes")[3] > 100,
        "(a + b) * -c // 2 % 7 == -1": (lc.col("a") + lc.col("b")) * -lc.col("c") // 2 % 7 == -1,
        "a - (b - c) != 1.5": lc.col("a") - (lc.col("b") - lc.col("c")) != 1.5,
        "`my-tensor` == True and `len` == None": (lc.col("my-tensor") == True) & (lc.col("len") == None),  # noqa: E711, E712
        "all(scores > 0.5)": (lc.col("scores") > 0.5).all(),
        "s == 'it\\'s\\n\\\\'": lc.col("s") == "it's\n\\",
    }
    for text, built in cases.items():
        assert str(built) == text
        assert lc.expr(text).equals(built), text
        assert repr(built) == f"lc.expr({text!r})"


def test_expr_reads_the_language_python_style_and_keyword_style() -> None:
    """and/or/not and & | ~ are the same operators; true/false/null are True/False/None; "..." works."""
    words = lc.expr("labels == \"cat\" and score > .5 or not meta['x'] == null")
    symbols = lc.expr("labels=='cat' & score>0.5 | ~meta['x']==None")
    assert words.equals(symbols)
    assert str(words) == "labels == 'cat' and score > 0.5 or not meta['x'] == None"
    assert lc.expr("x not in [1, -2, 'a', None]").equals(~lc.col("x").isin([1, -2, "a", None]))


def test_and_chains_are_one_node_however_long() -> None:
    """A thousand conditions joined with | stay shallow: building, printing and parsing them works."""
    built = lc.col("x") == 0
    for i in range(1, 1000):
        built = built | (lc.col("x") == i)
    assert built.depth == 3
    assert lc.expr(str(built)).equals(built)


@given(expressions())
@settings(max_examples=300)
def test_every_expression_round_trips_through_its_text(expr: lc.Expr) -> None:
    """str(expr) parses back to the same tree, and pickling (as text) gives it back too."""
    text = str(expr)
    assert lc.expr(text).equals(expr), text
    assert pickle.loads(pickle.dumps(expr)).equals(expr)
    assert str(lc.expr(text)) == text


@given(near_valid_text())
@settings(max_examples=500)
def test_near_valid_text_gives_an_expression_or_an_expression_error(text: str) -> None:
    """Any text gives an expression or ExpressionError (an InvalidArgumentError), never another exception."""
    try:
        expr = lc.expr(text)
    except lc.ExpressionError as exc:
        error: lc.ExpressionError | None = exc
    else:
        error = None
        assert lc.expr(str(expr)).equals(expr)
    if error is not None:
        assert isinstance(error, lc.InvalidArgumentError)
        assert error.position is None or 0 <= error.position <= len(text)


HOSTILE = [
    ("__import__('os').system('touch {marker}')", "attribute access is not part of", 16),
    ("open('{marker}', 'w')", "calls are not part of the expression language", 4),
    ("(lambda: open('{marker}', 'w'))()", "slices and lambdas are not part of", 7),
    ("x.__class__.__bases__", "attribute access", 1),
    ('exec(\'open("{marker}", "w")\')', "calls are not part of", 4),
    ("labels == 'a'; import os", "one expression only", 13),
    ("[c for c in ()]", "a list is only written after in", 0),
    ("{{'a': 1}}", "dict literals", 0),
    ("a if b else c", "expected an operator or the end, got 'if'", 2),
    ("a ** 2", "unexpected '*'", 3),
    ("f'{{x}}'", "expected an operator or the end, got the string", 1),
]


@pytest.mark.parametrize(("template", "message", "position"), HOSTILE)
def test_hostile_text_is_refused_naming_the_position_and_runs_nothing(
    template: str, message: str, position: int, tmp_path: Path
) -> None:
    """Code in expression text is never run: the error names the position, and no file is created."""
    marker = tmp_path / "ran"
    text = template.format(marker=marker)
    with pytest.raises(lc.ExpressionError) as info:
        lc.expr(text)
    assert message in str(info.value)
    assert info.value.position == position
    assert info.value.text == text
    assert f"at position {position}" in str(info.value)
    assert not marker.exists()


def test_deep_nesting_and_huge_text_are_refused_without_recursion_error() -> None:
    """10,000 nested parentheses, 10,000 nots or minuses, a megabyte of text: an ExpressionError each."""
    for text, at in [
        ("(" * 10_000 + "x" + ")" * 10_000, MAX_DEPTH + 1),
        ("not " * 10_000 + "x", 4 * (MAX_DEPTH + 1)),
        ("-" * 10_000 + "x", MAX_DEPTH + 1),
        ("len(" * 10_000 + "x" + ")" * 10_000, 4 * (MAX_DEPTH + 1)),
    ]:
        with pytest.raises(lc.ExpressionError, match="nests more than 100 levels") as info:
            lc.expr(text)
        assert info.value.position == at
    with pytest.raises(lc.ExpressionError, match="characters long; expressions are at most") as info:
        lc.expr("x == 1 or " * 110_000 + "x == 1")
    assert info.value.position == MAX_TEXT


def test_deep_trees_built_in_python_are_refused_when_built() -> None:
    """An expression nested past MAX_DEPTH by Python operators raises ExpressionError, not RecursionError."""
    built = lc.col("x")
    for _ in range(MAX_DEPTH - 1):
        built = built + 1
    assert built.depth == MAX_DEPTH
    with pytest.raises(lc.ExpressionError, match="nests 101 levels deep"):
        _ = built + 1


def test_python_misuse_says_what_to_write() -> None:
    """`and`/`if` on an expression, `in`, lists and odd values are refused with the way to write them."""
    with pytest.raises(lc.InvalidTypeError, match=r"combine conditions with & \| ~"):
        bool(lc.col("x") == 1)
    with pytest.raises(lc.InvalidTypeError, match=r"use \.isin"):
        _ = lc.col("x") == [1, 2]
    with pytest.raises(lc.InvalidTypeError, match=r"write expr\.isin"):
        _ = 1 in lc.col("x")
    with pytest.raises(lc.InvalidTypeError, match="compares with numbers, strings"):
        _ = lc.col("x") == object()
    with pytest.raises(lc.InvalidArgumentError, match="Invalid tensor name"):
        lc.col("a/b")
    with pytest.raises(lc.ExpressionError, match="out of range"):
        _ = lc.col("x") == 2**70
    with pytest.raises(lc.ExpressionError, match="comparisons do not chain"):
        lc.expr("0 < x < 1")
    with pytest.raises(lc.ExpressionError, match="the expression is empty"):
        lc.expr("   ")
    with pytest.raises(lc.InvalidTypeError, match="as str"):
        lc.expr(b"x == 1")  # type: ignore[arg-type]


@given(st.text(max_size=60))
@settings(max_examples=300)
def test_any_text_at_all_gives_an_expression_or_an_expression_error(text: str) -> None:
    """Arbitrary unicode text never raises anything but ExpressionError."""
    try:
        lc.expr(text)
    except lc.ExpressionError:
        pass


@pytest.mark.parametrize("word", ["'in'", '"in"', "`in`"])
def test_not_in_takes_the_keyword_in_only(word: str) -> None:
    """`not` followed by a string 'in' or a tensor named `in` is no `not in`: refused naming the `not`;
    the keyword still parses, and a tensor named `in` is still a name."""
    text = f"x not {word} [1]"
    with pytest.raises(lc.ExpressionError, match="expected an operator or the end, got 'not'") as info:
        lc.expr(text)
    assert info.value.position == 2
    assert lc.expr("x not in [1]").equals(~lc.col("x").isin([1]))
    assert lc.expr("`in` in [1]").equals(lc.col("in").isin([1]))
