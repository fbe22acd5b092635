"""A version's place in the history: the fields of a manifest other than its content.

Every manifest names its version, its parents, the branch and line it was committed on, what produced it
and the dataset it belongs to; `header_fields` checks them, for whole manifests (`Manifest`) and for the
summary the log reads (`VersionHeader`) alike.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.versioned._refs import LEGACY_LINE, parse_ref_name
from lakecompute.versioned._schema import (
    InvalidField,
    check_int,
    check_optional_int,
    check_str,
    check_str_dict,
)

__all__ = ["LINE_ID", "Placed", "Stored", "VersionHeader", "header_fields", "load_json"]

#: Line ids and tensor ids: 32 hex digits (uuid4().hex).
LINE_ID = re.compile(r"[0-9a-f]{32}")
# A dataset id: 32 lowercase hex digits (a random uuid4), or "legacy-" and 32 for a dataset made before
# ids (see `dataset_id_of`).
_DATASET_ID = re.compile(r"(?:legacy-)?[0-9a-f]{32}")


class Placed:
    """What a version's place in the history says, for `Manifest` and `VersionHeader` alike."""

    __slots__ = ()
    version: int
    parent: int | None
    line: str | None
    merged: tuple[int, ...]
    reach: dict[str, int]

    @property
    def parents(self) -> tuple[int, ...]:
        """Every parent: the first is the branch's own previous head, the others were merged in."""
        return () if self.parent is None else (self.parent, *self.merged)

    def reach_of(self) -> dict[str, int]:
        """`reach`, or what it is for a version committed before refs: the versions before it."""
        return self.reach if self.reach else {self.line or LEGACY_LINE: self.version}

    def descends_from(self, other: Placed) -> bool:
        """Whether ``other`` is this version or one of its ancestors (from the manifests alone)."""
        return self.reach_of().get(other.line or LEGACY_LINE, -1) >= other.version


@dataclass(frozen=True, slots=True)
class Stored:
    """How a version is stored: whole, or as the change from its parent (see
    ``lakecompute.versioned._stored``), and what the next commit's choice between the two starts from.

    Attributes:
        depth: changes since the nearest version stored whole (0: this one is).
        changes: bytes of those changes, this one's included.
        whole: bytes that nearest whole version takes.
        plain: bytes its content takes uncompressed.
    """

    depth: int
    changes: int
    whole: int
    plain: int


@dataclass(frozen=True, slots=True)
class VersionHeader(Placed):
    """What a version's manifest says without its tensors' fragments: its place in the history, and the
    summary ``ds.log()`` prints (`lakecompute.versioned._reads.read_header`).

    Attributes:
        version, parent, time, message, branch, line, merged, reach, origin, dataset_id: as in
            `Manifest`.
        digest: the content digest recorded (`Manifest.digest`); ``""`` for a version committed before
            digests.
        samples: samples per tensor, in order.
        records: the eval records this version committed, by fingerprint: their ``status``, ``done``,
            ``label`` and ``seed`` (unchecked JSON values; the dataset layer reads them).
        base: the version whose content this one's manifest changes (None: stored whole).
    """

    version: int
    parent: int | None
    time: float
    message: str
    branch: str | None
    line: str | None
    merged: tuple[int, ...]
    reach: dict[str, int]
    origin: dict[str, Any]
    dataset_id: str
    digest: str
    samples: dict[str, int]
    records: dict[str, dict[str, Any]]
    base: int | None = None


def header_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The checked history fields of a stored manifest, as keyword arguments of `Manifest` (and of
    `VersionHeader`).

    Raises:
        InvalidField: a value breaks the schema.
    """
    version = check_int(body.get("version"), "version")
    parent = check_optional_int(body.get("parent"), "parent", hi=max(0, version - 1))
    when = body.get("time", 0.0)
    if not isinstance(when, (int, float)) or isinstance(when, bool) or not math.isfinite(when):
        raise InvalidField("time", f"expected a number of seconds, got {when!r:.40}")
    branch, line = _branch_of(body)
    return {
        "version": version,
        "parent": parent,
        "time": float(when),
        "message": check_str(body.get("message", ""), "message"),
        "branch": branch,
        "line": line,
        "merged": _merged(body.get("parents"), version, parent),
        "reach": _reach(body.get("reach"), version, line),
        "origin": check_str_dict(body.get("origin") or {}, "origin"),
        "dataset_id": _dataset_id(body.get("dataset_id", "")),
    }


def _branch_of(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """The ``branch`` and ``line`` fields: both or neither."""
    branch, line = body.get("branch"), body.get("line")
    if branch is None and line is None:
        return None, None
    try:
        parse_ref_name("branch", branch)
    except (InvalidArgumentError, InvalidTypeError):
        raise InvalidField("branch", f"expected a branch name, got {branch!r:.40}") from None
    if not isinstance(line, str) or not LINE_ID.fullmatch(line):
        raise InvalidField("line", f"expected a line id of 32 hex digits, got {line!r:.40}")
    return branch, line


def _merged(value: object, version: int, parent: int | None) -> tuple[int, ...]:
    """The parents after the first: ``parents`` lists the first (``parent``) and at least one more."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) < 2 or len(value) > 64:
        raise InvalidField("parents", f"expected a list of 2 to 64 versions, got {value!r:.40}")
    parents = [check_int(p, f"parents[{i}]", hi=max(0, version - 1)) for i, p in enumerate(value)]
    if parents[0] != parent or len(set(parents)) != len(parents):
        raise InvalidField(
            "parents", f"expected distinct versions starting with parent {parent}, got {parents}"
        )
    return tuple(parents[1:])


def _reach(value: object, version: int, line: str | None) -> dict[str, int]:
    """Per line, the newest version of it this version descends from: at most this version, and this
    version itself on its own line."""
    if value is None:
        return {}
    reach = check_str_dict(value, "reach")
    for key, at in reach.items():
        if key != LEGACY_LINE and not LINE_ID.fullmatch(key):
            raise InvalidField("reach", f"expected line ids as keys, got {key!r:.40}")
        check_int(at, f"reach.{key}", hi=version)
    if line is not None and reach.get(line) != version:
        raise InvalidField("reach", f"expected version {version} on its own line, got {reach.get(line)!r}")
    return dict(reach)


def _dataset_id(value: object) -> str:
    text = check_str(value, "dataset_id")
    if text and not _DATASET_ID.fullmatch(text):
        raise InvalidField("dataset_id", f"expected 32 hexadecimal digits, got {text!r:.60}")
    return text


def load_json(data: bytes) -> dict[str, Any]:
    """A JSON object from stored bytes (anything else is `InvalidField`)."""
    try:
        body = json.loads(data)
    except RecursionError:
        raise InvalidField("", "the JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise InvalidField("", f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidField("", f"expected a JSON object, got {type(body).__name__}")
    return body
