"""vacuum() decides whether a writer is alive by its lease in the dataset's storage, never by process id:
run from another machine (another pid namespace) it keeps a live writer's data, and a writer whose lease
lapsed cannot commit what a vacuum may have removed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import open_backend
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned._leases import IDLE_SECONDS
from tests.helpers import make_numbers, wait_until
from tests.leases import elsewhere, lease_files, start_script, start_writer
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


@pytest.mark.parametrize("held", [False, True], ids=["released", "held"])
def test_a_renewal_never_brings_back_a_deleted_dataset(tmp_path: Path, held: bool) -> None:
    """A dataset deleted under a handle whose lease is still renewed (held by a write under way, or
    released by a commit less than IDLE_SECONDS ago) stays deleted: the renewal finds its file gone and
    writes nothing (it used to bring back the folder holding only ``leases/``, over which no dataset could
    then be created, overwrite=True included). The held write's commit then fails naming the deletion,
    and the old lease writes nothing into a new dataset made at the same path."""
    path = tmp_path / "ds"
    ds = make_numbers(path, 3)
    lease = dataset_core(ds).txn.writer.lease
    if held:
        ds.__enter__()
        ds.x.append(3)
        _ = ds.x.numpy()  # flushed into the held segment
    assert lease.stored
    assert [r["writer"] for r in lease_files(str(path))] == [lease.writer]
    shutil.rmtree(path)
    lease.tick()
    assert not path.exists()
    assert not lease.stored
    if held:
        with pytest.raises(lc.DatasetNotFoundError, match="was deleted"):
            ds.__exit__(None, None, None)
        assert not path.exists()
    fresh = lc.empty(str(path))
    fresh.create_tensor("y")
    lease.tick()
    assert lease.writer not in {r["writer"] for r in lease_files(str(path))}
    assert list(lc.load(str(path)).tensors) == ["y"]


def test_a_renewal_never_brings_back_a_deleted_memory_dataset() -> None:
    """The same on ``mem://``: the lease's key is not stored again once the dataset's keys are gone."""
    url = "mem://lease-renewal-after-delete"
    ds = make_numbers(url, 3)
    lease = dataset_core(ds).txn.writer.lease
    open_backend(url).delete_tree("")  # gone under the handle, as another writer's delete would do
    lease.tick()
    assert open_backend(url).list("") == []
    assert not lease.stored


@pytest.mark.timeout(120)
def test_a_process_keeping_leases_leaves_a_deleted_dataset_deleted(tmp_path: Path) -> None:
    """The keeper thread of a process that committed to two datasets renews both; one deleted from
    outside (``rm -rf``) stays deleted while the other's renewals go on, and can be created anew."""
    gone, kept, go = tmp_path / "gone", tmp_path / "kept", tmp_path / "go"
    make_numbers(gone, 3)
    make_numbers(kept, 3)
    proc = start_script(["committed", str(gone), str(kept)], go, LC_TEST_LEASE="30,1,0.1")
    try:
        assert len(_leases_of(gone, proc.pid)) == 1
        shutil.rmtree(gone)
        deleted = time.time()
        # A renewal of the kept lease begun 0.3 s after the delete: the keeper went round since, 3 times.
        wait_until(
            lambda: any(r["expires"] > deleted + 30.3 for r in _leases_of(kept, proc.pid)),
            what="the kept dataset's lease to be renewed after the delete",
        )
        assert not gone.exists()
        go.touch()
        out, err = proc.communicate(timeout=60)
        assert out.strip() == "DONE 2", err
    finally:
        _stop(proc)
    assert not gone.exists()
    assert _leases_of(kept, proc.pid) == []  # the process let its leases go as it ended
    np.testing.assert_array_equal(lc.load(str(kept)).x.numpy(), [0, 1, 2, -1])
    lc.empty(str(gone)).create_tensor("x")


@pytest.mark.timeout(120)
def test_a_freed_handle_s_lease_goes_after_the_keeper_renewed_it(tmp_path: Path) -> None:
    """The keeper holds no lease beyond its round of renewals: a handle freed after the keeper renewed
    its lease has the file deleted at once (it stayed, renewed, until IDLE_SECONDS ran out, kept alive by
    the keeper's own list of the round before, which the next round copied while it still held it)."""
    import gc

    path = tmp_path / "ds"
    ds = make_numbers(path, 3)
    (first,) = lease_files(str(path))
    wait_until(
        lambda: any(r["expires"] > first["expires"] for r in lease_files(str(path))),
        what="the keeper to renew the lease",
    )
    del ds
    gc.collect()
    wait_until(lambda: lease_files(str(path)) == [], 20, "the freed handle's lease file to go")
