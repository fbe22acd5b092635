"""Ctrl-C (SIGINT) and SIGTERM during an eval: workers stop, no process is left, only checkpoints stay."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.procs import wait_session_empty
from tests.reliability.reliability_helpers import (
    double,
    doubled_prefix,
    kill_session,
    make_numbers,
    make_out,
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
    start = len(versions(path))
    kw = {"workers": workers, "interval": INTERVAL, "in_place": in_place}
    proc = start_eval(str(path), N, LC_TEST_SLEEP="0.005", **kw)
    try:
        assert proc.stdout.readline().strip() == "START"
        # Wait for two checkpoints, so there is committed progress to keep and work in flight to stop.
        deadline = time.monotonic() + 60
        while len(versions(path)) < start + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
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

    ds = lc.load(str(path))
    (record,) = ds._txn.base.evals.values()
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
