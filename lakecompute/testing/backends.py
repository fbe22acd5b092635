"""A conformance suite every storage backend runs: ``BackendTests`` (as zarr's ``StoreTests`` for stores,
and `lakecompute.testing.schedulers.SchedulerTests` for schedulers).

Subclass it in a test module and implement `BackendTests.make_backend`, which returns a new, empty
backend for each test::

    class TestLocal(BackendTests):
        def make_backend(self) -> Backend:
            return open_backend(str(self.tmp_path / "ds"))

The suite checks the contract the dataset layer relies on: reads of what was written, atomic replace,
exclusive create (exactly one winner among racing writers), listing one level, deleting keys and trees,
keys that would leave the dataset refused, the zarr store seeing the same place, and a backend reopened
from its `spec` (what other processes do) seeing the same data.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import zarr

from lakecompute.errors import InvalidArgumentError
from lakecompute.storage import Backend, open_backend
from lakecompute.threads import start_thread

__all__ = ["BackendTests"]


class BackendTests:
    """Tests every storage backend must pass. Subclass it and implement `make_backend`."""

    tmp_path: Any = None
    """The test's temporary folder (set by the autouse fixture below), for backends on a local disk."""

    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path: Any) -> None:
        self.tmp_path = tmp_path

    def make_backend(self) -> Backend:
        """A new, empty backend; override."""
        raise NotImplementedError

    def test_write_then_read_returns_the_bytes(self) -> None:
        """What is written under a key reads back whole; writing again replaces it."""
        b = self.make_backend()
        b.write("versions/00000001.json", b'{"a": 1}')
        assert b.read("versions/00000001.json") == b'{"a": 1}'
        b.write("versions/00000001.json", b"second")
        assert b.read("versions/00000001.json") == b"second"

    def test_read_of_a_missing_key_is_none(self) -> None:
        """A key nothing was written under reads as None and does not exist."""
        b = self.make_backend()
        assert b.read("versions/nothing.json") is None
        assert not b.exists("versions/nothing.json")

    def test_exists_after_write_and_not_after_delete(self) -> None:
        """exists() follows write() and delete(); deleting a missing key is not an error."""
        b = self.make_backend()
        b.write("leases/w1.json", b"{}")
        assert b.exists("leases/w1.json")
        b.delete("leases/w1.json")
        assert not b.exists("leases/w1.json")
        assert b.read("leases/w1.json") is None
        b.delete("leases/w1.json")

    def test_create_exclusive_wins_once(self) -> None:
        """create_exclusive() creates a key that is not there, and refuses (keeping it) when it is."""
        b = self.make_backend()
        assert b.create_exclusive("versions/00000002.json", b"first") is True
        assert b.create_exclusive("versions/00000002.json", b"second") is False
        assert b.read("versions/00000002.json") == b"first"

    def test_replace_writes_only_over_a_key_that_is_there(self) -> None:
        """replace() stores over a key that holds bytes, and writes nothing (no key, no folder) where
        there is none: a renewal of a file deleted with everything around it must not bring it back."""
        b = self.make_backend()
        assert b.replace("leases/a.json", b"one") is False
        assert b.read("leases/a.json") is None
        assert b.list("") == []
        b.write("leases/b.json", b"first")
        assert b.replace("leases/b.json", b"second") is True
        assert b.read("leases/b.json") == b"second"
        assert b.list("leases") == ["b.json"]  # no temporary name left behind
        b.delete_tree("")
        assert b.replace("leases/b.json", b"third") is False
        assert b.list("") == []

    def test_remove_if_empty_removes_only_an_empty_folder(self) -> None:
        """remove_if_empty() takes away a folder holding nothing (the dataset's own with ''), never one
        that holds a key, nor anything in it."""
        b = self.make_backend()
        b.write("segments/s1/zarr.json", b"{}")
        b.write("notes/a.txt", b"mine")
        b.delete("segments/s1/zarr.json")
        b.remove_if_empty("segments/s1")
        b.remove_if_empty("segments")
        b.remove_if_empty("notes")
        b.remove_if_empty("")
        assert b.list("") == ["notes"]
        assert b.read("notes/a.txt") == b"mine"
        b.delete("notes/a.txt")
        b.remove_if_empty("notes")
        b.remove_if_empty("")
        assert b.list("") == []

    def test_create_exclusive_race_has_exactly_one_winner(self) -> None:
        """Eight writers racing for one key: exactly one wins, and the key holds the winner's bytes."""
        b = self.make_backend()
        start = threading.Barrier(8)
        won: list[int] = []

        def race(i: int) -> None:
            start.wait()
            if b.create_exclusive("versions/00000003.json", f"writer {i}".encode()):
                won.append(i)

        threads = [start_thread(f"test-race-{i}", race, i) for i in range(8)]
        for t in threads:
            t.join(timeout=60)
        assert len(won) == 1
        assert b.read("versions/00000003.json") == f"writer {won[0]}".encode()

    def test_list_names_one_level(self) -> None:
        """list(prefix) names what is directly under the folder, files and folders, not deeper."""
        b = self.make_backend()
        b.write("versions/00000001.json", b"1")
        b.write("versions/00000002.json", b"2")
        b.write("segments/s1/data/zarr.json", b"{}")
        b.write("segments/s2/index/zarr.json", b"{}")
        assert sorted(b.list("versions")) == ["00000001.json", "00000002.json"]
        assert sorted(b.list("segments")) == ["s1", "s2"]
        assert b.list("tensors") == []

    def test_delete_tree_removes_everything_below(self) -> None:
        """delete_tree(prefix) removes the folder's keys at every depth and nothing beside it."""
        b = self.make_backend()
        b.write("segments/s1/data/c/0", b"x")
        b.write("segments/s1/index/c/0", b"y")
        b.write("segments/s2/data/c/0", b"z")
        b.delete_tree("segments/s1")
        assert not b.exists("segments/s1/data/c/0")
        assert not b.exists("segments/s1/index/c/0")
        assert b.read("segments/s2/data/c/0") == b"z"
        assert b.list("segments") == ["s2"]

    @pytest.mark.parametrize("key", ["../outside", "versions/../../x", "/etc/passwd", "a//b", "./a"])
    def test_keys_that_leave_the_dataset_are_refused(self, key: str) -> None:
        """A key that is not a path of plain names inside the dataset is refused before any I/O."""
        b = self.make_backend()
        calls = (
            lambda: b.read(key),
            lambda: b.write(key, b"x"),
            lambda: b.exists(key),
            lambda: b.create_exclusive(key, b"x"),
            lambda: b.delete(key),
            lambda: b.delete_tree(key),
        )
        for call in calls:
            with pytest.raises(InvalidArgumentError, match="plain names inside the dataset"):
                call()

    def test_write_hint_reads_back(self) -> None:
        """write_hint() stores a value that reads back (it may be torn under a race, never otherwise)."""
        b = self.make_backend()
        b.write_hint("versions/LATEST", b"0000000007")
        assert b.read("versions/LATEST") == b"0000000007"

    def test_zarr_store_sees_the_same_place(self) -> None:
        """An array written through zarr_store() is stored under the backend's keys, and reads back."""
        b = self.make_backend()
        arr = zarr.create_array(b.zarr_store(), name="tensors/x", shape=(4,), chunks=(2,), dtype="int32")
        arr[:] = np.arange(4, dtype=np.int32)
        assert b.exists("tensors/x/zarr.json")
        assert "x" in b.list("tensors")
        again = zarr.open_array(b.zarr_store(), path="tensors/x", mode="r")
        assert np.asarray(again[:]).tolist() == [0, 1, 2, 3]

    def test_reopened_from_its_spec_sees_the_same_data(self) -> None:
        """A backend opened again from spec (as another process does) reads what this one wrote."""
        b = self.make_backend()
        b.write("versions/00000001.json", b"shared")
        other = open_backend(b.spec.url, b.spec.storage_options)
        assert other.read("versions/00000001.json") == b"shared"
        assert type(other) is type(b)

    def test_local_path_is_none_or_the_file(self) -> None:
        """local_path() is None, or a path on disk that holds the key's bytes."""
        b = self.make_backend()
        b.write("versions/00000001.json", b"on disk")
        path = b.local_path("versions/00000001.json")
        if path is not None:
            with open(path, "rb") as fh:
                assert fh.read() == b"on disk"
