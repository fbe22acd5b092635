"""The versioned table passes `lakecompute.testing.versioned.TableTests` on every backend: a local folder,
memory, and S3 (a local moto server). The raw hooks read and write keys without lakecompute's backend
code: plain files, zarr's own memory store, and boto3 (another S3 client than the backend's obstore)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from lakecompute.storage import Backend, open_backend
from lakecompute.testing.versioned import TableTests


class TestLocalTable(TableTests):
    def make_backend(self) -> Backend:
        return open_backend(str(self.tmp_path / "ds"))

    def _path(self, key: str) -> Path:
        return Path(self.tmp_path) / "ds" / key

    def raw_get(self, backend: Backend, key: str) -> bytes | None:
        path = self._path(key)
        return path.read_bytes() if path.is_file() else None

    def raw_set(self, backend: Backend, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def raw_keys(self, backend: Backend, prefix: str) -> list[str]:
        root = Path(self.tmp_path) / "ds"
        return sorted(p.relative_to(root).as_posix() for p in self._path(prefix).rglob("*") if p.is_file())


async def _listed(store: Any, prefix: str) -> list[str]:
    return [key async for key in store.list_prefix(prefix)]


class TestMemoryTable(TableTests):
    """Raw access through zarr's own `MemoryStore` on the same dict (its get, set and list)."""

    def make_backend(self) -> Backend:
        return open_backend(f"mem://table-tests-{uuid.uuid4().hex}")

    def raw_get(self, backend: Backend, key: str) -> bytes | None:
        found = sync(backend.zarr_store().get(key, prototype=default_buffer_prototype()))
        return None if found is None else found.to_bytes()

    def raw_set(self, backend: Backend, key: str, data: bytes) -> None:
        sync(backend.zarr_store().set(key, default_buffer_prototype().buffer.from_bytes(data)))

    def raw_keys(self, backend: Backend, prefix: str) -> list[str]:
        return sorted(sync(_listed(backend.zarr_store(), prefix.rstrip("/") + "/")))


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    """A moto S3 server for this module."""
    pytest.importorskip("obstore")
    pytest.importorskip("moto")
    from tests.s3.moto_server import start_moto_server

    server = start_moto_server()
    yield server
    server.stop()


class TestS3Table(TableTests):
    """Raw access through boto3, not the backend's obstore client."""

    @pytest.fixture(autouse=True)
    def _server(self, moto: Any) -> None:
        boto3 = pytest.importorskip("boto3")
        options = moto.storage_options()
        self.server = moto
        self.client = boto3.client(
            "s3",
            endpoint_url=options["endpoint_url"],
            aws_access_key_id=options["key"],
            aws_secret_access_key=options["secret"],
            region_name=options["region"],
        )

    def make_backend(self) -> Backend:
        self.bucket = self.server.create_bucket()
        return open_backend(f"s3://{self.bucket}/ds", self.server.storage_options())

    def raw_get(self, backend: Backend, key: str) -> bytes | None:
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=f"ds/{key}")["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        return body

    def raw_set(self, backend: Backend, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"ds/{key}", Body=data)

    def raw_keys(self, backend: Backend, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"ds/{prefix.rstrip('/')}/"
        )
        return sorted(item["Key"][len("ds/") :] for page in pages for item in page.get("Contents", []))
