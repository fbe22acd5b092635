"""Versions: commits per call and per with-block, rollback, log, load(version=), compact and vacuum."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import TEMP_PREFIX
from tests.dataset.conftest import make_mixed, row, snapshot
from tests.leases import expire_leases

_FORK = multiprocessing.get_context("fork")


def _manifest(path: str, version: int) -> dict[str, Any]:
    with open(os.path.join(path, "versions", f"{version:010d}.json")) as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def _segments(path: str) -> set[str]:
    return {s for s in os.listdir(os.path.join(path, "segments")) if s != "zarr.json"}


def test_with_block_commits_once(ds_path: str) -> None:
    """Everything written inside ``with ds:`` becomes one new version."""
    ds = make_mixed(ds_path, n=0)
    v0 = ds.version
    with ds:
        for i in range(4):
            ds.append(row(i))
        ds.caption[0] = "changed"
        assert lc.load(ds_path).version == v0
        assert len(lc.load(ds_path)) == 0
    assert ds.version == v0 + 1
    again = lc.load(ds_path)
    assert again.version == v0 + 1
    assert again.caption.text() == ["changed", "caption 1 é", "caption 2 é", "caption 3 é"]


def test_with_block_nested_commits_once(ds_path: str) -> None:
    """A nested ``with`` does not commit; the outermost block does, once."""
    ds = make_mixed(ds_path, n=0)
    v0 = ds.version
    with ds:
        ds.append(row(0))
        with ds:
            ds.append(row(1))
        assert lc.load(ds_path).version == v0
    assert lc.load(ds_path).version == v0 + 1
    assert len(lc.load(ds_path)) == 2


def test_with_block_without_writes_commits_nothing(ds_path: str) -> None:
    """A ``with`` block that writes nothing creates no version."""
    ds = make_mixed(ds_path, n=1)
    v0 = ds.version
    with ds:
        _ = ds.u.numpy()
    assert lc.load(ds_path).version == v0


def _failing_block(ds: lc.Dataset) -> None:
    with ds:
        ds.append(row(2))
        ds.create_tensor("extra")
        ds.u[0] = [9, 9]
        _ = ds.u.numpy()  # forces the block's samples out to storage before the failure
        raise RuntimeError("boom")


def test_with_block_exception_rolls_back(ds_path: str) -> None:
    """An exception inside ``with ds:`` rolls back every write of the block, in the handle and on disk."""
    ds = make_mixed(ds_path, n=2)
    before = snapshot(ds)
    v0 = ds.version
    with pytest.raises(RuntimeError, match="boom"):
        _failing_block(ds)
    assert ds.version == v0
    assert snapshot(ds) == before
    assert snapshot(lc.load(ds_path)) == before
    assert lc.load(ds_path).version == v0
    ds.append(row(2))
    assert len(lc.load(ds_path)) == 3


def test_rollback_drops_uncommitted_writes(ds_path: str) -> None:
    """ds.rollback() inside a block drops what the block wrote so far; later writes still commit."""
    ds = make_mixed(ds_path, n=1)
    with ds:
        ds.append(row(1))
        ds.rollback()
        assert len(ds) == 1
        ds.append(row(2))
    assert lc.load(ds_path).caption.text() == ["caption 0 é", "caption 2 é"]


@pytest.mark.parametrize(
    "call",
    [
        lambda ds: ds.append(row(7)),
        lambda ds: ds.extend({k: [v, v] for k, v in row(7).items()}),
        lambda ds: ds.caption.append("only caption"),
        lambda ds: ds.caption.extend(["a", "b"]),
        lambda ds: ds.caption.__setitem__(0, "set"),
        lambda ds: ds.create_tensor("new"),
        lambda ds: ds.delete_tensor("meta"),
    ],
    ids=["append", "extend", "tensor-append", "tensor-extend", "setitem", "create-tensor", "delete-tensor"],
)
def test_commit_per_top_level_call(ds_path: str, call: Any) -> None:
    """Outside ``with``, each top-level write call is its own commit, visible to a new reader at once."""
    ds = make_mixed(ds_path, n=1)
    v0 = ds.version
    call(ds)
    assert ds.version == v0 + 1
    again = lc.load(ds_path)
    assert again.version == v0 + 1
    assert snapshot(again) == snapshot(ds)


def test_handle_sees_its_version_until_reload(ds_path: str) -> None:
    """An open handle keeps reading the version it opened; reload() moves it to the latest."""
    writer = make_mixed(ds_path, n=1)
    reader = lc.load(ds_path)
    writer.append(row(1))
    assert len(reader) == 1
    assert reader.version == writer.version - 1
    reader.reload()
    assert len(reader) == 2
    assert reader.version == writer.version


def test_concurrent_handles_conflict_commits_nothing(ds_path: str) -> None:
    """A handle behind the latest version gets CommitConflictError and nothing of its write is committed."""
    a = make_mixed(ds_path, n=1)
    b = lc.load(ds_path)
    a.append(row(1))
    with pytest.raises(lc.CommitConflictError, match=r"changed by another writer.*reload") as info:
        b.append(row(2))
    assert info.value.expected == a.version - 1
    assert info.value.found == a.version
    assert info.value.path == ds_path
    assert lc.load(ds_path).caption.text() == ["caption 0 é", "caption 1 é"]


def test_log_lists_versions_with_counts(ds_path: str) -> None:
    """log() lists every committed version, oldest first, with time, message and sample counts."""
    ds = lc.empty(ds_path)
    ds.create_tensor("x", dtype="int8")
    ds.x.extend([1, 2, 3])
    with ds:
        ds.x.append(4)
    log = ds.log()
    assert [e["version"] for e in log] == [0, 1, 2, 3]
    assert log[0]["message"] == "create"
    assert "x" in log[1]["message"]
    assert [e["samples"] for e in log] == [{}, {"x": 0}, {"x": 3}, {"x": 4}]
    times = [e["time"] for e in log]
    assert times == sorted(times)
    assert times[0] > 1e9


def test_load_version_reads_old_content(ds_path: str) -> None:
    """load(version=N) gives the content committed as version N, read-only."""
    ds = make_mixed(ds_path, n=2)
    v2 = ds.version
    old_snapshot = snapshot(ds)
    ds.append(row(2))
    ds.delete_tensor("meta")
    old = lc.load(ds_path, version=v2)
    assert old.version == v2
    assert old.read_only
    assert snapshot(old) == old_snapshot
    assert "meta" not in lc.load(ds_path).tensors


def test_setitem_keeps_old_value_in_old_version(ds_path: str) -> None:
    """ds.x[i] = v changes the latest version only; older versions keep the old value."""
    ds = lc.empty(ds_path)
    ds.create_tensor("x", dtype="int32")
    ds.x.extend([np.array([1, 2]), np.array([3, 4]), np.array([5, 6])])
    old = ds.version
    ds.x[1] = np.array([70, 80, 90])
    ds.x[[0, 2]] = [np.array([0]), np.array([-1, -2])]
    assert [a.tolist() for a in lc.load(ds_path).x.numpy(aslist=True)] == [[0], [70, 80, 90], [-1, -2]]
    assert lc.load(ds_path, version=old).x.numpy().tolist() == [[1, 2], [3, 4], [5, 6]]
    assert lc.load(ds_path, version=old + 1).x[1].numpy().tolist() == [70, 80, 90]


def test_generic_dtype_decided_at_first_commit(ds_path: str) -> None:
    """A generic tensor without dtype takes its dtype from the first commit's data and keeps it."""
    ds = lc.empty(ds_path)
    ds.create_tensor("g")
    assert ds.g.dtype is None
    assert _manifest(ds_path, ds.version)["tensors"]["g"]["dtype"] is None
    with ds:
        ds.g.append(np.array([1, 2], dtype=np.int16))
        ds.g.append(np.array([2.5, 3], dtype=np.float32))
    assert _manifest(ds_path, ds.version)["tensors"]["g"]["dtype"] == "float32"
    again = lc.load(ds_path)
    assert again.g.dtype == np.float32
    assert again.g.numpy().tolist() == [[1.0, 2.0], [2.5, 3.0]]
    again.g.append(np.array([7, 8], dtype=np.int8))
    with pytest.raises(lc.InvalidSampleError, match=r"float64 cannot be stored as float32|cannot be stored"):
        again.g.append(np.array([1 + 2j, 0]))
    assert lc.load(ds_path).g.dtype == np.float32
    assert lc.load(ds_path).g.numpy().tolist() == [[1.0, 2.0], [2.5, 3.0], [7.0, 8.0]]


