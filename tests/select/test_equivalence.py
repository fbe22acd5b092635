"""Expressions over columns select the rows a Python predicate over ``ds[i]`` selects, on every htype.

The reference here reads each row through the ordinary row API (``ds[i][name].numpy()``, ``.data()``) and
evaluates the expression's meaning in plain Python, one row at a time: class names compare as names, json
values by JSON's types, a condition on per-object values keeps a row where any object meets it.
"""

from __future__ import annotations

import operator
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.select._expr import Arith, Column, Compare, Constant, Function, Index, IsIn, Logical, Unary
from tests.select.conftest import CATEGORIES, LABELS
from tests.select.strategies import SCALARS, grow

PER_OBJECT = {"categories", "boxes", "scores", "polygons", "keypoints"}
OPS = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod,
}  # fmt: skip


def read_row(row: Any) -> dict[str, Any]:
    """A row's values as plain Python, read through the row API."""
    out: dict[str, Any] = {}
    for name in row.keys():  # noqa: SIM118 - a row is no mapping: keys() names its tensors
        tensor = row[name]
        if name in ("caption", "meta"):
            out[name] = tensor.data()
        elif name == "polygons":
            out[name] = list(tensor.numpy())
        elif name == "masks":
            out[name] = [tensor.numpy()[:, :, j] for j in range(tensor.numpy().shape[2])]
        elif name == "images":
            continue
        else:
            out[name] = np.asarray(tensor.numpy()).tolist()
    return out


class Many(list):  # type: ignore[type-arg]
    """One value per object."""


def _json_kind(v: Any) -> str:
    if v is None or isinstance(v, (bool, str, list, dict)):
        return type(v).__name__
    return "number"


def _json_cmp(op: str, a: Any, b: Any) -> bool:
    same = _json_kind(a) == _json_kind(b)
    if op in ("==", "!="):
        return (same and a == b) == (op == "==")
    return same and _json_kind(a) in ("number", "str") and OPS[op](a, b)


def _broadcast(fn: Any, *values: Any) -> Any:
    many = [v for v in values if isinstance(v, Many)]
    if not many:
        return fn(*values)
    n = len(many[0])
    assert all(len(m) == n for m in many)
    return Many(fn(*(v[j] if isinstance(v, Many) else v for v in values)) for j in range(n))


def _truth(v: Any) -> bool:
    return bool(v)


def _json_item(inner: Any, item: str | int) -> Any:
    if isinstance(item, str):
        return inner.get(item) if isinstance(inner, dict) else None
    return inner[item] if isinstance(inner, list) and -len(inner) <= item < len(inner) else None


def _index(node: Index, r: dict[str, Any], kinds: dict[str, str]) -> Any:
    inner = ref(node.operand, r, kinds)
    if kind_of(node.operand, kinds) == "json":
        return _json_item(inner, node.item)
    return _broadcast(lambda v: v[node.item], inner)


def _function(node: Function, r: dict[str, Any], kinds: dict[str, str]) -> Any:
    inner = ref(node.operand, r, kinds)
    if node.name == "len":
        if not isinstance(inner, Many) and kind_of(node.operand, kinds) == "json":
            return len(inner) if isinstance(inner, (list, dict, str)) else None
        return len(inner)
    reduce = any if node.name == "any" else all
    if isinstance(inner, list):  # per-object conditions, or a json list
        return reduce(_truth(x) for x in inner)
    return _truth(inner)


def _unary(node: Unary, r: dict[str, Any], kinds: dict[str, str]) -> Any:
    inner = ref(node.operand, r, kinds)
    if node.op == "not":
        return _broadcast(lambda v: not _truth(v), inner)
    if kind_of(node.operand, kinds) == "json":
        return _broadcast(lambda v: -v if _json_kind(v) == "number" else None, inner)
    return _broadcast(lambda v: -v, inner)


def _logical(node: Logical, r: dict[str, Any], kinds: dict[str, str]) -> Any:
    parts = [ref(o, r, kinds) for o in node.operands]
    join = all if node.op == "and" else any
    return _broadcast(lambda *vs: join(_truth(v) for v in vs), *parts)


