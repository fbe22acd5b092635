"""A conformance suite for the versioned table on every storage backend: ``TableTests`` (as zarr's
``StoreTests`` for stores, and `lakecompute.testing.backends.BackendTests` for the backends' bytes).

Subclass it in a test module and implement `TableTests.make_backend` (a new, empty location for each
test) and the raw hooks, which read and write a key's bytes *without* lakecompute's backend code (plain
files for a local folder, zarr's own store for memory, another S3 client for S3)::

    class TestLocal(TableTests):
        def make_backend(self) -> Backend:
            return open_backend(str(self.tmp_path / "ds"))

        def raw_get(self, backend: Backend, key: str) -> bytes | None:
            path = self.tmp_path / "ds" / key
            return path.read_bytes() if path.exists() else None
        ...

What the table writes is checked by reading the keys raw, and what it reads is given to it by writing
keys raw, so that a bug of a backend (or of the table) cannot cancel out between a write and a read. The
key layout checked is the stored format (``versions/<V>.json``, ``refs/branches/<name>.json``, ...), as
``docs/how-it-works.md`` describes it: a change to it is a change of format. The suite covers commits,
version numbers under racing writers, refs, history, diff, merge, vacuum, and damaged metadata.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from lakecompute.compression import zarr_compressors
from lakecompute.errors import (
    CommitConflictError,
    DatasetCorruptError,
    DatasetNotFoundError,
    RefExistsError,
    RefNotFoundError,
)
from lakecompute.specs import parse_tensor_spec
from lakecompute.storage import Backend
from lakecompute.threads import start_thread
from lakecompute.versioned import BranchRef, Manifest, SampleBuffer, Table, TensorState

__all__ = ["TableTests"]


def _version_key(version: int) -> str:
    return f"versions/{version:010d}.json"


class TableTests:
    """Tests the versioned table must pass on every backend. Subclass it; implement `make_backend`,
    `raw_get`, `raw_set` and `raw_keys`."""

    tmp_path: Any = None
    """The test's temporary folder (set by the autouse fixture below), for backends on a local disk."""

    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path: Any) -> None:
        self.tmp_path = tmp_path

    # -- what a subclass gives -------------------------------------------------------------------
    def make_backend(self) -> Backend:
        """A new, empty location; override."""
        raise NotImplementedError

    def raw_get(self, backend: Backend, key: str) -> bytes | None:
        """The bytes stored under ``key`` at ``backend``'s location (None: none), read without
        lakecompute's backend code; override."""
        raise NotImplementedError

    def raw_set(self, backend: Backend, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` at ``backend``'s location without lakecompute's code; override."""
        raise NotImplementedError

    def raw_keys(self, backend: Backend, prefix: str) -> list[str]:
        """Every key stored under the folder ``prefix`` (all levels), relative to the location, sorted,
        listed without lakecompute's code; override."""
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------------
    def new_table(self) -> tuple[Table, Backend]:
        """A table with a new, empty dataset (version 0 on ``main``)."""
        backend = self.make_backend()
        table = Table(backend)
        table.create(overwrite=False)
        return table, backend

    def raw_json(self, backend: Backend, key: str) -> dict[str, Any]:
        data = self.raw_get(backend, key)
        assert data is not None, f"{key} is not stored"
        body: dict[str, Any] = json.loads(data)
        return body

    def head(self, table: Table, branch: str = "main") -> tuple[BranchRef | None, Manifest]:
        ref, version = table.checkout(branch)
        return ref, table.committed(version)

    def commit(self, table: Table, branch: str = "main", message: str = "edit", **content: Any) -> Manifest:
        """Commit ``content`` (manifest fields: ``tensors``, ``info``) on ``branch``, after its head."""
        ref, base = self.head(table, branch)
        return table.commit(base, replace(base, **content), ref, message)

    def tensor(self, table: Table, values: list[int], old: TensorState | None = None) -> TensorState:
        """Tensor ``x`` (int64 scalars) with ``values`` appended to ``old``, written into a new segment."""
        spec = parse_tensor_spec("x", "generic", "int64")
        writer = table.writer(table.chunk_cache(), zarr_compressors)
        buffer = SampleBuffer()
        buffer.add_block(np.asarray(values, dtype=np.int64))
        fragment = buffer.write(writer.new_slot(spec), ndim=0, dtype="int64", prefer_indexed=False)
        writer.let_go()
        assert fragment is not None
        if old is None:
            return TensorState(spec, {}, 0, (fragment,), uuid.uuid4().hex)
        return replace(old, fragments=(*old.fragments, fragment))

    # -- a new dataset ---------------------------------------------------------------------------
    def test_create_stores_version_0_main_and_the_marker(self) -> None:
        """A new dataset is version 0 (no parent), a ``main`` branch starting there, and a root marker
        naming the dataset's id: all read back raw."""
        table, backend = self.new_table()
        root = self.raw_json(backend, "zarr.json")
        first = self.raw_json(backend, _version_key(0))
        main = self.raw_json(backend, "refs/branches/main.json")
        assert root["attributes"]["lakecompute"]["dataset_id"] == first["dataset_id"]
        assert (first["version"], first["parent"], main["start"]) == (0, None, 0)
        assert len(main["line"]) == 32
        assert table.is_dataset()
        assert table.branches() == ["main"]
        assert table.checkout("main")[1] == 0

    # -- commits ---------------------------------------------------------------------------------
    def test_commit_stores_the_manifest_then_moves_the_branch(self) -> None:
        """A commit stores the next manifest (its parent, message and branch read back raw) and moves
        the branch by one small file naming the new version."""
        table, backend = self.new_table()
        committed = self.commit(table, message="first edit", info={"source": "test"})
        body = self.raw_json(backend, _version_key(1))
        main = self.raw_json(backend, "refs/branches/main.json")
        move = self.raw_get(backend, f"refs/lines/{main['line']}/{0:010d}.json")
        assert committed.version == 1
        assert (body["version"], body["parent"], body["message"], body["branch"]) == (
            1,
            0,
            "first edit",
            "main",
        )
        assert move == b"0000000001"
        assert table.checkout("main")[1] == 1
        assert table.committed(1).info == {"source": "test"}

    def test_a_manifest_stored_raw_is_what_the_table_reads(self) -> None:
        """The table reads what is stored, not what it remembers: a manifest rewritten raw (another
        message, the same content) reads with the new message."""
        table, backend = self.new_table()
        self.commit(table, message="as committed")
        body = self.raw_json(backend, _version_key(1))
        body["message"] = "as stored"
        self.raw_set(backend, _version_key(1), json.dumps(body).encode())
        assert table.manifest(1).message == "as stored"
        assert [e["message"] for e in table.log(1)] == ["create", "as stored"]

    def test_racing_writers_on_one_branch_exactly_one_wins(self) -> None:
        """Eight writers commit after the same head: one wins, seven get `CommitConflictError`, and only
        the winner's manifest is stored."""
        table, backend = self.new_table()
        ref, base = self.head(table)
        start = threading.Barrier(8)
        outcome: dict[int, object] = {}

        def race(i: int) -> None:
            start.wait()
            try:
                outcome[i] = table.commit(base, replace(base, info={"writer": i}), ref, f"writer {i}")
            except CommitConflictError as exc:
                outcome[i] = exc

        threads = [start_thread(f"test-race-{i}", race, i) for i in range(8)]
        for t in threads:
            t.join()
        won = [m for m in outcome.values() if isinstance(m, Manifest)]
        assert len(won) == 1
        assert sum(isinstance(e, CommitConflictError) for e in outcome.values()) == 7
        stored = [k for k in self.raw_keys(backend, "versions") if k.endswith(".json")]
        assert stored == [_version_key(0), _version_key(won[0].version)]
        assert table.committed(table.checkout("main")[1]).info == won[0].info

    def test_racing_writers_on_branches_take_distinct_numbers(self) -> None:
        """Six writers commit at once, each on its own branch: all commit, each under a version number
        of its own, and each branch moves to its writer's version."""
        table, backend = self.new_table()
        for i in range(6):
            table.create_branch(f"b{i}", 0, "main")
        start = threading.Barrier(6)
        done: dict[str, int] = {}

        def write(i: int) -> None:
            start.wait()
            done[f"b{i}"] = self.commit(table, f"b{i}", message=f"on b{i}").version

        threads = [start_thread(f"test-write-{i}", write, i) for i in range(6)]
        for t in threads:
            t.join()
        assert sorted(done.values()) == list(range(1, 7))
        stored = [k for k in self.raw_keys(backend, "versions") if k.endswith(".json")]
        assert stored == [_version_key(v) for v in range(7)]
        for name, version in done.items():
            assert table.checkout(name)[1] == version
            assert self.raw_json(backend, _version_key(version))["branch"] == name

    def test_a_stale_or_orphaned_commit_is_refused(self) -> None:
        """A commit after a head that moved is a conflict; one on a branch deleted meanwhile is refused
        (`RefNotFoundError`), and a commit through a stale ref is on no branch."""
        table, _ = self.new_table()
        ref, base = self.head(table)
        self.commit(table)
        with pytest.raises(CommitConflictError) as conflict:
            table.commit(base, base, ref, "late")
        assert (conflict.value.expected, conflict.value.found) == (0, 1)
        branch = table.create_branch("gone", 1, "main")
        table.delete_branch("gone")
        with pytest.raises(RefNotFoundError):
            table.commit(table.committed(1), table.committed(1), branch, "orphan")
        assert table.branches() == ["main"]

    # -- refs ------------------------------------------------------------------------------------
    def test_branches_and_tags_are_small_refs(self) -> None:
        """Branches and tags are one small file each, read back raw; names are exclusive across both;
        deleting removes the file."""
        table, backend = self.new_table()
        self.commit(table)
        branch = table.create_branch("dev", 1, "main")
        table.create_tag("v1", 1)
        dev = self.raw_json(backend, "refs/branches/dev.json")
        assert (dev["line"], dev["start"], dev["from"]) == (branch.line, 1, "main")
        assert self.raw_json(backend, "refs/tags/v1.json")["version"] == 1
        for make in (lambda: table.create_branch("v1", 1, None), lambda: table.create_tag("dev", 1)):
            with pytest.raises(RefExistsError):
                make()
        with pytest.raises(DatasetNotFoundError):
            table.create_tag("v9", 9)
        table.delete_tag("v1")
        table.delete_branch("dev")
        assert self.raw_get(backend, "refs/tags/v1.json") is None
        assert self.raw_get(backend, "refs/branches/dev.json") is None
        assert (table.branches(), table.tags()) == (["main"], {})

    def test_refs_stored_raw_are_read(self) -> None:
        """A tag and a branch written raw, in the stored format, are what the table lists and resolves."""
        table, backend = self.new_table()
        self.commit(table)
        self.raw_set(backend, "refs/tags/by-hand.json", b'{"version": 1, "created": 0}')
        line = uuid.uuid4().hex
        self.raw_set(backend, "refs/branches/side.json", json.dumps({"line": line, "start": 0}).encode())
        assert table.tags() == {"by-hand": 1}
        assert table.resolve("by-hand") == 1
        assert table.branches() == ["main", "side"]
        assert table.checkout("side") == (BranchRef("side", line, 0), 0)
        committed = self.commit(table, "side", message="on side")
        assert (
            self.raw_get(backend, f"refs/lines/{line}/{0:010d}.json")
            == str(committed.version).zfill(10).encode()
        )

    # -- history, diff, merge --------------------------------------------------------------------
    def test_log_follows_the_parents_stored(self) -> None:
        """The log of a branch's head lists every version its stored parents reach, oldest first, with
        the branches at each; another branch's versions are not in it."""
        table, backend = self.new_table()
        self.commit(table, message="m1")
        table.create_branch("side", 1, "main")
        self.commit(table, "side", message="s1")
        self.commit(table, message="m2")
        log = table.log(table.checkout("main")[1])
        assert [e["message"] for e in log] == ["create", "m1", "m2"]
        for entry in log[1:]:
            assert self.raw_json(backend, _version_key(entry["version"]))["parent"] == entry["parents"][0]
        assert log[-1]["branches"] == ["main"]
        assert [e["message"] for e in table.log(None)] == ["create", "m1", "s1", "m2"]

    def test_diff_names_the_rows_a_commit_appended(self) -> None:
        """A diff of two versions, from their manifests: the rows appended to a tensor."""
        table, backend = self.new_table()
        x = self.tensor(table, [1, 2, 3])
        first = self.commit(table, tensors={"x": x})
        second = self.commit(table, tensors={"x": self.tensor(table, [4, 5], x)})
        (seg,) = {f.seg for f in x.fragments}
        assert self.raw_get(backend, f"segments/{seg}/data/c/0") is not None
        diff = table.diff(first, second)
        assert diff.tensors["x"].appended == (3, 5)
        assert (diff.tensors["x"].replaced, diff.tensors["x"].removed) == ((), None)

    def test_merge_combines_rows_both_sides_appended(self) -> None:
        """Rows appended on two branches merge into one version with two parents (this side's rows
        first), stored with both parents."""
        table, backend = self.new_table()
        x = self.tensor(table, [1, 2])
        self.commit(table, tensors={"x": x})
        table.create_branch("side", 1, "main")
        theirs = self.commit(table, "side", tensors={"x": self.tensor(table, [30], x)})
        ref, ours = self.head(table)
        ours = table.commit(ours, replace(ours, tensors={"x": self.tensor(table, [20], x)}), ref, "main")
        content, origin = table.merge(ours, theirs, "side", None)
        merged = table.commit(ours, content, ref, "merge side", origin, merged=(theirs,))
        assert merged.tensors["x"].length == 4
        body = self.raw_json(backend, _version_key(merged.version))
        assert (body["parent"], body["parents"]) == (ours.version, [ours.version, theirs.version])
        assert origin["op"] == "merge"
        assert table.diff(ours, merged).tensors["x"].appended == (3, 4)

    # -- vacuum ----------------------------------------------------------------------------------
    def test_vacuum_removes_what_no_version_needs(self) -> None:
        """Vacuum removes a segment nothing names (written raw, old) and the versions of a deleted
        branch, and keeps the data and versions a branch reaches."""
        table, backend = self.new_table()
        x = self.tensor(table, [1, 2, 3])
        self.commit(table, tensors={"x": x})
        table.create_branch("gone", 1, "main")
        dropped = self.commit(table, "gone")
        table.delete_branch("gone")
        stale = f"{int((time.time() - 7200) * 1000):013d}-1-{uuid.uuid4().hex[:8]}"
        self.raw_set(backend, f"segments/{stale}/data/c/0", b"orphaned bytes")
        removed = table.vacuum(grace_seconds=0, keep_versions=None, progressbar=False, parked=lambda m: ())
        assert removed["versions"] == 1
        assert removed["segments"] >= 1
        assert self.raw_keys(backend, f"segments/{stale}") == []
        assert self.raw_get(backend, _version_key(dropped.version)) is None
        (seg,) = {f.seg for f in x.fragments}
        assert self.raw_get(backend, f"segments/{seg}/data/c/0") is not None
        assert table.committed(1).tensors["x"].length == 3

    # -- damaged metadata ------------------------------------------------------------------------
    @pytest.mark.parametrize(
        "key",
        [
            _version_key(1),
            "refs/branches/main.json",
            "refs/tags/t.json",
        ],
    )
    def test_damaged_metadata_is_corruption(self, key: str) -> None:
        """A manifest, a branch ref or a tag damaged raw is `DatasetCorruptError` naming the file, never
        another error or a wrong answer."""
        table, backend = self.new_table()
        self.commit(table)
        table.create_tag("t", 1)
        self.raw_set(backend, key, b'{"not": "what lakecompute wrote"')
        reads: dict[str, Callable[[], object]] = {
            _version_key(1): lambda: table.manifest(1),
            "refs/branches/main.json": lambda: table.checkout("main"),
            "refs/tags/t.json": lambda: table.resolve("t"),
        }
        with pytest.raises(DatasetCorruptError) as err:
            reads[key]()
        assert err.value.file == key

    def test_a_damaged_move_or_a_ref_to_nothing_is_corruption(self) -> None:
        """A branch's move naming no stored version, or a tag naming one, is `DatasetCorruptError`."""
        table, backend = self.new_table()
        self.commit(table)
        line = self.raw_json(backend, "refs/branches/main.json")["line"]
        self.raw_set(backend, f"refs/lines/{line}/{1:010d}.json", b"0000000009")
        self.raw_set(backend, f"refs/lines/{line}/HEAD", b"garbage")
        with pytest.raises(DatasetCorruptError):
            table.checkout("main")
        self.raw_set(backend, "refs/tags/far.json", b'{"version": 7, "created": 0}')
        with pytest.raises(DatasetCorruptError):
            table.resolve("far")

    def test_a_torn_hint_is_harmless(self) -> None:
        """The newest-version hint is only a hint: torn or stale, the table still finds the newest."""
        table, backend = self.new_table()
        self.commit(table)
        self.commit(table)
        for hint in (b"\x00garbage", b"0000000000"):
            self.raw_set(backend, "versions/LATEST", hint)
            assert table.latest() == 2
            assert table.checkout("main")[1] == 2
