"""diff and merge: computed from fragment lists (no sample read), fast-forward, three-way, conflicts."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakecompute as lc
from tests.dataset.test_branches import numbers, with_pending


@lc.compute
def keep_even(sample_in: Any, sample_out: Any) -> None:
    """Keep the rows whose x is even (one output per even input, none per odd one)."""
    x = int(sample_in.x.numpy())
    if x % 2 == 0:
        sample_out.append({"x": x, "y": int(sample_in.y.numpy())})


@lc.compute
def negate_y(sample_in: Any, sample_out: Any) -> None:
    """Write y = -y (x is left as it is, with skip_ok)."""
    sample_out.append({"y": -int(sample_in.y.numpy())})


def test_diff_names_exactly_the_rows_changed(tmp_path: Path) -> None:
    """Replaced rows, appended rows and untouched tensors are told apart exactly."""
    ds = numbers(tmp_path / "ds", 20)
    start = ds.version
    with ds:
        ds.x[3] = -1
        ds.x[7] = -1
        ds.x[8] = -1
        ds.append({"x": 20, "y": 120})
    d = ds.diff(start)
    assert (d.a, d.b) == (start, ds.version)
    assert d.tensors["x"].replaced == ((3, 4), (7, 9))
    assert d.tensors["x"].appended == (20, 21)
    assert d.tensors["y"].replaced == ()
    assert d.tensors["y"].appended == (20, 21)
    assert d.tensors["x"].removed is None
    assert str(d).splitlines()[1] == "  x: rows 20:21 appended; rows 3:4, 7:9 replaced"


def test_diff_reads_no_sample(tmp_path: Path) -> None:
    """A diff works with every stored sample gone: it reads the manifests only."""
    path = tmp_path / "ds"
    ds = numbers(path)
    start = ds.version
    ds.x[2] = 5
    shutil.rmtree(path / "segments")
    d = lc.load(str(path)).diff(start, ds.version)
    assert d.tensors["x"].replaced == ((2, 3),)


def test_diff_of_an_eval_that_drops_rows(tmp_path: Path) -> None:
    """An in-place eval writing fewer rows shows its rows replaced and the tail removed."""
    ds = numbers(tmp_path / "ds", 10)
    start = ds.version
    keep_even().eval(ds, progressbar=False)
    d = ds.diff(start)
    assert d.tensors["x"].replaced == ((0, 5),)
    assert d.tensors["x"].removed == (5, 10)
    assert d.tensors["x"].appended is None
    assert "rows 5:10 removed" in d.tensors["x"].describe()


def test_diff_tensors_created_deleted_renamed_and_info(tmp_path: Path) -> None:
    """Tensors are matched by identity: rename, delete, create and info changes are each reported."""
    ds = numbers(tmp_path / "ds", 4)
    start = ds.version
    with ds:
        ds.rename_tensor("y", "why")
        ds.delete_tensor("x")
        ds.create_tensor("x", dtype="int32")
        ds.create_tensor("label", htype="class_label", class_names=["a"])
        ds.info["source"] = "test"
    d = ds.diff(start)
    assert d.renamed == {"y": "why"}
    assert d.tensors["why"].replaced == ()
    assert d.tensors["why"].appended is None
    assert d.tensors["x"].created
    assert d.tensors["x"].deleted
    assert d.tensors["x"].removed == (0, 4)
    assert sorted(d.created) == ["label", "x"]
    assert d.info.added == ("source",)
    again = ds.version
    del ds.info["source"]
    assert ds.diff(again).info.removed == ("source",)
    assert ds.diff(again, again).tensors == {}
    assert not ds.diff(again, again)


def test_diff_defaults_and_names(tmp_path: Path) -> None:
    """diff() is what the last commit changed; diff(a) goes to this handle's version; names work."""
    ds = numbers(tmp_path / "ds", 4)
    ds.checkout("exp", create=True)
    ds.x[1] = 9
    assert ds.diff().tensors["x"].replaced == ((1, 2),)
    assert ds.diff("main").tensors["x"].replaced == ((1, 2),)
    assert ds.diff("main", "exp").to_dict()["tensors"]["x"]["replaced"] == [[1, 2]]
    assert ds.diff("exp", "main").tensors["x"].replaced == ((1, 2),)
    html = ds.diff("main")._repr_html_()
    assert "<code>x</code>" in html
    assert "rows 1:2 replaced" in html
    with pytest.raises(lc.RefNotFoundError, match="has no branch or tag 'nope'"):
        ds.diff("nope")
    first = lc.load(str(tmp_path / "ds"), version=0)
    assert str(first.diff()).endswith("no changes")


