"""kill -9 at every step of the version operations leaves every branch whole; the branch workflow with a
killed and resumed in-place eval, on a local disk (tests/s3 runs it on S3)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.reliability.versions_flow import make_numbers, run_branch_workflow, run_script

State = dict[str, Any]


def _fixture(path: Path) -> None:
    """main with a three-way-mergeable branch ``exp``, a branch ``ff`` at their fork, and a tag."""
    ds = make_numbers(str(path), {}, 10)
    ds.tag("t0")
    ds.checkout("ff", create=True)
    ds.checkout("exp", create=True)
    ds.x[1] = -1
    ds.y.append(7)
    ds.checkout("main")
    ds.append({"x": 10, "y": 110})


def _state(path: Path) -> State:
    """Every branch's version and values, and every tag."""
    ds = lc.load(str(path))
    out: State = {"tags": ds.tags}
    for name in ds.branches:
        b = lc.load(str(path), branch=name)
        out[name] = (b.version, b.x.numpy().tolist(), b.y.numpy().tolist())
    return out


# operation -> (script arguments, the branch whose head it may move)
OPS = {
    "checkout-create": (["checkout", "new"], "new"),
    "tag": (["tag", "t1"], None),
    "restore": (["restore", "main", "2"], "main"),
    "merge-three-way": (["merge", "main", "exp"], "main"),
    "merge-fast-forward": (["merge", "ff", "exp"], "ff"),
    "delete-branch": (["delete-branch", "exp"], "exp"),
}


def _check_whole(path: Path, before: State, after: State, target: str | None) -> None:
    """Each branch is as before, or (the operation's own) as after; every branch still takes a commit."""
    now = _state(path)
    assert now["tags"] in (before["tags"], after["tags"])
    branches = {k for k in now if k != "tags"}
    assert branches in ({k for k in before if k != "tags"}, {k for k in after if k != "tags"})
    for name in branches:
        allowed = [s[name] for s in (before, after) if name in s]
        assert now[name] in allowed if name == target else now[name] == before[name], name
    for name in branches:
        ds = lc.load(str(path), branch=name)
        ds.x.append(12345)
        assert lc.load(str(path), branch=name).x.numpy()[-1] == 12345
    lc.load(str(path)).vacuum(grace_seconds=0)
    for name in branches:
        np.testing.assert_array_equal(lc.load(str(path), branch=name).x.numpy()[-1], 12345)
    for tag in now["tags"]:
        assert len(lc.load(str(path), version=tag).x) >= 10


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_kill_at_any_step_leaves_every_branch_whole(tmp_path: Path, op: str) -> None:
    """SIGKILL before each storage step of an operation (and in the middle of each file written) leaves
    every branch and tag as before, or the operation's target as after; all still commit and vacuum."""
    args, target = OPS[op]
    fixture = tmp_path / "fixture"
    _fixture(fixture)
    before = _state(fixture)
    done = tmp_path / "done"
    shutil.copytree(fixture, done)
    finished = run_script(str(done), {}, *args)
    assert finished.returncode == 0, finished.stderr
    assert "DONE" in finished.stdout
    after = _state(done)
    assert after != before
    k = 1
    while True:
        trial = tmp_path / f"kill-{k}"
        shutil.copytree(fixture, trial)
        proc = run_script(str(trial), {}, *args, LC_TEST_KILL_AT_STEP=str(k))
        if proc.returncode == 0:
            break  # the operation has fewer steps: every point was tried
        assert proc.returncode == -9, proc.stderr
        _check_whole(trial, before, after, target)
        shutil.rmtree(trial)
        k += 1
    assert k > 1  # at least one step was interrupted


def test_the_branch_workflow_on_a_local_disk(tmp_path: Path) -> None:
    """Branch, in-place eval killed and resumed there, diff, merges, a conflict and restore (local)."""
    run_branch_workflow(str(tmp_path / "ds"), {}, tmp_path)
