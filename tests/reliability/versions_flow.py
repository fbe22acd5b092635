"""Version operations under SIGKILL, on any storage (local disk, S3 on moto): shared by the local and the
S3 tests.

`run_branch_workflow` is issue 27's workflow end to end: a branch gets an in-place eval with checkpoints,
killed part-way (SIGKILL of the process running it) and resumed on the branch; main is unchanged
meanwhile; the diff names exactly the rows the eval changed; the branch is merged (fast-forward), then a
second one with other rows in a three-way merge; an overlapping merge is refused and then resolved with
``"theirs"``; and a restore undoes the in-place eval.

`kill_at_every_step` runs an operation in a process killed before each of its storage steps in turn and
checks that every branch is whole after each kill.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.reliability.reliability_helpers import CALLS, KILL_AT, REPO_ROOT, script_env

SCRIPT = REPO_ROOT / "tests" / "reliability" / "versions_script.py"
N = 40
INTERVAL = 10


def run_script(
    path: str, options: dict[str, Any], *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``versions_script.py`` on ``path`` to its end (or its death)."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), path, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=script_env(LC_TEST_STORAGE=json.dumps(options), **env),
    )


def make_numbers(path: str, options: dict[str, Any], n: int = N) -> lc.Dataset:
    """``x`` = 0..n-1 and ``y`` = 100 + 0..n-1 (int64), committed together."""
    ds = lc.empty(path, overwrite=True, storage_options=options)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("y", dtype="int64")
    ds.extend({"x": np.arange(n), "y": 100 + np.arange(n)})
    return ds


def _calls(file: Path) -> list[int]:
    return [int(line) for line in file.read_text().split()] if file.exists() else []


def run_branch_workflow(path: str, options: dict[str, Any], tmp: Path) -> None:
    """The whole workflow (see the module docstring); asserts every step."""
    ds = make_numbers(path, options)
    before = ds.version
    ds.checkout("exp", create=True)
    exp = _killed_and_resumed(path, options, tmp, before)
    main = lc.load(path, storage_options=options)
    # The diff names exactly the rows the eval changed; merging it is a fast-forward.
    d = main.diff("main", "exp")
    assert set(d.tensors) == {"x"}
    assert d.tensors["x"].replaced == ((0, N),)
    assert (d.tensors["x"].appended, d.tensors["x"].removed) == (None, None)
    assert main.merge("exp") == exp.version == main.version
    after_eval = main.version
    _three_way(main, path, options)
    _conflict(main, path, options)
    # Restore undoes the in-place eval: main's content equals the version before it.
    main.restore(before)
    np.testing.assert_array_equal(main.x.numpy(), np.arange(N))
    old = lc.load(path, version=after_eval, storage_options=options)
    np.testing.assert_array_equal(old.x.numpy()[:N], 2 * np.arange(N))


def _killed_and_resumed(path: str, options: dict[str, Any], tmp: Path, before: int) -> lc.Dataset:
    """An in-place eval with checkpoints on branch exp, killed at input 25, then resumed there: each input
    is computed once after the last checkpoint, and main is untouched."""
    first, second = tmp / "calls-1", tmp / "calls-2"
    killed = run_script(path, options, "eval", "exp", str(INTERVAL), **{KILL_AT: "25", CALLS: str(first)})
    assert killed.returncode == -9, killed.stderr
    exp = lc.load(path, branch="exp", storage_options=options)
    np.testing.assert_array_equal(exp.x.numpy(), np.arange(N))  # in place: old content until the end
    running = [e["eval"] for e in exp.log() if "eval" in e][-1]
    assert (running["status"], running["done"]) == ("running", 20)
    assert lc.load(path, storage_options=options).version == before
    resumed = run_script(path, options, "eval", "exp", str(INTERVAL), **{CALLS: str(second)})
    assert resumed.returncode == 0, resumed.stderr
    assert _calls(first)[:20] == list(range(20))
    assert _calls(second) == list(range(20, N))  # resumed after the checkpoint at 20
    exp.reload()
    np.testing.assert_array_equal(exp.x.numpy(), 2 * np.arange(N))
    np.testing.assert_array_equal(exp.y.numpy(), 100 + np.arange(N))
    main = lc.load(path, storage_options=options)
    assert main.version == before
    np.testing.assert_array_equal(main.x.numpy(), np.arange(N))
    return exp


def _three_way(main: lc.Dataset, path: str, options: dict[str, Any]) -> None:
    """Changes to other rows on a branch and rows appended on main: the merge holds both."""
    main.checkout("labels", create=True)
    main.y[5] = -5
    main.checkout("main")
    main.append({"x": 999, "y": 999})
    ours, theirs = main.version, lc.load(path, branch="labels", storage_options=options).version
    main.merge("labels")
    assert main.log()[-1]["parents"] == [ours, theirs]
    assert main.y.numpy()[5] == -5
    assert main.x.numpy()[-1] == 999
    np.testing.assert_array_equal(main.x.numpy()[:N], 2 * np.arange(N))


def _conflict(main: lc.Dataset, path: str, options: dict[str, Any]) -> None:
    """Overlapping changes are refused (nothing committed), then resolved with "theirs"."""
    main.checkout("fix", create=True)
    main.x[0] = 7
    main.checkout("main")
    main.x[0] = 8
    head = main.version
    with pytest.raises(lc.MergeConflictError, match=r"tensor 'x' rows 0:1") as info:
        main.merge("fix")
    assert info.value.rows == {"x": [(0, 1)]}
    assert lc.load(path, storage_options=options).version == head
    main.merge("fix", conflict_resolution="theirs")
    assert main.x.numpy()[0] == 7


State = dict[str, Any]

# operation -> (script arguments, the branch whose head it may move)
OPS = {
    "checkout-create": (["checkout", "new"], "new"),
    "tag": (["tag", "t1"], None),
    "restore": (["restore", "main", "2"], "main"),
    "merge-three-way": (["merge", "main", "exp"], "main"),
    "merge-fast-forward": (["merge", "ff", "exp"], "ff"),
    "delete-branch": (["delete-branch", "exp"], "exp"),
}


def make_branched(path: str, options: dict[str, Any]) -> None:
    """main with a three-way-mergeable branch ``exp``, a branch ``ff`` at their fork, and a tag there."""
    ds = make_numbers(path, options, 10)
    ds.tag("t0")
    ds.checkout("ff", create=True)
    ds.checkout("exp", create=True)
    ds.x[1] = -1
    ds.y.append(7)
    ds.checkout("main")
    ds.append({"x": 10, "y": 110})


def branch_state(path: str, options: dict[str, Any]) -> State:
    """Every branch's version and values, and every tag."""
    ds = lc.load(path, storage_options=options)
    out: State = {"tags": ds.tags}
    for name in ds.branches:
        b = lc.load(path, branch=name, storage_options=options)
        out[name] = (b.version, b.x.numpy().tolist(), b.y.numpy().tolist())
    return out