def _arith(node: Arith, r: dict[str, Any], kinds: dict[str, str]) -> Any:
    a, b = ref(node.left, r, kinds), ref(node.right, r, kinds)
    if "json" in (kind_of(node.left, kinds), kind_of(node.right, kinds)):
        numbers = lambda x, y: _json_kind(x) == _json_kind(y) == "number"  # noqa: E731
        return _broadcast(lambda x, y: OPS[node.op](x, y) if numbers(x, y) else None, a, b)
    return _broadcast(OPS[node.op], a, b)


def _compare(node: Compare, r: dict[str, Any], kinds: dict[str, str]) -> Any:
    a, b = ref(node.left, r, kinds), ref(node.right, r, kinds)
    ka, kb = kind_of(node.left, kinds), kind_of(node.right, kinds)
    if "json" in (ka, kb):
        return _broadcast(lambda x, y: _json_cmp(node.op, x, y), _names(a, ka), _names(b, kb))
    if "label" in (ka, kb) and "text" in (ka, kb, _const_kind(node.left), _const_kind(node.right)):
        a, b = _names(a, ka), _names(b, kb)
    return _broadcast(OPS[node.op], a, b)


def _isin(node: IsIn, r: dict[str, Any], kinds: dict[str, str]) -> Any:
    v = ref(node.operand, r, kinds)
    k = kind_of(node.operand, kinds)
    values = node.values
    if k == "json":
        return _broadcast(lambda x: any(_json_cmp("==", x, w) for w in values), v)
    if k == "label":
        names = CATEGORIES if isinstance(v, Many) else LABELS
        return _broadcast(lambda x: any(names[x] == w if isinstance(w, str) else x == w for w in values), v)
    if k == "text":
        return _broadcast(lambda x: x in [w for w in values if isinstance(w, str)], v)
    return _broadcast(lambda x: any(x == w for w in values if not isinstance(w, (str, type(None)))), v)


_REFERENCE: dict[type, Any] = {
    Index: _index, Function: _function, Unary: _unary, Logical: _logical, Arith: _arith,
    Compare: _compare, IsIn: _isin,
}  # fmt: skip


def ref(node: lc.Expr, r: dict[str, Any], kinds: dict[str, str]) -> Any:
    """The value of ``node`` for one row, in Python."""
    if isinstance(node, Column):
        v = r[node.name]
        return Many(v) if node.name in PER_OBJECT or node.name == "masks" else v
    if isinstance(node, Constant):
        return node.value
    return _REFERENCE[type(node)](node, r, kinds)


def _const_kind(node: lc.Expr) -> str:
    return "text" if isinstance(node, Constant) and isinstance(node.value, str) else ""


def _names(v: Any, kind: str) -> Any:
    if kind != "label":
        return v
    names = LABELS if not isinstance(v, Many) else CATEGORIES
    return _broadcast(lambda i: names[i], v)


def kind_of(node: lc.Expr, kinds: dict[str, str]) -> str:
    """The kind of a node's values, as the strategy built it."""
    if isinstance(node, Column):
        return kinds.get(node.name, "number")
    if isinstance(node, Constant):
        return "const"
    if isinstance(node, (Index, Arith, Unary, Function)) and not (
        (isinstance(node, Unary) and node.op == "not") or (isinstance(node, Function) and node.name != "len")
    ):
        return "json" if "json" in (kind_of(c, kinds) for c in node.children()) else "number"
    return "bool"


KINDS = {"labels": "label", "categories": "label", "caption": "text", "meta": "json"}

