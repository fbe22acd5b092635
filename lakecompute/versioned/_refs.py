"""Branches and tags: small refs beside the versions, each changed in one atomic step.

History is a graph of versions (each manifest names its parents); refs say where the lines of work
are. Every change of a ref is the creation or the removal of one small file, so a kill at any instant
leaves each ref as it was or as it became, never in between::

    refs/branches/<name>.json       a branch: {"line": <id>, "start": V, "created": t, "from": <branch>}
    refs/tags/<name>.json           a tag: {"version": V, "created": t} (never changed)
    refs/lines/<id>/<P>.json        a move of the branch whose line is <id>: after version P, it is at V
    refs/lines/<id>/HEAD            a hint: the line's newest known version (readers check it)

A branch's head is found by starting at its ``start`` (or at the hint) and following its moves. A commit
on a branch whose head is P creates the move ``<P>.json`` *exclusively*
(`lakecompute.storage.Backend.create_exclusive`: ``os.link`` on a local disk, a conditional put on S3):
of two writers building on P, exactly one creates it and the other learns that it lost. Writers on
different branches create moves on different lines and never meet. Deleting a branch removes its one
ref file; a branch created again under the same name gets a new line, so nothing of the old one is
followed again.

Datasets written before branches have no refs: their ``main`` is the newest version
(`lakecompute.versioned._versions.latest_version`), each version the child of the one before. The first
change of refs (a commit, a new branch) writes ``refs/branches/main.json`` starting at that newest version
(`ensure_main`); from then on ``main`` moves like any branch.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from lakecompute.errors import DatasetCorruptError, InvalidArgumentError, InvalidTypeError, StorageError
from lakecompute.storage import TEMP_PREFIX, Backend
from lakecompute.versioned._keys import LINES, branch_key, line_hint_key, line_key, move_key, tag_key
from lakecompute.versioned._schema import MAX_OFFSET, InvalidField, check_int

__all__ = [
    "DEFAULT_BRANCH",
    "LEGACY_LINE",
    "BranchRef",
    "TagRef",
    "advance",
    "create_branch",
    "create_tag",
    "ensure_main",
    "is_version_number",
    "last_move",
    "list_branches",
    "list_lines",
    "list_tags",
    "moved_to",
    "new_line_id",
    "parse_ref_name",
    "parse_version_name",
    "read_branch",
    "read_line_hint",
    "read_tag",
    "write_line_hint",
]

RefT = TypeVar("RefT")

#: The branch every dataset starts with (Deep Lake's, git's and lakeFS's name for it).
DEFAULT_BRANCH: Final = "main"
#: The line of the versions committed before a dataset had refs (each the child of the one before).
LEGACY_LINE: Final = "legacy"
#: The longest branch or tag name (the storage key is named after it).
MAX_REF_NAME: Final = 128

_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_LINE: Final = re.compile(r"[0-9a-f]{32}")
_MOVE: Final = re.compile(r"([0-9]{10})\.json")


def parse_ref_name(kind: str, name: object) -> str:
    """Check a branch or tag name: ASCII letters, digits, ``_``, ``-`` and ``.``, not starting with ``-``
    or ``.``, at most 128 characters, and not only digits (``"3"`` would read as version 3).

    Raises:
        InvalidTypeError: ``name`` is not a str.
        InvalidArgumentError: the name breaks a rule (the message says which).
    """
    if not isinstance(name, str):
        raise InvalidTypeError(f"Expected a {kind} name as str. Got {type(name).__name__}: {name!r:.80}.")
    if not _NAME.fullmatch(name) or ".." in name or name.endswith("."):
        raise InvalidArgumentError(
            f"Invalid {kind} name {name!r:.80}: use ASCII letters, digits, '_', '-' and '.' (not empty, no "
            "'/', no '..', not starting with '.' or '-'), e.g. 'experiment' or 'v1.0'."
        )
    if len(name) > MAX_REF_NAME:
        raise InvalidArgumentError(
            f"Invalid {kind} name {name[:20]!r}... ({len(name)} characters): {kind} names are at most "
            f"{MAX_REF_NAME} characters. Choose a shorter name."
        )
    if name.isdigit():
        raise InvalidArgumentError(
            f"Invalid {kind} name {name!r}: a name of digits only would read as version {int(name)}. "
            "Add a letter, e.g. 'v" + name + "'."
        )
    return name


def is_version_number(text: str) -> bool:
    """Whether ``text`` is a version number as users write one: ASCII digits only (superscripts, circled
    digits and the digits of other scripts are digits to `str.isdigit`, but no version number)."""
    return text.isascii() and text.isdigit()


def parse_version_name(spec: object, what: str = "version") -> int | str:
    """A version as users name it, checked: its number (an int, or a str of ASCII digits) or a branch or
    tag name (see `parse_ref_name`); which version a name is is for the refs to say.

    Raises:
        InvalidTypeError: ``spec`` is not an int or a str.
        InvalidArgumentError: a negative number, or text that is neither ASCII digits nor a valid name.
    """
    if isinstance(spec, bool) or not isinstance(spec, (int, str)):
        raise InvalidTypeError(
            f"Expected {what} as a version number, branch or tag name. "
            f"Got {type(spec).__name__}: {spec!r:.80}."
        )
    if isinstance(spec, int):
        if spec < 0:
            raise InvalidArgumentError(f"Expected {what} >= 0. Got {spec}.")
        return spec
    if is_version_number(spec):
        return int(spec)
    if not _NAME.fullmatch(spec) or ".." in spec or spec.endswith(".") or len(spec) > MAX_REF_NAME:
        raise InvalidArgumentError(
            f"Invalid {what} {spec!r:.80}: expected a version number in ASCII digits (0-9), or a branch or "
            "tag name of ASCII letters, digits, '_', '-' and '.', e.g. 3, 'main' or 'v1.0'."
        )
    return spec


def new_line_id() -> str:
    """A fresh line id: a new branch (or a branch created again under an old name) gets its own."""
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class BranchRef:
    """A branch as its ref file describes it.

    Attributes:
        name: the branch's name.
        line: the id its moves are stored under (new for every branch created, even under an old name).
        start: the version it was created at (its head until its first move).
        created: when it was created (seconds since the epoch).
        source: the branch it was created from, if it was created from one.
    """

    name: str
    line: str
    start: int
    created: float = 0.0
    source: str | None = None

    def to_bytes(self) -> bytes:
        body = {"line": self.line, "start": self.start, "created": self.created, "from": self.source}
        return json.dumps(body).encode()


@dataclass(frozen=True, slots=True)
class TagRef:
    """A tag: a name for one version, never moved.

    Attributes:
        name: the tag.
        version: the version it names.
        created: when it was created (seconds since the epoch).
    """

    name: str
    version: int
    created: float = 0.0

    def to_bytes(self) -> bytes:
        return json.dumps({"version": self.version, "created": self.created}).encode()


# -- parsing what storage holds (it may be damaged or hostile) -------------------------------------


def _corrupt(backend: Backend, key: str, exc: InvalidField) -> DatasetCorruptError:
    where = f" (field {exc.field})" if exc.field else ""
    return DatasetCorruptError(
        backend.url,
        key,
        f"{exc.reason}{where}",
        "The ref was changed outside lakecompute: restore it from a backup, or delete the file to drop it.",
        field=exc.field or None,
    )


def _json_object(data: bytes) -> dict[str, Any]:
    if len(data) > 4096:
        raise InvalidField("", f"expected a small JSON object, got {len(data)} bytes")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InvalidField("", f"not JSON: {type(exc).__name__}") from None
    if not isinstance(body, dict):
        raise InvalidField("", f"expected a JSON object, got {type(body).__name__}")
    return body


def _time(value: object) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidField("created", f"expected a number of seconds, got {value!r:.40}")
    return float(value)


def parse_branch(name: str, data: bytes) -> BranchRef:
    """A branch ref's bytes, checked.

    Raises:
        InvalidField: the bytes break the format (the field names the value).
    """
    body = _json_object(data)
    line = body.get("line")
    if not isinstance(line, str) or not _LINE.fullmatch(line):
        raise InvalidField("line", f"expected a line id of 32 hex digits, got {line!r:.40}")
    source = body.get("from")
    if source is not None:
        try:
            parse_ref_name("branch", source)
        except (InvalidArgumentError, InvalidTypeError):
            raise InvalidField("from", f"expected a branch name, got {source!r:.40}") from None
    start = check_int(body.get("start"), "start")
    return BranchRef(name, line, start, _time(body.get("created")), source)


def parse_tag(name: str, data: bytes) -> TagRef:
    """A tag ref's bytes, checked.

    Raises:
        InvalidField: the bytes break the format.
    """
    body = _json_object(data)
    return TagRef(name, check_int(body.get("version"), "version"), _time(body.get("created")))


def parse_move(parent: int, data: bytes) -> int:
    """The version a move names, checked: later than the version it moves from (so following moves
    always ends).

    Raises:
        InvalidField: not a version number after ``parent``.
    """
    text = data.decode("ascii", errors="replace").strip()
    if not is_version_number(text) or len(text) > 20:
        raise InvalidField("", f"expected a version number, got {text!r:.40}")
    version = int(text)
    if not parent < version <= MAX_OFFSET:
        raise InvalidField("", f"expected a version after {parent}, got {version}")
    return version


def _parse_hint(data: bytes | None) -> int | None:
    """A line's head hint (``"NNNNNNNNNN NNNNNNNNNN"``), or None if it is missing, torn or odd: the
    value is written twice, so a write that was cut short (a reader racing it, a crash) shows as two
    halves that differ."""
    if data is None:
        return None
    parts = data.decode("ascii", errors="replace").split()
    if len(parts) != 2 or parts[0] != parts[1] or not is_version_number(parts[0]) or len(parts[0]) != 10:
        return None
    return int(parts[0])


# -- reading ---------------------------------------------------------------------------------------


def read_branch(backend: Backend, name: str) -> BranchRef | None:
    """Branch ``name``'s ref, or None when there is no such branch.

    Raises:
        DatasetCorruptError: the ref file is damaged.
    """
    return _read_ref(backend, branch_key(name), functools.partial(parse_branch, name))


def read_tag(backend: Backend, name: str) -> TagRef | None:
    """Tag ``name``, or None when there is no such tag.

    Raises:
        DatasetCorruptError: the tag file is damaged.
    """
    return _read_ref(backend, tag_key(name), functools.partial(parse_tag, name))


def _read_ref(backend: Backend, key: str, parse: Callable[[bytes], RefT]) -> RefT | None:
    """The ref file at ``key`` parsed by ``parse``, or None when there is none; damage is corruption."""
    data = backend.read(key)
    if data is None:
        return None
    try:
        return parse(data)
    except InvalidField as exc:
        raise _corrupt(backend, key, exc) from None


def _names(backend: Backend, folder: str) -> list[str]:
    out = []
    for entry in backend.list(folder):
        if entry.startswith(TEMP_PREFIX) or not entry.endswith(".json"):
            continue
        name = entry[: -len(".json")]
        try:
            out.append(parse_ref_name("ref", name))
        except (InvalidArgumentError, InvalidTypeError):
            continue  # not a file lakecompute writes there
    return sorted(out)


def list_branches(backend: Backend) -> list[str]:
    """The branch names, sorted (``main`` included where the dataset predates refs)."""
    names = _names(backend, branch_key())
    return names if DEFAULT_BRANCH in names else sorted([DEFAULT_BRANCH, *names])


def list_tags(backend: Backend) -> dict[str, TagRef]:
    """The tags by name, sorted by name.

    Raises:
        DatasetCorruptError: a tag file is damaged.
    """
    out = {}
    for name in _names(backend, tag_key()):
        tag = read_tag(backend, name)
        if tag is not None:  # removed since the listing
            out[name] = tag
    return out


def list_lines(backend: Backend) -> list[str]:
    """The line ids that have moves or a hint stored (for ``vacuum``)."""
    return [name for name in backend.list(LINES) if _LINE.fullmatch(name)]


def moved_to(backend: Backend, line: str, parent: int) -> int | None:
    """Where line ``line`` moved after version ``parent``, or None if it did not (yet).

    Raises:
        DatasetCorruptError: the move file is damaged.
    """
    return _read_ref(backend, move_key(line, parent), functools.partial(parse_move, parent))


def last_move(backend: Backend, ref: BranchRef) -> tuple[int, str | None]:
    """The version the newest stored move of branch ``ref``'s line names, and that move's key (a listing:
    for when the line's hint is unusable); ``(ref.start, None)`` when the line has no move.

    Raises:
        DatasetCorruptError: the move is damaged.
    """
    parents = [int(m.group(1)) for name in backend.list(line_key(ref.line)) if (m := _MOVE.fullmatch(name))]
    parents = [p for p in parents if p >= ref.start]
    if not parents:
        return ref.start, None
    newest = max(parents)
    moved = moved_to(backend, ref.line, newest)
    return (ref.start, None) if moved is None else (moved, move_key(ref.line, newest))


def read_line_hint(backend: Backend, line: str) -> int | None:
    """The version line ``line``'s hint names (None when it is missing or torn). Only a hint: the caller
    checks that the version belongs to the line before using it (`_versions.branch_head`)."""
    return _parse_hint(backend.read(line_hint_key(line)))


# -- changing refs (each change one atomic step) ------------------------------------------------------


def advance(backend: Backend, line: str, parent: int, version: int) -> bool:
    """Move line ``line`` from version ``parent`` to ``version``; False if another writer moved it from
    ``parent`` first (nothing is changed then)."""
    return backend.create_exclusive(move_key(line, parent), f"{version:010d}".encode())


def write_line_hint(backend: Backend, line: str, version: int) -> None:
    """Record ``version`` as line ``line``'s newest head (advisory: readers check it and step on)."""
    try:
        backend.write_hint(line_hint_key(line), f"{version:010d} {version:010d}".encode())
    except (OSError, StorageError):
        pass  # the hint saves reads; readers find the head without it


def create_branch(backend: Backend, ref: BranchRef) -> bool:
    """Store a new branch ref; False if a branch of that name exists."""
    return backend.create_exclusive(branch_key(ref.name), ref.to_bytes())


def create_tag(backend: Backend, tag: TagRef) -> bool:
    """Store a new tag; False if a tag of that name exists."""
    return backend.create_exclusive(tag_key(tag.name), tag.to_bytes())


def ensure_main(backend: Backend, latest: int) -> BranchRef:
    """The ``main`` branch's ref, written first (starting at ``latest``, the newest version) for a
    dataset that predates refs. Of several processes doing this at once, one writes it and all read it.

    Raises:
        DatasetCorruptError: the ref is damaged.
    """
    ref = read_branch(backend, DEFAULT_BRANCH)
    if ref is not None:
        return ref
    create_branch(backend, BranchRef(DEFAULT_BRANCH, new_line_id(), latest, time.time()))
    ref = read_branch(backend, DEFAULT_BRANCH)
    assert ref is not None  # just created, by this process or another one
    return ref