def _fragment_counts(path: str, version: int) -> dict[str, int]:
    return {k: len(t["fragments"]) for k, t in _manifest(path, version)["tensors"].items()}


def test_compact_keeps_content_and_reduces_fragments(ds_path: str) -> None:
    """compact() rewrites every tensor into one fragment; content and old versions are unchanged."""
    make_mixed(ds_path, n=1)
    for i in range(1, 5):
        lc.load(ds_path).append(row(i))  # a new handle writes to a new segment: one fragment per call
    ds = lc.load(ds_path)
    ds.u[2] = [200, 201]
    before = snapshot(ds)
    v_before = ds.version
    assert all(n >= 5 for n in _fragment_counts(ds_path, v_before).values())
    v = ds.compact()
    assert v == v_before + 1
    assert _fragment_counts(ds_path, v) == dict.fromkeys(before, 1)
    assert snapshot(lc.load(ds_path)) == before
    assert snapshot(lc.load(ds_path, version=v_before)) == before
    lc.load(ds_path).append(row(5))
    assert len(lc.load(ds_path)) == 6


def _crashing_writer(path: str, ready: Any) -> None:
    ds = lc.load(path)
    ds.__enter__()
    for i in range(10):
        ds.append(row(100 + i))
    _ = ds.u.numpy()  # the block's samples are now in this writer's segment, never committed
    ready.set()
    signal.pause()


