"""vacuum() on S3 (a local moto server), run from another machine: a live writer's lease keeps its data."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import open_backend
from lakecompute.testing.internals import dataset_core
from tests.helpers import make_numbers, wait_until
from tests.leases import elsewhere, lease_files, start_writer


def _segments(url: str, options: dict[str, Any]) -> set[str]:
    return set(open_backend(url, options).list("segments"))


def _stop(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate(timeout=30)


@pytest.mark.timeout(180)
def test_s3_vacuum_from_another_machine_keeps_live_writer_data(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    """On s3://, a vacuum(grace_seconds=0) from another pid namespace while a writer holds uncommitted
    samples removes none of them; once the writer committed they read back exactly."""
    url = f"s3://{bucket}/ds"
    make_numbers(url, 10, storage_options=storage_options)
    go = tmp_path / "go"
    proc = start_writer(url, 10, 1000, go, s3=storage_options)
    try:
        (lease,) = [r for r in lease_files(url, storage_options) if r["pid"] == proc.pid]
        assert lease["ids"]
        assert set(lease["ids"]) <= _segments(url, storage_options)
        removed = json.loads(elsewhere(["vacuum", url], s3=storage_options))
        assert removed["segments"] == 0
        assert removed["chunks"] == 0
        assert set(lease["ids"]) <= _segments(url, storage_options)
        go.touch()
        out, err = proc.communicate(timeout=90)
        assert out.strip().startswith("DONE"), err
    finally:
        _stop(proc)
    np.testing.assert_array_equal(lc.load(url, storage_options=storage_options).x.numpy(), np.arange(1010))


@pytest.mark.timeout(180)
def test_s3_vacuum_removes_segments_once_the_lease_expired(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    """On s3://, a killed writer's segments stay until its lease expires, then a vacuum removes them."""
    url = f"s3://{bucket}/ds"
    make_numbers(url, 10, storage_options=storage_options)
    before = _segments(url, storage_options)
    proc = start_writer(url, 10, 100, tmp_path / "go", s3=storage_options)
    _stop(proc)
    (lease,) = [r for r in lease_files(url, storage_options) if r["pid"] == proc.pid]
    assert json.loads(elsewhere(["vacuum", url], s3=storage_options))["segments"] == 0  # a 60 s lease
    # Another machine's vacuum once the lease has expired: its clock a second past the lease's expiry.
    later = lease["expires"] - time.time() + 1.0
    removed = json.loads(elsewhere(["vacuum", url], s3=storage_options, later=later))
    assert removed["segments"] == len(lease["ids"]) >= 1
    assert _segments(url, storage_options) == before
    np.testing.assert_array_equal(lc.load(url, storage_options=storage_options).x.numpy(), np.arange(10))


def test_s3_a_freed_writer_s_lease_is_deleted_by_the_keeper(
    bucket: str, storage_options: dict[str, Any]
) -> None:
    """On s3://, a writer handle that committed and was then freed has its lease file deleted by the
    process's lease keeper (not in the garbage collector's path, which may run inside the S3 client's
    own calls), woken at once: the file goes well before the lease would expire."""
    import gc

    url = f"s3://{bucket}/freed"
    ds = lc.empty(url, storage_options=storage_options)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(10))
    (lease,) = lease_files(url, storage_options)
    assert lease["pid"] == os.getpid()
    del ds
    gc.collect()
    # Well before the lease would expire (a minute).
    wait_until(lambda: lease_files(url, storage_options) == [], 30, "the keeper to delete the lease file")
    assert lc.load(url, storage_options=storage_options).x.numpy().tolist() == list(range(10))


def test_s3_a_renewal_never_brings_back_a_deleted_dataset(
    bucket: str, storage_options: dict[str, Any]
) -> None:
    """On s3://, a lease renewed after its dataset's objects were deleted (by another process) stores no
    object again: the prefix stays empty, so a dataset can be created there anew."""
    url = f"s3://{bucket}/ds"
    ds = make_numbers(url, 3, storage_options=storage_options)
    lease = dataset_core(ds).txn.writer.lease
    assert lease.stored
    backend = open_backend(url, storage_options)
    backend.delete_tree("")
    lease.tick()
    assert backend.list("") == []
    assert not lease.stored
    lc.empty(url, storage_options=storage_options).create_tensor("x")


