"""A view (and a row, and a tensor's selection) stays on the version it was taken on, whatever its handle
does later, as Deep Lake 3's views do (its test_auto_checkout_bug), and so does its pickled copy."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

import lakecompute as lc
from tests.helpers import make_out


def _abc(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("abc", dtype="int64")
    ds.abc.extend(np.array([1, 2, 3, 4, 5]))
    return ds


def test_view_keeps_reading_main_after_checkout_and_a_write_there(tmp_path: Path) -> None:
    """ds[0:3] taken on main reads main's rows after checkout("other", create=True) and a write on other;
    its pickled copy, made before or after, reads the same."""
    ds = _abc(tmp_path / "ds")
    ds.abc[0] = 2
    on_main = ds.version
    view = ds[0:3]
    before = pickle.dumps(view)
    ds.checkout("other", create=True)
    ds.abc[0] = 3
    assert ds.abc[0].numpy() == 3
    assert view.abc.numpy().tolist() == [2, 2, 3]
    assert view.version == on_main
    after = pickle.loads(pickle.dumps(view))
    assert after.abc.numpy().tolist() == [2, 2, 3]
    assert after.version == on_main
    assert pickle.loads(before).abc.numpy().tolist() == [2, 2, 3]
    assert ds[0:3].abc.numpy().tolist() == [3, 2, 3]  # a view taken now reads where the handle is


def test_auto_checkout_bug_port(tmp_path: Path) -> None:
    """Deep Lake 3's test_auto_checkout_bug, ported: a view taken on a version keeps it through later
    checkouts, branches and writes."""
    ds = _abc(tmp_path / "ds")
    a = ds.version
    ds.abc[0] = 2
    b = ds.version
    ds.checkout("other", create=True)
    ds.abc[0] = 3
    e = ds.version
    ds.checkout("main")
    ds.abc[0] = 4
    f = ds.version
    ds.abc[0] = 5
    dsv = ds[0:3]
    h = ds.version
    ds.checkout("other")
    ds.abc[0] = 6
    assert dsv.abc[0].numpy() == 5
    ds.checkout("main")
    assert dsv.abc[0].numpy() == 5
    expected = {a: 1, b: 2, e: 3, f: 4, h: 5}
    for version, value in expected.items():
        assert lc.load(str(tmp_path / "ds"), version=version).abc[0].numpy() == value


def test_view_stays_on_its_version_after_writes_on_the_same_branch(tmp_path: Path) -> None:
    """The decided rule for a write on the same branch: every write outside `with` is a version, and the
    view stays on the one it was taken on (take it again to see the write)."""
    ds = _abc(tmp_path / "ds")
    view = ds[0:3]
    taken = ds.version
    ds.abc[1] = 20
    ds.abc.append(np.int64(6))
    assert view.abc.numpy().tolist() == [1, 2, 3]
    assert view.version == taken
    assert ds[0:3].abc.numpy().tolist() == [1, 20, 3]


def test_rows_and_tensor_selections_stay_too(tmp_path: Path) -> None:
    """ds[1] and ds.abc[0:2] (and a view's tensors) read the version they were taken on."""
    ds = _abc(tmp_path / "ds")
    row, part, view_tensor = ds[1], ds.abc[0:2], ds[0:2].abc
    ds.checkout("exp", create=True)
    ds.abc[0] = 100
    ds.abc[1] = 200
    assert int(row.abc.numpy()) == 2
    assert row.to_dict()["abc"] == 2
    assert part.numpy().tolist() == [1, 2]
    assert view_tensor.numpy().tolist() == [1, 2]
    assert pickle.loads(pickle.dumps(part)).numpy().tolist() == [1, 2]


def test_view_inside_with_reads_the_blocks_writes_while_it_is_open(tmp_path: Path) -> None:
    """While the handle is still on the version the view was taken on, the view reads through it (the
    block's uncommitted writes included), as the handle does."""
    ds = _abc(tmp_path / "ds")
    with ds:
        view = ds[0:2]
        ds.abc[0] = 7
        assert view.abc.numpy().tolist() == [7, 2]


@lc.compute
def copy_abc(sample_in: Any, sample_out: Any) -> None:
    sample_out.x.append(sample_in.abc.numpy())


def test_eval_over_a_view_reads_the_version_it_was_taken_on(tmp_path: Path) -> None:
    """An eval over a view taken before a checkout reads the view's version, not the handle's."""
    ds = _abc(tmp_path / "ds")
    view = ds[1:4]
    ds.checkout("exp", create=True)
    ds.abc[2] = -1
    out = make_out(tmp_path / "out")
    copy_abc().eval(view, out, num_workers=2, progressbar=False)
    assert lc.load(str(tmp_path / "out")).x.numpy().tolist() == [2, 3, 4]
    (entry,) = [e for e in out.log() if e["message"].startswith("eval ")]
    assert entry["eval"]["inputs"]["version"] == view.version