# -- the strategy: expressions that make sense for the every-htype dataset ------------------------------
SMALL = st.integers(-5, 12)
NUMBER = SMALL | st.floats(-5, 12, allow_nan=False).map(lambda f: round(f, 2))
NONZERO = st.sampled_from([1, 2, 3, -2, 0.5])
JSON_ATOMS = st.sampled_from(
    [Index(Column("meta"), "n"), Index(Column("meta"), "hard"), Index(Column("meta"), "s"),
     Index(Column("meta"), "tags"), Function("len", Index(Column("meta"), "tags")), Column("meta")]
)  # fmt: skip
ONE_NUMBERS = st.sampled_from(
    [Column("score"), Column("count"), Column("flag"), Index(Column("emb"), 2), Index(Column("emb"), -1)]
    + [
        Function("len", Column(n))
        for n in ("boxes", "caption", "polygons", "masks", "keypoints", "segmask", "emb")
    ]
)
MANY_NUMBERS = st.sampled_from(
    [
        Column("scores"),
        Index(Column("boxes"), 0),
        Index(Column("boxes"), 3),
        Index(Index(Column("keypoints"), 1), 2),
    ]
)


def numbers(many: bool) -> st.SearchStrategy[lc.Expr]:
    atoms = (ONE_NUMBERS | MANY_NUMBERS) if many else ONE_NUMBERS
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.builds(Arith, st.sampled_from(["+", "-", "*"]), inner, inner | NUMBER.map(Constant)),
            st.builds(Arith, st.sampled_from(["/", "//", "%"]), inner, NONZERO.map(Constant)),
            st.builds(Unary, st.just("-"), inner),
        ),
        max_leaves=3,
    )


def _label_side(name: str, names: list[str]) -> st.SearchStrategy[lc.Expr]:
    return st.one_of(
        st.builds(
            Compare,
            st.sampled_from(["==", "!="]),
            st.just(Column(name)),
            st.sampled_from(names).map(Constant),
        ),
        st.builds(
            Compare,
            st.sampled_from(["==", "!=", "<", ">="]),
            st.just(Column(name)),
            st.integers(0, 3).map(Constant),
        ),
        st.builds(
            IsIn,
            st.just(Column(name)),
            st.lists(st.sampled_from(names) | st.integers(0, 2), max_size=3).map(tuple),
        ),
    )


def _atomic_conditions(many: bool) -> st.SearchStrategy[lc.Expr]:
    ops = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
    options = [
        st.builds(Compare, ops, numbers(many), numbers(many) | NUMBER.map(Constant)),
        st.builds(IsIn, numbers(False), st.lists(SMALL, max_size=3).map(tuple)),
        _label_side("labels", LABELS),
        st.builds(
            Compare,
            ops,
            st.just(Column("caption")),
            st.sampled_from(["", "a cat", "b", "Émile"]).map(Constant),
        ),
        st.builds(
            IsIn,
            st.just(Column("caption")),
            st.lists(st.sampled_from(["", "a cat", "x"]), max_size=3).map(tuple),
        ),
        st.builds(Compare, ops, JSON_ATOMS, (NUMBER | st.sampled_from(["", "ab", True, None])).map(Constant)),
        st.builds(
            IsIn, JSON_ATOMS, st.lists(NUMBER | st.sampled_from(["a", True, None]), max_size=3).map(tuple)
        ),
        JSON_ATOMS,
        st.builds(
            Compare,
            st.sampled_from(["==", "!="]),
            st.just(Column("labels")),
            st.just(Index(Column("meta"), "s")),
        ),
    ]
    if many:
        options.append(_label_side("categories", CATEGORIES))
    return st.one_of(options)


def conditions() -> st.SearchStrategy[lc.Expr]:
    """A condition on the dataset: per-row ones, per-object ones, and reductions of per-object ones."""
    many_atoms = _atomic_conditions(True)
    reduced = st.builds(Function, st.sampled_from(["any", "all"]), many_atoms)
    return st.recursive(
        _atomic_conditions(False) | many_atoms | reduced,
        lambda inner: st.one_of(
            st.builds(
                Logical, st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3).map(tuple)
            ),
            st.builds(Unary, st.just("not"), inner),
        ),
        max_leaves=4,
    )


