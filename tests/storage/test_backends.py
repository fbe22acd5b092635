"""Every storage backend passes `lakecompute.testing.backends.BackendTests`: a local folder, memory, and S3
(a local moto server)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lakecompute.storage import Backend, open_backend
from lakecompute.testing.backends import BackendTests


class TestLocalBackend(BackendTests):
    def make_backend(self) -> Backend:
        return open_backend(str(self.tmp_path / "ds"))

    def test_remove_if_empty_takes_the_folder_and_never_follows_a_link(self) -> None:
        b = self.make_backend()
        outside = self.tmp_path / "outside"
        (outside / "empty").mkdir(parents=True)
        b.write("segments/zarr.json", b"{}")
        (self.tmp_path / "ds" / "linked").symlink_to(outside / "empty")
        b.remove_if_empty("linked")
        assert (outside / "empty").is_dir()
        b.delete("segments/zarr.json")
        b.remove_if_empty("segments")
        assert sorted(p.name for p in (self.tmp_path / "ds").iterdir()) == ["linked"]
        (self.tmp_path / "ds" / "linked").unlink()
        b.remove_if_empty("")
        assert not (self.tmp_path / "ds").exists()


class TestMemoryBackend(BackendTests):
    def make_backend(self) -> Backend:
        return open_backend(f"mem://backend-tests-{uuid.uuid4().hex}")


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    """A moto S3 server for this module."""
    pytest.importorskip("obstore")
    pytest.importorskip("moto")
    from tests.s3.moto_server import start_moto_server

    server = start_moto_server()
    yield server
    server.stop()


class TestS3Backend(BackendTests):
    @pytest.fixture(autouse=True)
    def _server(self, moto: Any) -> None:
        self.server = moto

    def make_backend(self) -> Backend:
        bucket = self.server.create_bucket()
        return open_backend(f"s3://{bucket}/ds", self.server.storage_options())
