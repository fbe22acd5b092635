"""count_values, distinct, bounds, sort and shuffle: the same column scans, checked against Python."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.select.conftest import CATEGORIES, LABELS
from tests.select.test_equivalence import read_row


def _rows(ds: lc.Dataset | lc.DatasetView) -> list[dict[str, Any]]:
    return [read_row(ds[i]) for i in range(len(ds))]


def _ranked(counter: Counter[Any]) -> list[tuple[Any, int]]:
    return sorted(counter.items(), key=lambda kv: -kv[1])


def test_count_values_counts_rows_and_every_object(every: lc.Dataset) -> None:
    """Labels count by name (zeros included), per-object labels count every object, most frequent first."""
    rows = _rows(every)
    labels = Counter(LABELS[r["labels"]] for r in rows)
    counts = every.count_values("labels")
    assert counts == {name: labels[name] for name in LABELS}
    assert list(counts.values()) == sorted(counts.values(), reverse=True)
    objects = Counter(CATEGORIES[c] for r in rows for c in r["categories"])
    assert every.count_values(lc.col("categories")) == {n: objects[n] for n in CATEGORIES}
    assert sum(every.count_values("categories").values()) == sum(len(r["categories"]) for r in rows)
    assert every.count_values("len(boxes)") == dict(_ranked(Counter(len(r["boxes"]) for r in rows)))
    assert every.count_values("caption") == dict(_ranked(Counter(r["caption"] for r in rows)))
    assert every.count_values("flag") == dict(_ranked(Counter(r["flag"] for r in rows)))
    json_counts = Counter((r["meta"] or {}).get("s") if r["meta"] else None for r in rows)
    assert every.count_values("meta['s']") == dict(
        sorted(json_counts.items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] or ""))
    )


def test_count_values_of_a_view_counts_its_rows_repeats_included(every: lc.Dataset) -> None:
    """A view's counts are of its rows: a row given twice counts twice."""
    view = every[[3, 3, 5]]
    names = [LABELS[read_row(every[i])["labels"]] for i in (3, 3, 5)]
    assert {k: v for k, v in view.count_values("labels").items() if v} == dict(Counter(names))


def test_zero_names_and_unnamed_labels() -> None:
    """Every class name is listed (0 where no row has it); a label tensor without names counts indices."""
    ds = lc.empty("mem://select-counts", overwrite=True)
    ds.create_tensor("labels", htype="class_label", class_names=["a", "b", "c"])
    ds.create_tensor("raw", htype="class_label")
    ds.extend({"labels": ["c", "c", "a"], "raw": [5, 1, 5]})
    assert ds.count_values("labels") == {"c": 2, "a": 1, "b": 0}
    assert ds.count_values("raw") == {5: 2, 1: 1}
    assert ds.distinct("labels") == ["a", "c"]
    assert ds[0:0].count_values("labels") == {"a": 0, "b": 0, "c": 0}


def test_json_counts_keep_json_types_apart() -> None:
    """count_values and distinct of json values follow JSON's equality, as filters do: true is not 1,
    false is not 0, a list is not its text; 1 and 1.0 are one number. Every count is what a filter keeps."""
    ds = lc.empty("mem://select-json-counts", overwrite=True)
    ds.create_tensor("meta", htype="json")
    values = [1, True, 0, False, 1.0, "1", [1, 2], "[1, 2]", {"a": 1}, None, True, [1, 2]]
    ds.extend({"meta": [{"v": v} for v in values]})
    counts = ds.count_values("meta['v']")
    assert len(counts) == 9
    assert sum(counts.values()) == len(values)
    assert [counts[k] for k in (1, True, 0, False, "[1, 2]", None)] == [2, 2, 1, 1, 1, 1]
    assert [(k, c) for k, c in counts.items() if c == 2] == [(1, 2), (True, 2), ([1, 2], 2)]
    for key in (1, True, 0, False, "1", "[1, 2]", None):
        assert len(ds.filter(f"meta['v'] == {key!r}")) == counts[key], key
    json_value = lc.select.JsonValue  # bools, lists and dicts: a dict literal would merge True with 1
    assert [type(k) for k in counts if isinstance(k, (bool, json_value))] == [json_value] * 4
    assert counts == {
        1: 2, json_value(True): 2, "[1, 2]": 1, 0: 1, json_value(False): 1, "1": 1, json_value([1, 2]): 2,
        json_value({"a": 1}): 1, None: 1,
    }  # fmt: skip
    assert ds.distinct("meta['v']") == [0, 1, False, True, "1", "[1, 2]", [1, 2], {"a": 1}, None]
    assert [type(v) for v in ds.distinct("meta['v']")[:4]] == [int, int, bool, bool]


