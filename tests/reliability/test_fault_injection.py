"""Fault injection: the parent of a checkpointed eval is killed with SIGKILL at random moments, then rerun."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import TEMP_PREFIX
from lakecompute.testing.internals import dataset_core
from tests.helpers import make_numbers, make_out
from tests.procs import wait_session_empty
from tests.reliability.reliability_helpers import double, doubled_prefix, kill_session, start_eval, versions

TRIALS = 18
N = 120
INTERVAL = 4  # a checkpoint commit every 4 inputs, so kills often land on or next to a commit
SLEEP = "0.002"  # seconds per input in the killed run: long enough to be killed part-way


def _wait_for_start(proc: Any) -> None:
    line = proc.stdout.readline()
    if line.strip() != "START":
        proc.kill()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"the eval script did not start: {line!r}\n{err}")


def _kill_near_commit(proc: Any, path: Path, rng: random.Random) -> str:
    """Kill ``proc`` while a chosen manifest is being written if that is seen, else right after it appears.

    The chosen commit is a random one of the first twelve, so the kills (and the points a rerun resumes
    from) spread over the run instead of all landing on its first checkpoint.
    """
    folder = path / "versions"
    target = len(versions(path)) + rng.randint(1, 12)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        names = os.listdir(folder)
        committed = sum(1 for n in names if n.endswith(".json"))
        if committed >= target - 1 and any(n.startswith(TEMP_PREFIX) for n in names):  # being written
            os.kill(proc.pid, signal.SIGKILL)
            return "mid-commit"
        if committed >= target:
            os.kill(proc.pid, signal.SIGKILL)
            return "after-commit"
        if proc.poll() is not None:
            return "finished"
    os.kill(proc.pid, signal.SIGKILL)
    return "timeout"


def _check_after_kill(path: Path, in_place: bool) -> int:
    """The dataset loads and holds exactly committed output; return the inputs a rerun should skip."""
    ds = lc.load(str(path))
    evals = list(dataset_core(ds).txn.base.evals.values())
    record = evals[0] if evals else None
    if in_place:
        x = ds.x.numpy()
        finished = record is not None and record["status"] == "done"
        # In place, readers see the old content until the final commit replaces it whole.
        np.testing.assert_array_equal(x, 2 * np.arange(N) if finished else np.arange(N))
        return int(record["done"]) if record is not None else 0
    k = doubled_prefix(ds, INTERVAL)
    done = int(record["done"]) if record is not None else 0
    assert k == done, "the outputs and the checkpoint record disagree"
    return k


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_eval_parent_sigkill_then_rerun_gives_exact_output(tmp_path: Path) -> None:
    """After each SIGKILL of an eval's parent (often mid-commit) the dataset loads and a rerun ends exact."""
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    moments: list[str] = []
    resumed: list[int] = []
    for trial in range(TRIALS):
        in_place = trial % 3 == 2
        workers = 2 if trial % 2 else 0
        path = tmp_path / f"trial{trial}"
        make_numbers(path, N) if in_place else make_out(path)
        moment, skip = _killed_run(path, trial, workers, in_place, rng, seed)
        moments.append(moment)
        resumed.append(skip)
        where = f"trial {trial} ({moment}, workers={workers}, in_place={in_place}, seed {seed})"
        _rerun_ends_exact(path, workers, in_place, skip, where)

    near = sum(m in ("mid-commit", "after-commit") for m in moments)
    print(f"\nseed {seed}: kill moments {moments}; resumed from {resumed}")
    assert moments.count("finished") <= TRIALS // 4, f"too many runs finished before the kill: {moments}"
    assert near >= TRIALS // 2, f"too few kills landed at a commit: {moments}"
    assert len({r for r in resumed if r}) >= 3, f"too few distinct resume points to test anything: {resumed}"


def _killed_run(
    path: Path, trial: int, workers: int, in_place: bool, rng: random.Random, seed: int
) -> tuple[str, int]:
    """Start an eval into ``path`` and SIGKILL its parent (at a random moment, or near a commit): the
    moment it was killed, and the input the dataset's checkpoint says a rerun resumes from."""
    kw = {"workers": workers, "interval": INTERVAL, "in_place": in_place}
    proc = start_eval(str(path), N, LC_TEST_SLEEP=SLEEP, **kw)
    try:
        _wait_for_start(proc)
        if trial % 3 == 1:
            time.sleep(rng.uniform(0.0, 0.5))  # the run itself takes about half a second
            os.kill(proc.pid, signal.SIGKILL)
            moment = "random"
        else:
            moment = _kill_near_commit(proc, path, rng)
        proc.communicate(timeout=30)
        where = f"trial {trial} ({moment}, workers={workers}, in_place={in_place}, seed {seed})"
        assert proc.returncode in (-signal.SIGKILL, 0), where
        skip = _check_after_kill(path, in_place)
        # The killed parent's workers notice it is gone and exit: nothing of its session lingers.
        assert wait_session_empty(proc.pid, timeout=10) == [], where
    finally:
        kill_session(proc.pid)
    return moment, skip


def _rerun_ends_exact(path: Path, workers: int, in_place: bool, skip: int, where: str) -> None:
    """Rerun the killed eval with the other worker count (exact output), then once more, which must write
    nothing; then vacuum, after which every remaining version still loads."""
    ds = lc.load(str(path))
    kw = {"num_workers": 0 if workers else 2, "scheduler": "processed", "checkpoint_interval": INTERVAL}
    data_in = ds if in_place else list(range(N))
    # A run killed after it completed leaves nothing to do: the rerun says so.
    done_already = pytest.warns(lc.LakeComputeWarning, match="already completed")
    with done_already if skip == N else contextlib.nullcontext():
        result = double().eval(data_in, None if in_place else ds, progressbar=False, **kw)
    assert result.resumed_from == (0 if skip == N else skip), where  # a completed no-op resumes nothing
    assert result.inputs == N, where
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), 2 * np.arange(N), err_msg=where)
    before = versions(path)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        again = double().eval(data_in, None if in_place else ds, progressbar=False, **kw)
    assert (again.inputs, again.outputs, again.version) == (N, {"x": N}, result.version), where
    assert versions(path) == before, where

    # What the crash left unreferenced goes; every remaining version still loads.
    lc.load(str(path)).vacuum(grace_seconds=0)
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), 2 * np.arange(N), err_msg=where)
