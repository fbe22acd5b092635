"""How a manifest keeps the records of the evals that wrote into it: whole once, by reference after.

A record is kept whole only in the manifest of the version that committed it. Every later manifest
carries a *reference* instead (``{"at": version, "status": ..., "done": ...}``, a few dozen bytes), so
every eval is remembered however many came after it, and a record with thousands of failures does not
make every later manifest large. What a record says (its typed form, `lakecompute.datasets.EvalRecord`)
is the dataset layer's; here records are JSON objects keyed by the eval's fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_reference", "next_evals"]


def as_reference(obj: dict[str, Any]) -> dict[str, Any]:
    """What a later manifest keeps of a record: where it is kept whole, its status and progress."""
    if "at" in obj:
        return obj
    return {"at": obj.get("version", 0), "status": obj.get("status"), "done": obj.get("done", 0)}


def _unfinished_of(obj: Any, job: str) -> bool:
    return isinstance(obj, dict) and obj.get("status") == "running" and obj.get("job") == job


def next_evals(
    evals: Mapping[str, Any], record: Mapping[str, Mapping[str, Any]] | None, version: int
) -> dict[str, Any]:
    """The eval records of the next version: every earlier record as a reference to the version that
    keeps it whole, and ``record`` (one fingerprint -> its JSON, stamped with ``version``) whole. A
    record of the same eval is replaced, and so is an unfinished record that ``record`` continues (same
    ``job``, older code)."""
    new = next(iter(record.items()), None) if record else None
    out = {}
    for fp, obj in evals.items():
        if new is not None and (fp == new[0] or (new[1].get("job") and _unfinished_of(obj, new[1]["job"]))):
            continue
        out[fp] = as_reference(obj)
    if new is not None:
        stamped = dict(new[1])
        stamped["version"] = version
        out[new[0]] = stamped
    return out
