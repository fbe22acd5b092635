"""Fixtures for the S3 tests: one moto server per session on 127.0.0.1, a fresh bucket per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.s3.moto_server import MotoServer, start_moto_server
from tests.s3.ray_session import ray_session

pytest.importorskip("obstore", reason='the S3 tests need the s3 extra: pip install "lakecompute[s3]"')
pytest.importorskip("moto", reason="the S3 tests need moto[server] (in the dev extra)")

__all__ = ["bucket", "moto_server", "ray_session", "storage_options"]


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """A moto S3 server on a free port of 127.0.0.1, stopped at the end of the session."""
    server = start_moto_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bucket(moto_server: MotoServer) -> str:
    """A new, empty bucket for one test."""
    return moto_server.create_bucket()


@pytest.fixture
def storage_options(moto_server: MotoServer) -> dict[str, Any]:
    """Options that reach the moto server."""
    return moto_server.storage_options()