def _live_writer(path: str, ready: Any, go: Any) -> None:
    ds = lc.load(path)
    with ds:
        for i in range(3):
            ds.append(row(200 + i))
        _ = ds.u.numpy()
        ready.set()
        go.wait(60)


def _start(target: Any, *args: Any) -> Any:
    proc = _FORK.Process(target=target, args=args)
    proc.start()
    assert args[1].wait(60), "the writer did not get ready"
    return proc


def _kill(proc: Any) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)


def test_vacuum_removes_segments_of_crashed_writer(ds_path: str) -> None:
    """vacuum() deletes the unreferenced segment a killed writer left behind once its lease expired;
    committed data stays intact."""
    ds = make_mixed(ds_path, n=3)
    before = snapshot(ds)
    proc = _start(_crashing_writer, ds_path, _FORK.Event())
    _kill(proc)
    orphans = {s for s in _segments(ds_path) if s.split("-")[1] == str(proc.pid)}
    assert len(orphans) >= 1
    assert ds.vacuum(grace_seconds=0)["segments"] == 0  # its lease has not expired yet
    assert orphans <= _segments(ds_path)
    assert expire_leases(ds_path) >= 1  # as if LEASE_SECONDS had passed
    removed = ds.vacuum(grace_seconds=0)
    assert removed["segments"] >= len(orphans)
    assert not (orphans & _segments(ds_path))
    assert snapshot(lc.load(ds_path)) == before
    lc.load(ds_path).append(row(3))
    assert len(lc.load(ds_path)) == 4


def test_vacuum_spares_young_segments(ds_path: str) -> None:
    """Within the grace period vacuum() keeps even an unreferenced segment of a dead writer."""
    ds = make_mixed(ds_path, n=1)
    proc = _start(_crashing_writer, ds_path, _FORK.Event())
    _kill(proc)
    segments = _segments(ds_path)
    assert ds.vacuum()["segments"] == 0
    assert _segments(ds_path) == segments


def test_vacuum_spares_live_writer(ds_path: str) -> None:
    """vacuum() keeps the uncommitted segment of a writer that is still running, so its commit reads back."""
    ds = make_mixed(ds_path, n=1)
    go = _FORK.Event()
    proc = _FORK.Process(target=_live_writer, args=(ds_path, ready := _FORK.Event(), go))
    proc.start()
    try:
        assert ready.wait(60)
        live = {s for s in _segments(ds_path) if s.split("-")[1] == str(proc.pid)}
        assert live
        ds.vacuum(grace_seconds=0)
        assert live <= _segments(ds_path)
        go.set()
        proc.join(60)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            _kill(proc)
    again = lc.load(ds_path)
    assert again.caption.text() == ["caption 0 é"] + [f"caption {200 + i} é" for i in range(3)]
    assert snapshot(again)["u"][1:] == [row(200 + i)["u"].tolist() for i in range(3)]


