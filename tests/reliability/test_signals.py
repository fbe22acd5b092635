"""Ctrl-C (SIGINT) and SIGTERM during an eval: workers stop, no process is left, only checkpoints stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from tests.helpers import make_numbers, make_out, wait_until
from tests.procs import wait_session_empty
from tests.reliability.reliability_helpers import (
    double,
    doubled_prefix,
    kill_session,
    script_env,
    start_eval,
    versions,
)

N = 400
INTERVAL = 10


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("signum", "workers", "in_place"),
    [
        (signal.SIGINT, 2, False),
        (signal.SIGTERM, 2, False),
        (signal.SIGINT, 2, True),
        (signal.SIGTERM, 0, True),
    ],
    ids=["sigint-processed", "sigterm-processed", "sigint-in-place", "sigterm-serial-in-place"],
)
def test_signal_stops_eval_leaves_no_process_and_only_checkpoints(
    tmp_path: Path, signum: int, workers: int, in_place: bool
) -> None:
    """A signalled eval raises KeyboardInterrupt, its session empties, and a rerun resumes it exactly."""
    path = tmp_path / "ds"
    if in_place:
        make_numbers(path, N)
    else:
        make_out(path)
    _signalled_after_two_checkpoints(path, signum, workers, in_place)

    ds = lc.load(str(path))
    (record,) = dataset_core(ds).txn.base.evals.values()
    assert record["status"] == "running"
    done = record["done"]
    assert 2 * INTERVAL <= done < N
    if in_place:
        np.testing.assert_array_equal(ds.x.numpy(), np.arange(N))
    else:
        assert doubled_prefix(ds, INTERVAL) == done
    kw2 = {"num_workers": 2, "checkpoint_interval": INTERVAL, "progressbar": False}
    result = double().eval(ds if in_place else list(range(N)), None if in_place else ds, **kw2)
    assert result.resumed_from == done
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), 2 * np.arange(N))


def _signalled_after_two_checkpoints(path: Path, signum: int, workers: int, in_place: bool) -> None:
    """Start an eval into ``path``, send it ``signum`` after two checkpoints, and check that it stopped
    with KeyboardInterrupt and left no process of its session."""
    start = len(versions(path))
    kw = {"workers": workers, "interval": INTERVAL, "in_place": in_place}
    proc = start_eval(str(path), N, LC_TEST_SLEEP="0.005", **kw)
    try:
        assert proc.stdout.readline().strip() == "START"
        # Wait for two checkpoints, so there is committed progress to keep and work in flight to stop.
        wait_until(lambda: len(versions(path)) >= start + 2, what="two checkpoints")
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
        assert "KeyboardInterrupt" in stderr
        if signum == signal.SIGTERM:
            assert "eval stopped by signal SIGTERM" in stderr
        assert proc.returncode != 0
        assert "DONE" not in stdout
        assert wait_session_empty(proc.pid, timeout=10) == []
    finally:
        kill_session(proc.pid)


# An eval with the threaded scheduler whose sample 5 blocks in user code (never reaching a
# cancellation point) until the process ends.
_STUCK_THREADED_EVAL = textwrap.dedent(
    """
    import sys
    import time

    import numpy as np

    import lakecompute as lc


    @lc.compute
    def stuck_on_5(sample_in, sample_out):
        if int(sample_in) == 5:
            print("STUCK", flush=True)
            time.sleep(600)
        sample_out.x.append(np.int64(2 * int(sample_in)))


    out = lc.load(sys.argv[1])
    stuck_on_5().eval(list(range(40)), out, num_workers=2, scheduler="threaded", progressbar=False)
    print("DONE", flush=True)
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_signal_stops_threaded_eval_with_stuck_task(tmp_path: Path, signum: int) -> None:
    """A threaded eval whose task is stuck in user code still stops on Ctrl-C or SIGTERM: the process
    ends within seconds with KeyboardInterrupt, reports the abandoned thread, and commits nothing."""
    path = tmp_path / "out"
    start = make_out(path).version
    proc = subprocess.Popen(
        [sys.executable, "-c", _STUCK_THREADED_EVAL, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=script_env(),
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "STUCK"
        proc.send_signal(signum)
        # Without the fix this waits for the 10-minute sleep: communicate() times out.
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        kill_session(proc.pid)
    assert "KeyboardInterrupt" in stderr
    if signum == signal.SIGTERM:
        assert "eval stopped by signal SIGTERM" in stderr
    assert "1 worker thread(s) of the threaded scheduler were still running a task" in stderr
    assert proc.returncode != 0
    assert "DONE" not in stdout
    assert lc.load(str(path)).version == start


@lc.compute
def _fork_and_terminate_child(sample_in: int, sample_out: lc.Dataset) -> None:
    """Fork; the child sends itself SIGTERM at once (as a pool stopping a worker still starting does)."""
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGTERM)
        os._exit(7)  # reached only if the SIGTERM did not end the child
    _, status = os.waitpid(pid, 0)
    sample_out.status.append(status)


def test_sigterm_in_a_process_forked_during_an_eval_ends_that_process() -> None:
    """A process forked while an eval runs inherits the eval's SIGTERM handler; SIGTERM ends it as it
    ends any process, instead of raising KeyboardInterrupt there and running the parent's code on in
    the child (seen as a worker stopped while it started, unwinding the test session in the child)."""
    out = lc.empty("mem://fork-sigterm", overwrite=True)
    out.create_tensor("status", dtype="int64")
    _fork_and_terminate_child().eval([0], out, num_workers=0, progressbar=False)
    (status,) = out.status.numpy().tolist()
    assert os.WIFSIGNALED(status), f"the child exited with status {status} instead of by SIGTERM"
    assert os.WTERMSIG(status) == signal.SIGTERM


@lc.compute
def _blocked_signals(sample_in: int, sample_out: lc.Dataset) -> None:
    """Record the worker's blocked-signal mask (``SigBlk`` in /proc/self/status, a hex bit set)."""
    status = Path("/proc/self/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:"))
    sample_out.blocked.append(int(mask, 16))
    sample_out.pid.append(os.getpid())


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_workers_run_with_stop_signals_unblocked(tmp_path: Path, start_method: str) -> None:
    """The pool blocks SIGINT and SIGTERM around each worker's fork (so that one sent before the worker
    set its handlers waits for them); the worker unblocks both before running a task."""
    from functools import partial

    from lakecompute.schedulers import ProcessedScheduler, register_scheduler, unregister_scheduler

    out = make_out(tmp_path / "out", blocked={"dtype": "int64"}, pid={"dtype": "int64"})
    # Registered for this test only: the registry is the process's, and other tests list its names.
    name = f"processed-signals-{start_method}"
    register_scheduler(name, partial(ProcessedScheduler, start_method=start_method))
    try:
        _blocked_signals().eval(list(range(8)), out, num_workers=2, scheduler=name, progressbar=False)
    finally:
        unregister_scheduler(name)
    assert set(out.pid.numpy().tolist()) - {os.getpid()}, "the function ran in the caller, not a worker"
    for mask in out.blocked.numpy().tolist():
        assert not mask & (1 << (signal.SIGTERM - 1)), f"SIGTERM blocked in a worker (SigBlk {mask:#x})"
        assert not mask & (1 << (signal.SIGINT - 1)), f"SIGINT blocked in a worker (SigBlk {mask:#x})"