def test_s3_writing_on_after_a_delete_leaves_no_object(bucket: str, storage_options: dict[str, Any]) -> None:
    """On s3://, a handle that writes on after its dataset's objects were deleted gets DatasetNotFoundError
    at its commit, and the objects its writes stored (segments, their zarr metadata, its lease) go too."""
    url = f"s3://{bucket}/ds"
    ds = make_numbers(url, 3, storage_options=storage_options)
    backend = open_backend(url, storage_options)
    backend.delete_tree("")
    with pytest.raises(lc.DatasetNotFoundError, match="was deleted or is being replaced"), ds:
        ds.x.extend(np.arange(300_000, dtype=np.int64))
    assert backend.list("") == []


@contextlib.contextmanager
def _hung_renewal(lease: Any) -> Iterator[threading.Event]:
    """``lease``'s renewals hang (an endpoint that stopped answering: the client waits out its timeouts and
    retries) until the block ends; yields once one has begun, the event that ends the hang."""
    backend, real = lease.backend, lease.backend.replace
    hanging, answer = threading.Event(), threading.Event()

    def hung(key: str, data: bytes) -> bool:
        hanging.set()
        answer.wait(90)
        return bool(real(key, data))

    backend.replace = hung
    try:
        wait_until(hanging.is_set, 30, "the remote lease's renewal to start")
        yield answer
    finally:
        answer.set()


@pytest.mark.timeout(120)
def test_s3_a_hung_renewal_does_not_hold_up_the_other_leases(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    """A lease on s3:// whose renewal hangs (an endpoint that stopped answering: the client waits out its
    timeouts and retries) does not stop the process's other leases from being renewed: a local dataset's
    lease is renewed on schedule meanwhile (it went unrenewed for as long as the hang lasted, and lapsed),
    and the hung lease is renewed again once its request returns."""
    local = make_numbers(tmp_path / "local", 3)
    remote = make_numbers(f"s3://{bucket}/hung", 3, storage_options=storage_options)
    with _hung_renewal(dataset_core(remote).txn.writer.lease) as answer:
        seen: set[float] = set()

        def renewed_twice() -> bool:
            seen.update(r["expires"] for r in lease_files(str(tmp_path / "local")))
            return len(seen) >= 3  # the value when the hang began, and two renewals since

        wait_until(renewed_twice, 30, "the local lease to be renewed twice during the hang")
        assert not answer.is_set()
    (before,) = lease_files(f"s3://{bucket}/hung", storage_options)
    wait_until(
        lambda: lease_files(f"s3://{bucket}/hung", storage_options)[0]["expires"] > before["expires"],
        30,
        "the remote lease to be renewed once its request returned",
    )
    assert list(local.tensors) == ["x"]


@pytest.mark.timeout(120)
def test_s3_a_process_leaving_does_not_wait_for_a_hung_renewal(
    bucket: str, storage_options: dict[str, Any]
) -> None:
    """What a process does with its leases as it leaves (`Lease.drop`, run at exit) does not wait for a
    renewal that hangs: it waited for the renewal's client to give up (minutes), so a script that had
    finished its work hung at exit. The lease's file is left to lapse; once the request returns the lease
    is dropped as before."""
    remote = make_numbers(f"s3://{bucket}/leaving", 3, storage_options=storage_options)
    lease = dataset_core(remote).txn.writer.lease
    dropped = threading.Event()
    with _hung_renewal(lease) as answer:
        threading.Thread(target=lambda: (lease.drop(), dropped.set()), daemon=True).start()
        wait_until(dropped.is_set, 30, "the lease to be dropped while its renewal hangs")
        assert not answer.is_set()
        assert lease.stored  # its file is left to lapse: deleting it would hang on the same endpoint
        assert lease_files(f"s3://{bucket}/leaving", storage_options)
    wait_until(lambda: not lease.renewing.locked(), 30, "the hung renewal to return")
    lease.drop()
    assert not lease.stored
    assert lease_files(f"s3://{bucket}/leaving", storage_options) == []
