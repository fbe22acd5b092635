"""Concurrent writers: the first commit wins, the loser gets CommitConflictError; vacuum spares writers."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from tests.helpers import make_out, wait_until
from tests.leases import expire_leases
from tests.procs import wait_session_empty
from tests.reliability.reliability_helpers import double, kill_session, segments, start_eval, versions

_FORK = multiprocessing.get_context("fork")
CONFLICT = r"was changed by another writer: this writer started from version \d+ but version \d+ exists now"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("interval", [0, 10], ids=["no-checkpoints", "checkpoints"])
def test_two_evals_into_one_dataset_one_wins(tmp_path: Path, interval: int) -> None:
    """Two evals started together into one data_out: one commits, the other raises CommitConflictError."""
    path = tmp_path / "out"
    make_out(path)
    go = tmp_path / "go"
    sizes = (200, 150)  # different outputs, so a mix of the two would show
    procs = [
        start_eval(str(path), n, workers=w, interval=interval, LC_TEST_GO=str(go), LC_TEST_SLEEP="0.002")
        for n, w in zip(sizes, (2, 0), strict=True)
    ]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "START"
        go.touch()  # both have loaded the same version: from here on they race
        outcomes = [proc.communicate(timeout=90) for proc in procs]
    finally:
        for proc in procs:
            kill_session(proc.pid)
    codes = [proc.returncode for proc in procs]
    assert sorted(codes)[0] == 0, outcomes
    assert sorted(codes)[1] != 0, outcomes
    winner = codes.index(0)
    loser_err = outcomes[1 - winner][1]
    assert "lakecompute.errors.CommitConflictError" in loser_err
    assert (
        "Nothing of this write was committed; reload the dataset with lc.load() and run the write again."
        in (loser_err)
    )
    ds = lc.load(str(path))
    np.testing.assert_array_equal(ds.x.numpy(), 2 * np.arange(sizes[winner]))

    # The rule: rerun the loser. It appends its whole output after the winner's, in order.
    result = double().eval(
        list(range(sizes[1 - winner])), ds, checkpoint_interval=interval, progressbar=False
    )
    assert result.resumed_from == 0
    want = np.concatenate([2 * np.arange(sizes[winner]), 2 * np.arange(sizes[1 - winner])])
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), want)


def _block_writer(path: str, base: int, ready: Any, go: Any, results: Any) -> None:
    ds = lc.load(path)
    try:
        with ds:
            ds.x.extend(np.arange(base, base + 50))
            ready.wait()  # both blocks are written and not committed: commit at the same moment
            go.wait()
    except lc.CommitConflictError as err:
        results.put(("conflict", str(err)))
        ds.reload()  # the rule: reload and write again
        with ds:
            ds.x.extend(np.arange(base, base + 50))
        results.put(("retried", base))
        return
    results.put(("committed", base))


@pytest.mark.timeout(60)
def test_two_with_blocks_one_wins_and_the_retry_appends(tmp_path: Path) -> None:
    """Two `with ds:` blocks committing at once: one wins, the other conflicts, reloads and retries."""
    path = str(tmp_path / "ds")
    make_out(path)
    ready, go, results = _FORK.Barrier(2), _FORK.Barrier(2), _FORK.Queue()
    procs = [_FORK.Process(target=_block_writer, args=(path, b, ready, go, results)) for b in (1000, 2000)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(50)
    assert [p.exitcode for p in procs] == [0, 0]
    got = sorted((results.get(timeout=5) for _ in range(3)), key=lambda r: r[0])
    kinds = [r[0] for r in got]
    assert kinds == ["committed", "conflict", "retried"]
    assert "Nothing of this write was committed" in got[1][1]
    first, second = got[0][1], got[2][1]
    x = lc.load(path).x.numpy()
    # Each block whole and in one piece, the winner's first: never interleaved, nothing lost.
    np.testing.assert_array_equal(
        x, np.concatenate([np.arange(first, first + 50), np.arange(second, second + 50)])
    )


def _live_writer(path: str, ready: Any, go: Any) -> None:
    ds = lc.load(path)
    with ds:
        ds.x.extend(np.arange(500, 520))
        # The block's data is in its segment now, referenced by no version yet.
        dataset_core(ds).txn.flush("x")
        ready.set()
        go.wait(60)


def _written(path: Path, pid: int) -> bool:
    """Whether a segment of process ``pid`` holds a file yet (its workers wrote some output)."""
    return any(
        f.is_file()
        for name in segments(path)
        if name.split("-")[1] == str(pid)
        for f in (path / "segments" / name).rglob("*")
    )


@pytest.mark.timeout(90)
def test_vacuum_removes_crashed_eval_data_and_spares_live_writer(tmp_path: Path) -> None:
    """vacuum(grace_seconds=0) drops a dead eval's data, keeps live writers'; all versions read the same."""
    path = tmp_path / "ds"
    ds = make_out(path)
    ds.x.extend(np.arange(10))
    crashed = _crashed_eval_segments(path)

    ready, go = _FORK.Event(), _FORK.Event()
    writer = _FORK.Process(target=_live_writer, args=(str(path), ready, go))
    writer.start()
    try:
        assert ready.wait(30)
        live = {s for s in segments(path) if s.split("-")[1] == str(writer.pid)}
        assert live
        before = _all_versions(path)
        # A handle in this process with flushed, uncommitted data is a live writer too.
        mine = lc.load(str(path))
        with pytest.raises(_RollBack), mine:  # noqa: PT012  # the block is the live writer under test
            mine.x.extend(np.arange(900, 905))
            dataset_core(mine).txn.flush("x")
            removed = lc.load(str(path)).vacuum(grace_seconds=0)
            assert removed["segments"] >= len(crashed)
            assert not crashed & segments(path)
            assert live <= segments(path)
            assert _all_versions(path) == before
            go.set()
            writer.join(30)
            assert writer.exitcode == 0
            # This handle's uncommitted data survived the vacuum too.
            np.testing.assert_array_equal(mine.x.numpy(), [*range(10), *range(900, 905)])
            raise _RollBack
    finally:
        if writer.is_alive():
            writer.kill()
    # The live writer's block committed after the vacuum and reads back whole.
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), [*range(10), *range(500, 520)])


def _crashed_eval_segments(path: Path) -> set[str]:
    """Run an eval into ``path``, kill -9 it once its workers wrote output, and expire its lease (as a
    minute later): the segments it left."""
    proc = start_eval(str(path), 300, workers=2, interval=0, LC_TEST_SLEEP="0.005")
    try:
        assert proc.stdout.readline().strip() == "START"
        wait_until(lambda: _written(path, proc.pid), what="the eval's workers to write some output")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        assert wait_session_empty(proc.pid, timeout=10) == []
    finally:
        kill_session(proc.pid)
    crashed = {s for s in segments(path) if s.split("-")[1] == str(proc.pid)}
    assert crashed, "the killed eval left no segment to clean up"
    assert expire_leases(str(path), pid=proc.pid) == 1  # as a minute after the kill: its lease expired
    return crashed


class _RollBack(Exception):
    """Leaves a `with ds:` block without committing it."""


def _all_versions(path: Path) -> dict[int, list[int]]:
    """Every committed version's content of ``x``."""
    out = {}
    for name in versions(path):
        ds = lc.load(str(path), version=int(name[:-5]))
        out[ds.version] = ds.x.numpy().tolist() if "x" in ds.tensors and len(ds.x) else []
    return out