def test_diff_across_a_compaction_lists_rows_as_replaced(tmp_path: Path) -> None:
    """compact() stores every row anew, so a diff across it names them replaced (values are equal)."""
    ds = numbers(tmp_path / "ds", 6)
    start = ds.version
    ds.x.append(6)
    ds.compact()
    assert ds.diff(start).tensors["x"].replaced == ((0, 6),)


def test_diff_sees_through_contiguous_appends(tmp_path: Path) -> None:
    """Appends that merge into one stored run do not make the earlier rows look replaced."""
    ds = numbers(tmp_path / "ds", 6)
    start = ds.version
    for i in range(3):
        ds.x.append(i)
    d = ds.diff(start)
    assert d.tensors["x"].replaced == ()
    assert d.tensors["x"].appended == (6, 9)


def test_merge_fast_forwards(tmp_path: Path) -> None:
    """Merging a branch main has not moved past moves main there: no new version."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    ds.x.append(10)
    ds.x[0] = -1
    head = ds.version
    main = lc.load(path)
    files = sorted((tmp_path / "ds" / "versions").glob("*.json"))
    assert main.merge("exp") == head
    assert main.version == head
    assert main.branch == "main"
    assert sorted((tmp_path / "ds" / "versions").glob("*.json")) == files
    assert lc.load(path).x.numpy().tolist() == [-1, *range(1, 10), 10]
    main.x.append(11)  # main goes on from there
    assert lc.load(path).log()[-1]["parents"] == [head]
    assert lc.load(path, branch="exp").version == head
    assert main.merge("exp") == main.version  # already merged: nothing to do


def test_merge_three_way_combines_different_tensors_and_rows(tmp_path: Path) -> None:
    """Main appends rows, the branch rewrites y in place: the merge holds both, with two parents."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    base = ds.version
    ds.checkout("exp", create=True)
    negate_y().eval(ds, progressbar=False, skip_ok=True)
    main = lc.load(path)
    main.append({"x": 10, "y": 110})
    ours = main.version
    merged = main.merge("exp")
    assert merged == main.version > ds.version
    np.testing.assert_array_equal(main.x.numpy(), np.arange(11))
    assert main.y.numpy().tolist() == [*(-(100 + np.arange(10))).tolist(), 110]
    entry = main.log()[-1]
    assert entry["parents"] == [ours, ds.version]
    assert entry["origin"]["op"] == "merge"
    assert entry["origin"]["base"] == base
    assert lc.load(path).version == merged
    d = main.diff(base)
    assert d.tensors["y"].replaced == ((0, 10),)
    assert d.tensors["x"].replaced == ()


def test_merge_keeps_rows_both_sides_appended(tmp_path: Path) -> None:
    """Rows appended on both sides are all kept, this branch's first; replaced rows on either side too."""
    path = str(tmp_path / "ds")
    ds = numbers(path, 5)
    ds.checkout("exp", create=True)
    ds.append({"x": 50, "y": 150})
    ds.x[1] = -1
    main = lc.load(path)
    main.append({"x": 60, "y": 160})
    main.x[3] = -3
    main.merge("exp")
    assert main.x.numpy().tolist() == [0, -1, 2, -3, 4, 60, 50]
    assert main.y.numpy().tolist() == [100, 101, 102, 103, 104, 160, 150]


def test_overlapping_changes_are_refused_then_resolved(tmp_path: Path) -> None:
    """Rows changed on both sides raise MergeConflictError naming them; 'theirs' and 'ours' resolve."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    ds.x[2] = -2
    ds.x[5] = -5
    main = lc.load(path)
    main.x[5] = 500
    main.y[0] = -100
    before = main.version
    with pytest.raises(lc.MergeConflictError, match=r"tensor 'x' rows 5:6") as info:
        main.merge("exp")
    assert info.value.rows == {"x": [(5, 6)]}
    assert info.value.tensors == []
    assert "conflict_resolution='ours'" in str(info.value)
    assert main.version == before == lc.load(path).version
    main.merge("exp", conflict_resolution="theirs")
    assert main.x.numpy().tolist() == [0, 1, -2, 3, 4, -5, 6, 7, 8, 9]
    assert main.y.numpy()[0] == -100
    again = lc.load(path, version=before)
    again.checkout("other", create=True)
    again.merge("exp", conflict_resolution="ours")
    assert again.x.numpy().tolist() == [0, 1, -2, 3, 4, 500, 6, 7, 8, 9]


def test_tensor_level_conflicts(tmp_path: Path) -> None:
    """A tensor deleted on one side and written on the other, or info changed on both, conflicts."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    ds.y.append(1)
    ds.info["who"] = "exp"
    main = lc.load(path)
    main.delete_tensor("y")
    main.info["who"] = "main"
    with pytest.raises(lc.MergeConflictError) as info:
        main.merge("exp")
    assert info.value.tensors == [
        "tensor 'y': deleted on one side and changed on the other",
        "the dataset's info key 'who'",
    ]
    main.merge("exp", conflict_resolution="theirs")
    assert main.y.numpy().tolist() == [*(100 + np.arange(10)).tolist(), 1]
    assert main.info["who"] == "exp"


