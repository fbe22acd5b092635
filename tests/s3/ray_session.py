"""A local Ray instance for the test modules that use it (Ray takes ~10 s to start here).

Module-scoped rather than session-scoped on purpose: a Ray driver keeps gRPC threads in the test
process, and later tests fork worker processes (the processed scheduler's default on Linux), which
such threads make fragile. Two starts (tests/s3 and tests/schedulers) cost ~20 s in all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["RAY_INIT_OPTIONS", "ray_session"]

REPO_ROOT = Path(__file__).resolve().parents[2]

RAY_INIT_OPTIONS: dict[str, Any] = {
    # Two CPUs, like the CI machine: the scheduler runs at most num_workers tasks at once anyway.
    "num_cpus": 2,
    "include_dashboard": False,
    # Results and task functions are small; a small object store keeps /dev/shm use low in CI.
    "object_store_memory": 200 * 1024 * 1024,
    "log_to_driver": False,
    # Workers import the test modules (task functions live there), so they need the repository.
    "runtime_env": {"env_vars": {"PYTHONPATH": str(REPO_ROOT)}},
}


@pytest.fixture(scope="module")
def ray_session() -> Iterator[Any]:
    """Start a local Ray for the module (unless one is running) and shut it down after it."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        # An instance of our own, even when another Ray cluster runs on the machine (without it, ray.init
        # joins that cluster, which refuses num_cpus).
        ray.init(address="local", **RAY_INIT_OPTIONS)
    yield ray
    if started:
        ray.shutdown()
