"""The command line's version commands: restore, diff, log --graph, and --branch / tags on log and info."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.helpers import run_cli


@pytest.fixture
def branched(tmp_path: Path) -> str:
    """main (x = 0..9, then 10 appended) and branch exp (x[2] replaced), forked at version 2, tag v1 there."""
    path = str(tmp_path / "ds")
    ds = lc.empty(path)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(10))
    ds.tag("v1")
    ds.checkout("exp", create=True)
    ds.x[2] = -2
    main_ds = lc.load(path)
    main_ds.x.append(10)
    return path


def test_cli_restore(capsys: pytest.CaptureFixture[str], branched: str) -> None:
    """restore PATH N commits, on main (or --branch), a version equal to N."""
    code, out, _ = run_cli(capsys, "restore", branched, "2")
    assert code == 0
    assert out == f"Restored {branched} on branch 'main' to the content of 2: version 5.\n"
    assert lc.load(branched).x.numpy().tolist() == list(range(10))
    code, out, _ = run_cli(capsys, "restore", branched, "v1", "--branch", "exp")
    assert code == 0
    assert "on branch 'exp'" in out
    assert lc.load(branched, branch="exp").x.numpy().tolist() == list(range(10))


def test_cli_diff(capsys: pytest.CaptureFixture[str], branched: str) -> None:
    """diff PATH A B prints the changed rows per tensor; --json prints them as JSON."""
    code, out, _ = run_cli(capsys, "diff", branched, "main", "exp")
    assert code == 0
    assert out.splitlines() == [
        f"diff of {branched}, version 4 -> 3:",
        "  x: rows 2:3 replaced; rows 10:11 removed",
    ]
    code, out, _ = run_cli(capsys, "diff", branched, "v1", "exp", "--json")
    assert code == 0
    body = json.loads(out)
    assert (body["a"], body["b"]) == (2, 3)
    assert body["tensors"]["x"]["replaced"] == [[2, 3]]


def test_cli_log_graph(capsys: pytest.CaptureFixture[str], branched: str) -> None:
    """log --graph shows every branch, newest first, with lanes, parents and refs."""
    code, out, _ = run_cli(capsys, "log", branched, "--graph")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["graph", "version", "parents", "branch"]
    assert lines[1].split()[:3] == ["*", "4", "2"]
    assert lines[1].endswith("append x  [main]")
    assert lines[2].startswith("| *")
    assert lines[2].endswith("update x  [exp]")
    assert lines[3].startswith("* +")
    assert lines[3].endswith("[tag: v1]")
    assert lines[-1].split()[:3] == ["*", "0", "-"]
    assert lines[-1].endswith("create")


def test_cli_log_branch_and_info_tag(capsys: pytest.CaptureFixture[str], branched: str) -> None:
    """log --branch lists that branch's history; info --version takes a tag, --branch a branch."""
    code, out, _ = run_cli(capsys, "log", branched, "--branch", "exp")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["0", "1", "2", "3"]
    assert out.splitlines()[-1].endswith("[exp]")
    code, out, _ = run_cli(capsys, "info", branched, "--version", "v1")
    assert code == 0
    assert "version=2" in out
    code, out, _ = run_cli(capsys, "info", branched, "--branch", "exp")
    assert code == 0
    assert "version=3" in out
