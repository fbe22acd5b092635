"""vacuum() decides whether a writer is alive by its lease in the dataset's storage, never by process id:
run from another machine (another pid namespace) it keeps a live writer's data, and a writer whose lease
lapsed cannot commit what a vacuum may have removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned._leases import IDLE_SECONDS
from tests.helpers import make_numbers, wait_until
from tests.leases import elsewhere, lease_files, start_writer
from tests.reliability.reliability_helpers import kill_session


def _leases_of(path: Path, pid: int) -> list[dict[str, Any]]:
    return [rec for rec in lease_files(str(path)) if rec["pid"] == pid]


def _stop(proc: subprocess.Popen[str]) -> None:
    kill_session(proc.pid)
    proc.communicate(timeout=30)


def _segments(path: Path) -> set[str]:
    root = path / "segments"
    return {p.name for p in root.iterdir() if p.is_dir()} if root.exists() else set()


@pytest.mark.timeout(120)
def test_vacuum_from_another_machine_keeps_live_writer_data(tmp_path: Path) -> None:
    """A vacuum(grace_seconds=0) in another pid namespace, while a writer holds uncommitted samples, removes
    none of them: the writer's commit then reads back exactly."""
    path = tmp_path / "ds"
    make_numbers(path, 10)
    go = tmp_path / "go"
    proc = start_writer(str(path), 10, 1000, go)
    try:
        (lease,) = _leases_of(path, proc.pid)
        assert set(lease["ids"]) <= _segments(path)
        assert lease["ids"]
        removed = json.loads(elsewhere(["vacuum", str(path)]))
        assert removed["segments"] == 0
        assert removed["chunks"] == 0
        assert set(lease["ids"]) <= _segments(path)
        go.touch()
        out, err = proc.communicate(timeout=60)
        assert out.strip().startswith("DONE"), err
    finally:
        _stop(proc)
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), np.arange(1010))


@pytest.mark.timeout(120)
def test_vacuum_removes_data_of_a_writer_whose_lease_expired(tmp_path: Path) -> None:
    """Once a killed writer's lease has expired, a vacuum from another machine removes its segments."""
    path = tmp_path / "ds"
    make_numbers(path, 10)
    before = _segments(path)
    proc = start_writer(str(path), 10, 100, tmp_path / "go")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    (lease,) = _leases_of(path, proc.pid)
    assert json.loads(elsewhere(["vacuum", str(path)]))["segments"] == 0  # not expired yet (60 s lease)
    # Another machine's vacuum once the lease has expired: its clock a second past the lease's expiry.
    removed = json.loads(elsewhere(["vacuum", str(path)], later=lease["expires"] - time.time() + 1.0))
    assert removed["segments"] == len(lease["ids"]) >= 1
    assert _segments(path) == before
    assert _leases_of(path, proc.pid) == []  # the expired lease file went too
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), np.arange(10))


@pytest.mark.timeout(120)
def test_lapsed_lease_refuses_the_commit(tmp_path: Path) -> None:
    """A writer paused beyond its lease, whose segment a vacuum removed meanwhile, gets LeaseExpiredError at
    commit instead of committing a version that cannot be read; the dataset stays as it was."""
    path = tmp_path / "ds"
    version = make_numbers(path, 10).version
    before = _segments(path)
    go = tmp_path / "go"
    # Lease 2 s, lapsed for the writer after 1 s without renewal, renewed every 0.2 s.
    proc = start_writer(str(path), 10, 500, go, LC_TEST_LEASE="2,1,0.2")
    try:
        (lease,) = _leases_of(path, proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)  # the writer is paused (a stopped container, a debugger, swap)
        wait_until(lambda: time.time() > lease["expires"] + 0.5, what="the lease to expire")
        removed = json.loads(elsewhere(["vacuum", str(path)]))
        assert removed["segments"] >= 1
        assert _segments(path) == before
        go.touch()
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert out.strip().startswith("ERROR LeaseExpiredError"), (out, err)
    assert "lease on its uncommitted data was not renewed" in out
    ds = lc.load(str(path))
    assert ds.version == version
    np.testing.assert_array_equal(ds.x.numpy(), np.arange(10))


def test_lease_is_released_after_commit_and_rollback(tmp_path: Path) -> None:
    """A handle holds a lease while it writes; after a commit it is let go (its file deleted once idle for
    IDLE_SECONDS), and a rollback forgets its segments: the next write goes to a new, newly covered one."""
    path = tmp_path / "ds"
    ds = make_numbers(path, 3)
    (committed,) = lease_files(str(path))
    assert committed["ids"]
    lease = dataset_core(ds).txn.writer.lease
    lease.tick()  # released just now: renewed, in case the handle writes again soon
    assert len(lease_files(str(path))) == 1
    lease.released -= IDLE_SECONDS
    lease.tick()
    assert lease_files(str(path)) == []
    ds.__enter__()
    ds.x.append(7)
    _ = ds.x.numpy()
    (held,) = lease_files(str(path))
    assert not set(held["ids"]) & set(committed["ids"])  # a new segment, not the let-go one
    ds.__exit__(RuntimeError, RuntimeError("boom"), None)  # the block failed: rolled back
    ds.x.append(8)
    (after,) = lease_files(str(path))
    assert not set(after["ids"]) & set(held["ids"])  # the rolled-back segment is never written again
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), [0, 1, 2, 8])


def test_vacuum_refuses_a_lease_it_cannot_read(tmp_path: Path) -> None:
    """A lease file that is not one lakecompute wrote stops vacuum with DatasetCorruptError naming it, before
    anything is removed (it cannot tell what the lease protects)."""
    path = tmp_path / "ds"
    make_numbers(path, 3)
    (path / "leases" / "foreign.json").write_text('{"ids": "all"}')
    segments = _segments(path)
    with pytest.raises(lc.DatasetCorruptError, match=r"leases/foreign\.json.*not a writer lease") as info:
        lc.load(str(path)).vacuum(grace_seconds=0)
    assert info.value.file == "leases/foreign.json"
    assert _segments(path) == segments
