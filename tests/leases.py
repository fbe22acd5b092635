"""Helpers for tests of writer leases: let time pass for the leases stored in a dataset."""

from __future__ import annotations

import json
from typing import Any

from lakecompute.storage import LEASES, open_backend


def expire_leases(url: str, storage_options: dict[str, Any] | None = None) -> int:
    """Rewrite every lease file of the dataset at ``url`` as expired (what waiting out `LEASE_SECONDS`
    after its writer stopped renewing would do); returns how many there were."""
    backend = open_backend(url, storage_options)
    count = 0
    for name in backend.list(LEASES):
        if not name.endswith(".json") or name.startswith("."):
            continue
        raw = backend.read(f"{LEASES}/{name}")
        if raw is None:
            continue
        record = json.loads(raw)
        record["expires"] = 0.0
        backend.write(f"{LEASES}/{name}", json.dumps(record).encode())
        count += 1
    return count


def lease_files(url: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The lease records stored in the dataset at ``url``."""
    backend = open_backend(url, storage_options)
    out = []
    for name in backend.list(LEASES):
        raw = (
            backend.read(f"{LEASES}/{name}") if name.endswith(".json") and not name.startswith(".") else None
        )
        if raw is not None:
            out.append(json.loads(raw))
    return out
