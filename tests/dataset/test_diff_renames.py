"""diff after a delete and a rename onto the deleted name: "y renamed to x, the old x deleted", with row
counts, in the text, the attributes, the JSON and the command line (it used to say "x: deleted, and created
anew" with no rows, and y was missing)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.helpers import run_cli


def _xy(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("y", dtype="int64")
        ds.x.extend(np.arange(5))
        ds.y.extend(np.arange(12))
    return ds


def test_rename_onto_a_deleted_name_is_reported_as_both(tmp_path: Path) -> None:
    """x deleted, then y renamed to x: one line naming the rename and the deletion, each with its rows."""
    ds = _xy(tmp_path / "ds")
    start = ds.version
    ds.delete_tensor("x")
    ds.rename_tensor("y", "x")
    d = ds.diff(start)
    assert str(d).splitlines()[1:] == ["  x: 'y' renamed to 'x' (12 rows), the old 'x' (5 rows) deleted"]
    assert d.renamed == {"y": "x"}
    assert d.deleted == ["x"]
    assert d.created == []
    x = d.tensors["x"]
    assert (x.renamed_from, x.rows, x.deleted_rows, x.replaced, x.appended) == ("y", 12, 5, (), None)
    assert "created anew" not in str(d)


def test_rename_onto_a_deleted_name_in_one_block_with_more_rows(tmp_path: Path) -> None:
    """In one `with` block, with rows appended to the renamed tensor afterwards: those rows are said too."""
    ds = _xy(tmp_path / "ds")
    start = ds.version
    with ds:
        ds.delete_tensor("x")
        ds.rename_tensor("y", "x")
        ds.x.extend(np.arange(3))
    line = str(ds.diff(start)).splitlines()[1]
    assert line == "  x: 'y' renamed to 'x' (15 rows), the old 'x' (5 rows) deleted; rows 12:15 appended"


def test_diff_the_other_way_round(tmp_path: Path) -> None:
    """From the later version back to the earlier: x renamed back to y, and an x of 5 rows created."""
    ds = _xy(tmp_path / "ds")
    start = ds.version
    ds.delete_tensor("x")
    ds.rename_tensor("y", "x")
    back = ds.diff(ds.version, start)
    assert back.renamed == {"x": "y"}
    assert sorted(str(back).splitlines()[1:]) == ["  x: created with 5 rows", "  y: renamed from 'x'"]


def test_delete_and_create_anew_say_their_rows(tmp_path: Path) -> None:
    """A delete alone, and a delete with a new tensor of the name, give the row counts."""
    ds = _xy(tmp_path / "ds")
    start = ds.version
    ds.delete_tensor("y")
    assert str(ds.diff(start)).splitlines()[1:] == ["  y: deleted (12 rows)"]
    with ds:
        ds.delete_tensor("x")
        ds.create_tensor("x", dtype="int32")
        ds.x.extend(np.arange(3))
    assert ds.diff(start).tensors["x"].describe() == "deleted (5 rows), and created anew with 3 rows"


def test_cli_diff_reports_the_rename(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """lakecompute diff prints the line; --json carries renamed_from, deleted_rows and rows."""
    ds = _xy(tmp_path / "ds")
    start = ds.version
    ds.delete_tensor("x")
    ds.rename_tensor("y", "x")
    path = str(tmp_path / "ds")
    code, out, _ = run_cli(capsys, "diff", path, str(start), str(ds.version))
    assert code == 0
    assert "  x: 'y' renamed to 'x' (12 rows), the old 'x' (5 rows) deleted" in out.splitlines()
    code, out, _ = run_cli(capsys, "diff", path, str(start), str(ds.version), "--json")
    body = json.loads(out)["tensors"]["x"]
    assert (body["renamed_from"], body["deleted"], body["deleted_rows"], body["rows"]) == ("y", True, 5, 12)