def test_merge_follows_a_rename(tmp_path: Path) -> None:
    """A tensor renamed on one side and appended to on the other is one tensor in the merge."""
    path = str(tmp_path / "ds")
    ds = numbers(path, 3)
    ds.checkout("exp", create=True)
    ds.rename_tensor("y", "why")
    main = lc.load(path)
    main.append({"x": 3, "y": 103})
    main.merge("exp")
    assert list(main.tensors) == ["x", "why"]
    assert main.why.numpy().tolist() == [100, 101, 102, 103]


def test_merge_refusals(tmp_path: Path) -> None:
    """Merging needs a writable handle, a known source, no pending changes and a known resolution."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    with pytest.raises(lc.ReadOnlyError):
        lc.load(path, version=1).merge("exp")
    with pytest.raises(lc.RefNotFoundError):
        ds.merge("nope")
    with pytest.raises(
        lc.InvalidArgumentError, match="Expected conflict_resolution None, 'ours' or 'theirs'"
    ):
        ds.merge("main", conflict_resolution="mine")
    with pytest.raises(lc.InvalidArgumentError, match="uncommitted changes"):
        with_pending(ds, lambda: ds.merge("main"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ours=st.dictionaries(st.integers(0, 19), st.integers(-99, -1), max_size=6),
    theirs=st.dictionaries(st.integers(0, 19), st.integers(-99, -1), max_size=6),
    ours_extra=st.integers(0, 3),
    theirs_extra=st.integers(0, 3),
)
def test_merge_matches_a_row_by_row_oracle(
    tmp_path_factory: Any, ours: dict[int, int], theirs: dict[int, int], ours_extra: int, theirs_extra: int
) -> None:
    """For any replaced rows and appends on each side, a merge with 'theirs' equals the row-by-row rule:
    each row from the side that changed it (theirs where both did), then ours', then theirs' appends."""
    path = str(tmp_path_factory.mktemp("merge") / "ds")
    ds = numbers(path, 20)
    ds.checkout("exp", create=True)
    with ds:
        for i, v in theirs.items():
            ds.x[i] = v
        for k in range(theirs_extra):
            ds.append({"x": 2000 + k, "y": 0})
    main = lc.load(path)
    with main:
        for i, v in ours.items():
            main.x[i] = v
        for k in range(ours_extra):
            main.append({"x": 1000 + k, "y": 0})
    expected = list(range(20))
    for i, v in ours.items():
        expected[i] = v
    for i, v in theirs.items():
        expected[i] = v
    expected += [1000 + k for k in range(ours_extra)] + [2000 + k for k in range(theirs_extra)]
    if ours.keys() & theirs.keys():  # both stored a new sample there, whatever its value
        with pytest.raises(lc.MergeConflictError):
            main.merge("exp")
    main.merge("exp", conflict_resolution="theirs")
    assert main.x.numpy().tolist() == expected
    assert len(main.y) == len(expected)


def test_a_tensor_renamed_differently_on_each_side(tmp_path: Path) -> None:
    """Two different new names for one tensor conflict; a resolution picks that side's name."""
    path = str(tmp_path / "ds")
    ds = numbers(path, 3)
    ds.checkout("exp", create=True)
    ds.rename_tensor("y", "b")
    main = lc.load(path)
    main.rename_tensor("y", "a")
    with pytest.raises(lc.MergeConflictError, match="tensor 'a': renamed to 'a' and 'b'"):
        main.merge("exp")
    main.merge("exp", conflict_resolution="theirs")
    assert list(main.tensors) == ["x", "b"]
    assert main.b.numpy().tolist() == [100, 101, 102]
