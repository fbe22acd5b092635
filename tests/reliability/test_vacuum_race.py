"""vacuum() never removes what an interrupted in-place eval parked for its rerun, killed or still running."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.procs import wait_session_empty
from tests.reliability.reliability_helpers import (
    KILL_AT,
    SLEEP,
    double,
    kill_session,
    make_numbers,
    start_eval,
)

N = 60
INTERVAL = 10


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
    (record,) = ds.eval_records().values()
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
