"""The log of a dataset (``ds.log()``): one entry per version, read from the versions' headers.

A log prints, per version, its place in the history, its message and samples per tensor, the refs at
it, and what produced it; every one of those is in the version's header (`lakecompute.storage.
read_header`), so the log reads no tensor's fragments, however long the history is. With
``evals=True`` the versions an eval committed at its checkpoints fold into the entry of the version
that finished it (or of its last checkpoint, while it is unfinished).
"""

from __future__ import annotations

from typing import Any

from lakecompute.errors import DatasetCorruptError
from lakecompute.storage import Backend
from lakecompute.versioned._header import VersionHeader
from lakecompute.versioned._history import heads, walk
from lakecompute.versioned._keys import version_key
from lakecompute.versioned._refs import DEFAULT_BRANCH, list_tags

__all__ = ["entry", "log_entries"]


def log_entries(backend: Backend, version: int | None, url: str, evals: bool = False) -> list[dict[str, Any]]:
    """The log of version ``version`` (None: of every branch and tag): it and every version it descends
    from, oldest first, with parents, the branch each was committed on, the branches and tags at each,
    and what produced it; ``evals``: an eval's checkpoints folded into one entry (`fold_evals`).

    Raises:
        DatasetCorruptError: a manifest's history fields, a record's summary or a ref is damaged.
    """
    at_heads: dict[int, list[str]] = {}
    for name, head in heads(backend).items():
        at_heads.setdefault(head, []).append(name)
    tagged: dict[int, list[str]] = {}
    for name, tag in list_tags(backend).items():
        tagged.setdefault(tag.version, []).append(name)
    roots = [version] if version is not None else list(at_heads) + list(tagged)
    headers = sorted(walk(backend, roots).items())
    entries = [entry(h, url, at_heads.get(v, []), tagged.get(v, [])) for v, h in headers]
    return fold_evals(entries) if evals else entries


def entry(h: VersionHeader, url: str, branches: list[str], tags: list[str]) -> dict[str, Any]:
    """One version's log entry (see `lakecompute.Dataset.log`).

    Raises:
        DatasetCorruptError: the summary of an eval record it committed is malformed.
    """
    out: dict[str, Any] = {
        "version": h.version,
        "time": h.time,
        "message": h.message,
        "samples": dict(h.samples),
        "parents": list(h.parents),
        "branch": h.branch or DEFAULT_BRANCH,
        "branches": sorted(branches),
        "tags": sorted(tags),
    }
    for fingerprint, record in h.records.items():
        out["eval"] = _summary(fingerprint, record, url, h.version)
    if h.origin:
        out["origin"] = dict(h.origin)
        if h.origin.get("op") == "eval":
            lineage = {k: h.origin.get(k) for k in ("functions", "code", "inputs")}
            out["eval"] = {
                **out.get("eval", {"label": " → ".join(h.origin.get("functions") or [])}),
                **lineage,
            }
    if "eval" in out and h.records:
        out["eval"]["fingerprint"] = next(reversed(h.records))
    return out


def _summary(fingerprint: str, record: dict[str, Any], url: str, version: int) -> dict[str, Any]:
    """What the log shows of an eval record: its functions, status, inputs done and seed, checked."""
    status, done, label, seed = (record.get(k) for k in ("status", "done", "label", "seed"))
    if (
        status not in ("running", "done")
        or not isinstance(done, int)
        or isinstance(done, bool)
        or done < 0
        or not isinstance(label, str)
        or not (seed is None or (isinstance(seed, int) and not isinstance(seed, bool)))
    ):
        raise DatasetCorruptError(
            url,
            version_key(version),
            f"eval record {fingerprint!r}: expected a status, inputs done, label and seed, got "
            f"{status!r:.20}, {done!r:.20}, {label!r:.40}, {seed!r:.30}",
        )
    return {"label": label, "status": status, "done": done, "seed": seed}


def fold_evals(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The log with each eval's checkpoints folded: consecutive versions (each the parent of the next)
    that an eval with one fingerprint committed, the earlier ones at checkpoints, become the entry of the
    last of them, with ``eval["checkpoints"]`` listing the versions folded into it (and their branches
    and tags); its ``parents`` are the first one's."""
    out: list[dict[str, Any]] = []
    for item in entries:
        previous = out[-1] if out else None
        record = item.get("eval", {})
        if (
            previous is not None
            and record.get("fingerprint") is not None
            and previous.get("eval", {}).get("fingerprint") == record["fingerprint"]
            and previous["eval"].get("status") == "running"
            and item["parents"][:1] == [previous["version"]]
        ):
            folded = [*previous["eval"].get("checkpoints", []), previous["version"]]
            item = {
                **item,
                "parents": previous["parents"],
                "branches": sorted({*previous["branches"], *item["branches"]}),
                "tags": sorted({*previous["tags"], *item["tags"]}),
                "eval": {**record, "checkpoints": folded},
            }
            out[-1] = item
        else:
            out.append(item)
    return out
