"""vacuum() never removes what an interrupted in-place eval parked for its rerun, killed or still running."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.datasets import evals_of
from tests.helpers import make_numbers, make_out, wait_until
from tests.leases import LEASE_SCRIPT, UNSHARE, script_env
from tests.procs import wait_session_empty
from tests.reliability.reliability_helpers import KILL_AT, SLEEP, double, kill_session, start_eval

N = 60
INTERVAL = 10


def vacuum_loop_command() -> list[str]:
    """lease_script.py's vacuum loop, in a pid namespace of its own where it is allowed (as on another
    machine: no process of this one is visible to it)."""
    cmd = [sys.executable, str(LEASE_SCRIPT), "vacuum-loop"]
    return ["unshare", "--pid", "--fork", "--mount-proc", *cmd] if UNSHARE else cmd


def _vacuums(stop: Path) -> int:
    """How many vacuums the loop told of so far (in the file ``STOP.count``)."""
    count = stop.with_name(f"{stop.name}.count")
    return int(count.read_text()) if count.exists() else 0


def loop_env() -> dict[str, str]:
    """The vacuum loop's environment: where unshare is not allowed, process lookups are made impossible."""
    return script_env() if UNSHARE else script_env(LC_TEST_NO_PIDS="1")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_vacuum_after_killed_in_place_eval_keeps_parked_outputs(tmp_path: Path) -> None:
    """Kill an in-place checkpointed eval, vacuum with no grace, rerun: the result is whole and exact."""
    path = tmp_path / "ds"
    make_numbers(path, N)
    proc = start_eval(str(path), N, workers=0, interval=INTERVAL, in_place=True, **{KILL_AT: "45"})
    try:
        proc.communicate(timeout=60)
        assert proc.returncode < 0  # killed itself at input 45
        assert wait_session_empty(proc.pid, timeout=10) == []
    finally:
        kill_session(proc.pid)
    ds = lc.load(str(path))
    (record,) = evals_of(ds).records().values()
    assert (record.status, record.done) == ("running", 40)
    assert sum(len(p) for p in record.parked.values()) >= 1
    np.testing.assert_array_equal(ds.x.numpy(), np.arange(N))  # readers still see the old content

    removed = ds.vacuum(grace_seconds=0)
    assert removed["segments"] == 0  # the parked outputs' segment is referenced by the record

    result = double().eval(lc.load(str(path)), checkpoint_interval=INTERVAL, progressbar=False)
    assert result.resumed_from == 40
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), 2 * np.arange(N))
    for entry in lc.load(str(path)).log():
        if entry["samples"]:  # every version with data still reads
            assert len(lc.load(str(path), version=entry["version"]).x.numpy()) == entry["samples"]["x"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_vacuum_racing_a_running_in_place_eval(tmp_path: Path) -> None:
    """vacuum(grace_seconds=0) in a loop while an in-place eval runs in another process removes nothing it
    needs: the eval completes and every version reads."""
    path = tmp_path / "ds"
    make_numbers(path, N)
    proc = start_eval(str(path), N, workers=2, interval=INTERVAL, in_place=True, **{SLEEP: "0.01"})
    try:
        while proc.poll() is None:
            lc.load(str(path)).vacuum(grace_seconds=0)
            time.sleep(0.02)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        kill_session(proc.pid)
    lc.load(str(path)).vacuum(grace_seconds=0)
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), 2 * np.arange(N))
    for entry in lc.load(str(path)).log():
        if entry["samples"]:
            assert len(lc.load(str(path), version=entry["version"]).x.numpy()) == entry["samples"]["x"]


@pytest.mark.timeout(300)
def test_vacuum_loop_from_another_machine_beside_20_evals(tmp_path: Path) -> None:
    """A vacuum(grace_seconds=0) loop in another pid namespace, on both datasets, never breaks one of 20
    evals (10 in place, 10 into another dataset, with worker processes and checkpoints): each completes,
    and its result reads back exactly."""
    src, out = tmp_path / "src", tmp_path / "out"
    make_numbers(src, N)
    make_out(out)
    stop = tmp_path / "stop"
    loop = subprocess.Popen(
        [*vacuum_loop_command(), str(stop), str(src), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=loop_env(),
        start_new_session=True,
    )
    expected_out: list[int] = []
    try:
        for run in range(10):
            seen = _vacuums(stop)  # the loop vacuums between every two runs:
            wait_until(lambda before=seen: _vacuums(stop) > before, what="the vacuum loop to go on")
            double().eval(lc.load(str(src)), num_workers=2, scheduler="processed",
                          checkpoint_interval=INTERVAL, progressbar=False, rerun=True)  # fmt: skip
            np.testing.assert_array_equal(lc.load(str(src)).x.numpy(), 2 ** (run + 1) * np.arange(N))
            inputs = list(range(run * N, (run + 1) * N))
            double().eval(inputs, lc.load(str(out)), num_workers=2, scheduler="processed",
                          checkpoint_interval=INTERVAL, progressbar=False)  # fmt: skip
            expected_out += [2 * i for i in inputs]
            np.testing.assert_array_equal(lc.load(str(out)).x.numpy(), expected_out)
        stop.touch()
        stdout, err = loop.communicate(timeout=60)
        assert loop.returncode == 0, err
        assert int(stdout.split()[-1]) >= 20  # the loop really ran beside the evals
    finally:
        kill_session(loop.pid)
        if loop.returncode is None:
            loop.communicate(timeout=30)
    for path in (src, out):
        lc.load(str(path)).vacuum(grace_seconds=0)
        for entry in lc.load(str(path)).log():
            if entry["samples"]:  # every version still reads
                assert len(lc.load(str(path), version=entry["version"]).x.numpy()) == entry["samples"]["x"]