def test_distinct_and_bounds(every: lc.Dataset) -> None:
    """distinct is sorted; bounds leave NaN and None out and refuse class labels."""
    rows = _rows(every)
    scores = [r["score"] for r in rows if not math.isnan(r["score"])]
    assert every.bounds("score") == (min(scores), max(scores))
    objects = [s for r in rows for s in r["scores"]]
    assert every.bounds("scores") == (min(objects), max(objects))
    assert every.bounds("caption") == (min(r["caption"] for r in rows), max(r["caption"] for r in rows))
    ns = [r["meta"]["n"] for r in rows if r["meta"] and "n" in r["meta"]]
    assert every.bounds("meta['n']") == (min(ns), max(ns))
    assert every.bounds("meta['s']") == (None, None)  # no numbers among them
    assert every[0:0].bounds("score") == (None, None)
    assert every.distinct("count") == sorted({r["count"] for r in rows})
    assert every.distinct("categories") == sorted({CATEGORIES[c] for r in rows for c in r["categories"]})
    with pytest.raises(lc.ExpressionError, match="class labels are names, which have no bounds"):
        every.bounds("labels")
    with pytest.raises(lc.ExpressionError, match="gives arrays"):
        every.count_values("boxes")


@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_with_nan_and_none_last(every: lc.Dataset, descending: bool) -> None:
    """sort orders like Python's stable sorted(), equal keys keep their order, NaN and None come last."""
    rows = _rows(every)
    cases = {
        "score": lambda r: r["score"],
        "count": lambda r: r["count"],
        "labels": lambda r: LABELS[r["labels"]],
        "len(boxes)": lambda r: len(r["boxes"]),
        "caption": lambda r: r["caption"],
        "meta['n']": lambda r: (r["meta"] or {}).get("n"),
        "-count * 2": lambda r: -r["count"] * 2,
    }
    for key, fn in cases.items():
        keys = [fn(r) for r in rows]
        present = [i for i, k in enumerate(keys) if k is not None and k == k]
        absent = [i for i, k in enumerate(keys) if k is None or k != k]
        want = sorted(present, key=lambda i: keys[i], reverse=descending) + absent
        got = every.sort(key, descending=descending)
        assert np.asarray(got.positions).tolist() == want, key
        assert got.selected_by == (f"sort({key}{', descending=True' if descending else ''})",)


def test_sort_of_a_view_and_refusals(every: lc.Dataset) -> None:
    """A view sorts its own rows; per-object keys are refused with the way out."""
    view = every[[5, 1, 9, 1]]
    counts = [read_row(every[i])["count"] for i in (5, 1, 9, 1)]
    order = sorted(range(4), key=lambda i: counts[i])
    assert np.asarray(view.sort("count").positions).tolist() == [[5, 1, 9, 1][i] for i in order]
    with pytest.raises(lc.ExpressionError, match="sort takes one value per row"):
        every.sort("scores")
    with pytest.raises(lc.InvalidTypeError, match="descending"):
        every.sort("score", descending="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("descending", [False, True])
def test_sort_of_labels_without_class_names_is_by_index(descending: bool) -> None:
    """A class_label tensor without class names sorts by index (stable); one with names by name."""
    ds = lc.empty("mem://select-sort-unnamed", overwrite=True)
    ds.create_tensor("raw", htype="class_label")
    ds.create_tensor("named", htype="class_label", class_names=["b", "a"])
    ds.extend({"raw": [2, 0, 1, 0], "named": [0, 1, 0, 1]})
    raw = sorted(range(4), key=lambda i: [2, 0, 1, 0][i], reverse=descending)
    assert np.asarray(ds.sort("raw", descending=descending).positions).tolist() == raw
    named = sorted(range(4), key=lambda i: "baba"[i], reverse=descending)
    assert np.asarray(ds.sort("named", descending=descending).positions).tolist() == named


@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_counts_of_an_empty_view_of_labels(descending: bool) -> None:
    """An empty view (a slice, a filter that keeps nothing) sorts to no rows and counts nothing, whatever
    the key's tensor holds: class labels, with or without names, per row or per object."""
    ds = lc.empty("mem://select-sort-empty", overwrite=True)
    ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
    ds.create_tensor("raw", htype="class_label")
    ds.create_tensor("n", dtype="uint16")
    ds.extend({"labels": ["dog", "cat"], "raw": [1, 0], "n": np.uint16([3, 4])})
    for empty in (ds[0:0], ds.filter("labels == 'cat' and labels == 'dog'")):
        assert len(empty) == 0
        for key in ("labels", "raw", "n", "n - 5"):
            assert np.asarray(empty.sort(key, descending=descending).positions).tolist() == [], key
        assert empty.count_values("labels") == {"cat": 0, "dog": 0}
        assert empty.count_values("raw") == {}
        assert empty.distinct("labels") == []
        assert empty.bounds("n - 5") == (None, None)


def test_shuffle_is_a_seeded_permutation(every: lc.Dataset) -> None:
    """The same seed gives the same order, every row once; without one the drawn seed is recorded."""
    a, b = every.shuffle(seed=3), every.shuffle(seed=3)
    assert np.asarray(a.positions).tolist() == np.asarray(b.positions).tolist()
    assert sorted(np.asarray(a.positions).tolist()) == list(range(len(every)))
    assert np.asarray(a.positions).tolist() != list(range(len(every)))
    drawn = every.shuffle()
    (step,) = drawn.selected_by
    seed = int(step.removeprefix("shuffle(seed=").removesuffix(")"))
    assert np.asarray(every.shuffle(seed).positions).tolist() == np.asarray(drawn.positions).tolist()
    with pytest.raises(lc.InvalidArgumentError, match="seed >= 0"):
        every.shuffle(seed=-1)
    view = every[10:20].shuffle(seed=1)
    assert sorted(np.asarray(view.positions).tolist()) == list(range(10, 20))