def test_vacuum_keep_versions_drops_old_versions(ds_path: str) -> None:
    """vacuum(keep_versions=1) deletes older versions and their data; the latest stays intact."""
    ds = make_mixed(ds_path, n=1)
    for i in range(1, 4):
        lc.load(ds_path).append(row(i))
    ds = lc.load(ds_path)
    ds.u[0] = [5, 5]
    latest = snapshot(ds)
    old = ds.version - 1
    removed = ds.vacuum(grace_seconds=0, keep_versions=1)
    assert removed["versions"] == ds.version
    assert [e["version"] for e in ds.log()] == [ds.version]
    with pytest.raises(lc.DatasetNotFoundError, match=rf"no version {old}"):
        lc.load(ds_path, version=old)
    assert snapshot(lc.load(ds_path)) == latest
    with pytest.raises(lc.InvalidArgumentError, match=r"^Expected keep_versions >= 1\. Got 0\.$"):
        ds.vacuum(keep_versions=0)


def _debris(path: str, age: float) -> str:
    with open(path, "wb") as fh:
        fh.write(b"half")
    old = time.time() - age
    os.utime(path, (old, old))
    return path


def test_vacuum_sweeps_temp_files_of_killed_writes(ds_path: str) -> None:
    """vacuum() removes old temp files of killed writes: ours anywhere, zarr's '*.partial' inside a segment
    no live lease covers; it keeps young ones, zarr-named files outside arrays, and the data."""
    ds = make_mixed(ds_path, n=2)
    before = snapshot(ds)
    expire_leases(ds_path)  # the writer that made the dataset is done
    seg = sorted(_segments(ds_path))[0]
    chunks = os.path.join(ds_path, "segments", seg, "data", "c")
    old = [
        _debris(os.path.join(chunks, "0.4567cdef.partial"), 120),  # zarr's, in a segment without lease
        _debris(os.path.join(chunks, f"{TEMP_PREFIX}0123abcd.0"), 120),  # ours
        _debris(os.path.join(ds_path, "versions", f"{TEMP_PREFIX}89abcdef.0000000099.json"), 120),
    ]
    kept = [
        _debris(os.path.join(chunks, "1.4567cdef.partial"), 5),  # young: a write may be renaming it now
        _debris(os.path.join(ds_path, "versions", f"{TEMP_PREFIX}feedbeef.0000000098.json"), 5),
        _debris(os.path.join(ds_path, "segments", "zarr.0123abcd.partial"), 120),  # not inside an array
    ]
    ds.vacuum(grace_seconds=0)
    assert [f for f in old if os.path.exists(f)] == []
    assert [f for f in kept if not os.path.exists(f)] == []
    assert snapshot(lc.load(ds_path)) == before


def test_vacuum_keeps_temp_files_of_leased_segments(ds_path: str) -> None:
    """Inside a segment a live writer's lease covers, vacuum() removes no temp file, however old."""
    ds = make_mixed(ds_path, n=2)
    with ds:
        ds.append(row(7))
        _ = ds.u.numpy()  # written into this writer's segment, not committed: the lease is held
        segs = {r for lease in _lease_ids(ds_path) for r in lease}
        assert segs
        seg = sorted(segs)[0]
        chunks = os.path.join(ds_path, "segments", seg, "data", "c")
        os.makedirs(chunks, exist_ok=True)
        files = [
            _debris(os.path.join(chunks, "5.4567cdef.partial"), 7200),
            _debris(os.path.join(chunks, f"{TEMP_PREFIX}0123abcd.5"), 7200),
        ]
        lc.load(ds_path).vacuum(grace_seconds=0)
        assert [f for f in files if not os.path.exists(f)] == []
    assert len(lc.load(ds_path)) == 3


def _lease_ids(path: str) -> list[list[str]]:
    from tests.leases import lease_files

    return [rec["ids"] for rec in lease_files(path)]


def test_log_messages_say_what_each_commit_did(tmp_path: Path) -> None:
    """Commits are logged by what they did: a with block lists its write calls, like and compact name
    themselves (not a generic 'write')."""
    ds = lc.empty(str(tmp_path / "ds"))
    with ds:
        ds.create_tensor("x", dtype="int16")
        for i in range(3):
            ds.x.append(i)
    ds.compact()
    lc.like(str(tmp_path / "copy"), ds)
    assert [e["message"] for e in ds.log()] == ["create", "create tensor x, append x x3", "compact"]
    assert [e["message"] for e in lc.load(str(tmp_path / "copy")).log()][-1].startswith(
        "create tensors like "
    )