def check_whole(path: str, options: dict[str, Any], before: State, after: State, target: str | None) -> None:
    """Each branch is as before, or (the operation's own) as after; every branch still takes a commit, and a
    vacuum afterwards keeps everything they and the tags reach."""
    now = branch_state(path, options)
    assert now["tags"] in (before["tags"], after["tags"])
    branches = {k for k in now if k != "tags"}
    assert branches in ({k for k in before if k != "tags"}, {k for k in after if k != "tags"})
    for name in branches:
        allowed = [s[name] for s in (before, after) if name in s]
        assert now[name] in allowed if name == target else now[name] == before[name], name
    for name in branches:
        lc.load(path, branch=name, storage_options=options).x.append(12345)
    lc.load(path, storage_options=options).vacuum(grace_seconds=0)
    for name in branches:
        assert lc.load(path, branch=name, storage_options=options).x.numpy()[-1] == 12345
    for tag in now["tags"]:
        assert len(lc.load(path, version=tag, storage_options=options).x) >= 10


def kill_at_every_step(op: str, fresh: Callable[[str], str], options: dict[str, Any]) -> int:
    """Run operation ``op`` (see `OPS`) on fresh copies of `make_branched` (``fresh(name)`` makes one and
    returns where), killed before its 1st, 2nd, ... storage step until it completes; check every branch
    after each kill. Returns how many steps were tried."""
    args, target = OPS[op]
    first = fresh("before")
    before = branch_state(first, options)
    finished = run_script(first, options, *args)
    assert finished.returncode == 0, finished.stderr
    assert "DONE" in finished.stdout
    after = branch_state(first, options)
    assert after != before
    k = 1
    while True:
        trial = fresh(f"kill-{k}")
        proc = run_script(trial, options, *args, LC_TEST_KILL_AT_STEP=str(k))
        if proc.returncode == 0:
            return k  # the operation has fewer steps: every point was tried
        assert proc.returncode == -9, proc.stderr
        check_whole(trial, options, before, after, target)
        k += 1