def expected_rows(ds: lc.Dataset | lc.DatasetView, expr: lc.Expr) -> list[int]:
    kept = []
    for i in range(len(ds)):
        value = ref(expr, read_row(ds[i]), KINDS)
        if any(_truth(v) for v in value) if isinstance(value, Many) else _truth(value):
            kept.append(i)
    return kept


@given(conditions())
@settings(max_examples=250)
def test_any_expression_selects_the_rows_a_python_predicate_selects(every: lc.Dataset, expr: lc.Expr) -> None:
    """ds.filter(expr) keeps exactly the rows whose values meet the expression, evaluated in Python."""
    got = every.filter(expr)
    want = expected_rows(every, expr)
    assert np.asarray(got.positions).tolist() == want, str(expr)
    assert np.asarray(every.filter(str(expr)).positions).tolist() == want


@given(conditions(), st.lists(st.integers(0, 47), max_size=30))
@settings(max_examples=60)
def test_a_view_is_filtered_in_its_own_order_repeats_included(
    every: lc.Dataset, expr: lc.Expr, rows: list[int]
) -> None:
    """A view with rows in any order (repeats too) keeps its order: the filter's rows are the view's."""
    view = every[rows] if rows else every[0:0]
    got = view.filter(expr)
    kept = [rows[i] for i in expected_rows(view, expr)]
    assert np.asarray(got.positions).tolist() == kept


def test_every_htype_answers_as_python_does(every: lc.Dataset) -> None:
    """One hand-written expression per htype (and per way of holding values) against its Python predicate."""
    rows = [read_row(every[i]) for i in range(len(every))]
    cases: dict[str, Any] = {
        "labels == 'dog'": lambda r: LABELS[r["labels"]] == "dog",  # class_label, one per row
        "labels in ['cat', 2]": lambda r: r["labels"] in (0, 2),
        "categories == 'bus'": lambda r: "bus" in [CATEGORIES[c] for c in r["categories"]],  # per object
        "all(categories != 'car')": lambda r: all(CATEGORIES[c] != "car" for c in r["categories"]),
        "score > 0.5": lambda r: r["score"] > 0.5,  # generic float (NaN rows never pass)
        "not score <= 0.5": lambda r: not r["score"] <= 0.5,
        "count % 3 == -1 + 1": lambda r: r["count"] % 3 == 0,  # generic int16
        "flag and count < 0": lambda r: r["flag"] and r["count"] < 0,  # generic bool
        "any(scores >= 0.5) and len(scores) > 1": lambda r: (
            any(s >= 0.5 for s in r["scores"]) and len(r["scores"]) > 1
        ),
        "boxes[2] * boxes[3] > 20": lambda r: any(b[2] * b[3] > 20 for b in r["boxes"]),  # bbox
        "keypoints[0][2] == 2": lambda r: any(k[0][2] == 2 for k in r["keypoints"]),  # keypoints
        "len(polygons) == 2": lambda r: len(r["polygons"]) == 2,  # polygon
        "len(masks) >= 3": lambda r: len(r["masks"]) >= 3,  # binary_mask channels
        "len(segmask) == 5": lambda r: len(r["segmask"]) == 5,  # segment_mask rows
        "emb[0] + emb[1] > 0": lambda r: r["emb"][0] + r["emb"][1] > 0,  # embedding
        "caption >= 'a' and len(caption) < 8": lambda r: (
            r["caption"] >= "a" and len(r["caption"]) < 8
        ),  # text
        "meta['n'] > 2 or meta['s'] == 'ab'": lambda r: (
            isinstance(r["meta"], dict)
            and (_json_cmp(">", r["meta"].get("n"), 2) or r["meta"].get("s") == "ab")
        ),
        "not meta['hard']": lambda r: not (r["meta"] or {}).get("hard"),  # json truth
        "len(meta['tags']) == 2": lambda r: (
            isinstance(r["meta"], dict) and len(r["meta"].get("tags", [None])) == 2
        ),
        "meta == None": lambda r: r["meta"] is None,
    }
    for text, predicate in cases.items():
        want = [i for i, r in enumerate(rows) if predicate(r)]
        assert np.asarray(every.filter(text).positions).tolist() == want, text
        assert 0 < len(want) < len(rows), f"{text} should split the rows"


def test_images_are_refused_by_name() -> None:
    """An expression that names an image tensor is refused before anything is read."""
    ds = lc.empty("mem://select-images", overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    ds.images.append(np.zeros((2, 2), np.uint8))
    with pytest.raises(lc.ExpressionError, match="holds images"):
        ds.filter("len(images) > 1")


EVERY_NAMES = st.sampled_from(
    [
        *("labels", "score", "count", "flag", "categories", "boxes", "scores", "caption", "meta", "emb"),
        *("polygons", "masks", "keypoints", "segmask", "images", "nope"),
    ]
)


@given(
    st.recursive(st.builds(Column, EVERY_NAMES) | st.builds(Constant, SCALARS), grow, max_leaves=8)
    | conditions()
    | numbers(True)
)
@settings(max_examples=150)
def test_any_expression_at_all_selects_or_raises_a_library_error(every: lc.Dataset, expr: lc.Expr) -> None:
    """Any tree over the dataset's tensors (sense or nonsense) gives a view, or a LakeComputeError: never a
    raw exception from numpy or Python."""
    for verb in (every.filter, every.count_values, every.sort, every.filter_labels):
        try:
            verb(expr)
        except lc.LakeComputeError:
            pass


def test_membership_means_what_equality_means_for_each_listed_value() -> None:
    """``x in [a, b]`` keeps the rows ``x == a or x == b`` keeps, for lists that mix large integers (past
    2**53 and 2**63), floats, negatives and bools, over integer, unsigned, float and bool tensors."""
    ds = lc.empty("mem://select-isin", overwrite=True)
    for name, dtype in (("i", "int64"), ("u", "uint64"), ("s", "int16"), ("f", "float32"), ("b", "bool")):
        ds.create_tensor(name, dtype=dtype)
    ds.extend({
        "i": np.array([2**53 + 1, 7, -1, 2**63 - 1, 0]),
        "u": np.array([2**63 + 1, 7, 2**64 - 1, 2**63, 1], dtype=np.uint64),
        "s": np.int16([-1, 7, 300, 0, 1]),
        "f": np.float32([0.5, 7, -1, np.nan, 1]),
        "b": [True, False, True, False, True],
    })  # fmt: skip
    lists = [
        [2**53, 0.5], [2**63, -1], [2**63 + 1, 0.5], [2**64 - 1, -1, 7.0], [2**63 - 1, 2**64 - 1],
        [9007199254740993, 1e300], [True, 300], [-1, 0.5, float("nan")], [1, 2.5], [False],
    ]  # fmt: skip
    for name in "iusfb":
        for values in lists:
            text = ", ".join(repr(v) for v in values)
            either = " or ".join(f"{name} == {v!r}" for v in values)
            got = np.asarray(ds.filter(f"{name} in [{text}]").positions).tolist()
            assert got == np.asarray(ds.filter(either).positions).tolist(), (name, values)
            assert np.asarray(ds.filter(f"{name} not in [{text}]").positions).tolist() == [
                i for i in range(5) if i not in got
            ]
    assert np.asarray(ds.filter("i in [9007199254740992, 0.5]").positions).tolist() == []
    assert np.asarray(ds.filter("i in [9007199254740993, 0.5]").positions).tolist() == [0]
    assert np.asarray(ds.filter("u in [9223372036854775808, -1]").positions).tolist() == [3]
    assert np.asarray(ds.filter("u in [18446744073709551615, 0.5]").positions).tolist() == [2]


WIDE = [0, 5, 2**63 - 1, 2**63, 2**64 - 1]


@pytest.mark.parametrize(
    ("text", "fn"),
    [
        ("n - 1", lambda n, i: n - 1), ("-n", lambda n, i: -n), ("n + 1", lambda n, i: n + 1),
        ("n * 2", lambda n, i: n * 2), ("n // 3 - 1", lambda n, i: n // 3 - 1), ("n % 7", lambda n, i: n % 7),
        ("n - n", lambda n, i: 0), ("n - 9223372036854775808", lambda n, i: n - 2**63),
        ("n // 0 + n % 0", lambda n, i: 0), ("i + 1", lambda n, i: i + 1), ("i - 1", lambda n, i: i - 1),
        ("n + i", lambda n, i: n + i), ("i * i", lambda n, i: i * i), ("-i", lambda n, i: -i),
        ("18446744073709551615 - n", lambda n, i: 2**64 - 1 - n),
    ],
)  # fmt: skip
def test_integer_arithmetic_is_exact_or_refused(text: str, fn: Any) -> None:
    """Arithmetic of uint64 and int64 values gives the exact integer (none wraps), around 2**63 and 2**64 as
    anywhere: as int64, or as uint64 where it is past int64 and none is negative; a result outside both is
    refused naming the expression. Checked on every run of rows of a tensor holding the boundary values."""
    ds = lc.empty("mem://select-uint64", overwrite=True)
    ds.create_tensor("n", dtype="uint64")
    ds.create_tensor("i", dtype="int64")
    ds.extend({"n": np.array(WIDE, dtype=np.uint64), "i": np.array([-(2**63), -1, 0, 2**63 - 1, 3])})
    for lo in range(5):
        for hi in range(lo + 1, 6):
            want = [
                fn(n, i) for n, i in zip(WIDE[lo:hi], [-(2**63), -1, 0, 2**63 - 1, 3][lo:hi], strict=True)
            ]
            view = ds[lo:hi]
            if min(want) < -(2**63) or max(want) >= 2**64 or (min(want) < 0 and max(want) >= 2**63):
                with pytest.raises(lc.ExpressionError, match="past the 64-bit integers") as info:
                    view.count_values(text)
                assert text in str(info.value)
                continue
            assert view.count_values(text) == dict(Counter(want)), (text, lo, hi)
            assert view.bounds(text) == (min(want), max(want))
            negative = [lo + j for j, v in enumerate(want) if v < 0]
            assert np.asarray(view.filter(f"{text} < 0").positions).tolist() == negative


def test_narrow_unsigned_arithmetic_does_not_wrap() -> None:
    """uint8, uint32 and uint64 alike: 0 - 1 is -1 and -5 is negative."""
    ds = lc.empty("mem://select-unsigned", overwrite=True)
    for name, dtype in (("a", "uint8"), ("m", "uint32"), ("n", "uint64")):
        ds.create_tensor(name, dtype=dtype)
        ds[name].extend(np.array([0, 5], dtype=dtype))
    for name in "amn":
        assert np.asarray(ds.filter(f"{name} - 1 < 0").positions).tolist() == [0]
        assert np.asarray(ds.filter(f"-{name} < 0").positions).tolist() == [1]
        assert ds.count_values(f"{name} - 1") == {-1: 1, 4: 1}
        assert ds.bounds(f"{name} - 1") == (-1, 4)


def test_integer_arithmetic_is_exact_across_blocks() -> None:
    """Rows evaluated apart (the runs of a sparse view) join exactly: int64 results of one run and uint64
    results of another as uint64, never as floats; negative values beside values past int64 are refused."""
    ds = lc.empty("mem://select-uint64-runs", overwrite=True)
    ds.create_tensor("n", dtype="uint64")
    ds.n.extend(np.array([0] * 19 + [2**64 - 1], dtype=np.uint64))
    view = ds[[0, 19]]  # two runs, evaluated one after the other
    assert view.count_values("n + 0") == {0: 1, 2**64 - 1: 1}
    assert view.bounds("n * 1") == (0, 2**64 - 1)
    assert np.asarray(view.filter("n - 1 == 18446744073709551614").positions).tolist() == [19]
    assert np.asarray(view.sort("n + 0", descending=True).positions).tolist() == [19, 0]
    with pytest.raises(lc.ExpressionError, match="both negative values and values past 2\\*\\*63 - 1"):
        ds[[0, 19]].count_values("n - 1")
