"""Versions on a backend: listing them, reading their manifests, and committing new ones.

Version numbers are unique across branches: a commit takes the next free number by creating that
manifest file exclusively (`lakecompute.storage.Backend.create_exclusive`), then moves its branch
there (`commit_version`; the branch refs are in ``_refs``). ``versions/LATEST`` is only a hint that
saves a directory listing: readers check forward from it, so a stale hint is harmless. The manifest
document itself is `lakecompute.versioned._manifest`, how it is stored (whole or as a delta of its parent)
``_stored``, and reading it (following deltas, remembering what was read) ``_reads``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import replace

from lakecompute.errors import (
    DatasetCorruptError,
    DatasetNotFoundError,
    DatasetReplacedError,
    LakeComputeError,
)
from lakecompute.storage import Backend
from lakecompute.versioned._header import VersionHeader
from lakecompute.versioned._keys import (
    MARKER,
    ROOT,
    SEGMENTS,
    TENSORS,
    VERSIONS,
    VERSIONS_HINT,
    branch_key,
    move_key,
    version_key,
)
from lakecompute.versioned._manifest import Fragment, Manifest
from lakecompute.versioned._reads import read_header, read_manifest, remember
from lakecompute.versioned._refs import (
    BranchRef,
    advance,
    last_move,
    moved_to,
    read_line_hint,
    write_line_hint,
)
from lakecompute.versioned._segments import DATA_CHUNK, INDEX_CHUNK
from lakecompute.versioned._stored import encode

__all__ = [
    "branch_head",
    "check_base_unchanged",
    "check_still_there",
    "commit_manifest",
    "commit_version",
    "dataset_id_of",
    "is_committed",
    "latest_version",
    "list_versions",
    "needed_by_a_version",
    "read_manifest_of",
]

_HINT = VERSIONS_HINT


def list_versions(backend: Backend) -> list[int]:
    """Every committed version number, ascending."""
    out = []
    for name in backend.list(VERSIONS):
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def latest_version(backend: Backend) -> int | None:
    """The newest committed version, or None if there is none."""
    hint = backend.read(_HINT)
    start: int | None = None
    if hint is not None:
        try:
            start = int(hint.decode().strip())
        except ValueError:
            start = None
    if start is None or not backend.exists(version_key(start)):
        versions = list_versions(backend)
        if not versions:
            return None
        start = versions[-1]
    # The hint may lag behind other writers' commits: step forward until a version is missing.
    while backend.exists(version_key(start + 1)):
        start += 1
    return start


def dataset_id_of(backend: Backend, manifest: Manifest) -> str:
    """The id of the dataset ``manifest`` belongs to.

    A manifest written before datasets had ids has none; such a dataset's id is derived from the bytes
    of its earliest committed manifest (which hold the time it was created, so a dataset made again at
    the same path gets another one): ``"legacy-"`` and 32 hex digits. The next commit records it in the
    new version, so it stays the same after ``vacuum(keep_versions=...)`` removes that manifest.

    Raises:
        DatasetNotFoundError: no committed manifest is left to derive a legacy id from.
    """
    if manifest.dataset_id:
        return manifest.dataset_id
    for version in list_versions(backend):
        data = backend.read(version_key(version))
        if data is not None:
            return "legacy-" + hashlib.sha256(data).hexdigest()[:32]
    raise DatasetNotFoundError(backend.url, "It has no committed version.")


def read_manifest_of(
    backend: Backend, version: int, dataset_id: str, what: str, digest: str = ""
) -> Manifest:
    """Load a version's manifest, checking that it belongs to the dataset ``dataset_id`` and, given its
    content ``digest``, that it holds that content (what a pickled handle, a snapshot or a state refers to:
    ``what`` names it in the error). A copy of the folder reads alike; one whose history diverged does not.

    Raises:
        DatasetReplacedError: the location holds another dataset now (the path was remade), or a copy
            whose version ``version`` holds other content.
        DatasetNotFoundError: no dataset there, or it has no such version.
        DatasetCorruptError: the manifest is damaged.
    """
    try:
        manifest = read_manifest(backend, version)
    except DatasetNotFoundError:
        # The version is missing: if another dataset is there now, that is what to say.
        latest = latest_version(backend)
        if latest is not None:
            found = dataset_id_of(backend, read_manifest(backend, latest))
            if found != dataset_id:
                raise DatasetReplacedError(backend.url, dataset_id, found, what) from None
        raise
    found = dataset_id_of(backend, manifest)
    if found != dataset_id:
        raise DatasetReplacedError(backend.url, dataset_id, found, what)
    if digest and manifest.digest != digest:
        raise DatasetReplacedError(
            backend.url,
            dataset_id,
            found,
            what,
            version=version,
            expected_digest=digest,
            found_digest=manifest.digest,
        )
    return manifest


def check_still_there(backend: Backend, dataset_id: str) -> None:
    """Refuse to commit into another dataset than ``dataset_id``: a handle that outlived its dataset (the
    path overwritten, or deleted and created again) would otherwise publish its next version number into
    the new dataset. Reads the root marker (``zarr.json``, small); a marker without an id (a dataset made
    before ids) cannot tell, and passes.

    Raises:
        DatasetReplacedError: another dataset is at the location now.
        DatasetNotFoundError: no dataset is there (deleted, or being replaced).
    """
    raw = backend.read(ROOT)
    try:
        attributes = json.loads(raw).get("attributes") if raw is not None else None
        mark = attributes.get(MARKER) if isinstance(attributes, dict) else None
    except (ValueError, AttributeError, RecursionError):
        mark = None
    if not isinstance(mark, dict):
        raise DatasetNotFoundError(
            backend.url,
            f"The dataset this handle writes to (id {dataset_id!r}) was deleted or is being replaced.",
        )
    found = mark.get("dataset_id")
    if isinstance(found, str) and found and found != dataset_id:
        raise DatasetReplacedError(backend.url, dataset_id, found, "this handle")


def check_base_unchanged(backend: Backend, base: Manifest, dataset_id: str) -> None:
    """Refuse to commit after a version that holds other content at the location now than the writer's
    ``base``: the folder was replaced by a copy of the dataset (the same id) whose history diverged from
    it, and the new version would make the writer's content a child of the copy's. Reads the base's
    header (one small file); a version committed before digests, or one that is gone (removed by a
    vacuum once the branch moved on: the commit then meets the conflict), cannot tell, and passes.

    Raises:
        DatasetReplacedError: the base's version number holds other content there now.
    """
    try:
        found = read_header(backend, base.version).digest
    except DatasetNotFoundError:
        return
    if found and base.digest != found:
        raise DatasetReplacedError(
            backend.url,
            dataset_id,
            dataset_id,
            "this handle",
            version=base.version,
            expected_digest=base.digest,
            found_digest=found,
        )


#: How many version numbers a commit tries before giving up (each miss means another writer took one).
_NUMBER_TRIES = 10_000


def _take_number(
    backend: Backend, build: Callable[[int], Manifest], first: int, base: Manifest | None
) -> Manifest:
    """Store the manifest ``build(n)`` under the first free version number ``n`` from ``first`` on; the
    manifest as stored.

    Version numbers are unique across branches: writers on other branches take numbers too, and a
    writer that finds its number taken jumps past the newest one (the ``LATEST`` hint) and tries again
    (building the manifest anew: its number is written inside it).
    """
    version = first
    for _ in range(_NUMBER_TRIES):
        candidate = build(version)
        if candidate.line is not None:
            candidate = replace(candidate, reach={**candidate.reach, candidate.line: version})
        data, stored = encode(candidate, base)
        if backend.create_exclusive(version_key(version), data):
            remember(backend, data, candidate.recorded(None, stored))
            return candidate
        version = max(version + 1, (latest_version(backend) or version) + 1)
    raise LakeComputeError(  # pragma: no cover (10,000 writers committing at once)
        f"Could not find a free version number in {backend.url!r} after {_NUMBER_TRIES} tries."
    )


def commit_version(
    backend: Backend, build: Callable[[int], Manifest], first: int, base: Manifest | None = None
) -> Manifest | None:
    """Commit the manifest ``build(n)`` (``n``: its version number, from ``first`` on) on the branch
    of its ``line``, whose head is its ``parent``: the manifest committed (stamped with the time), or
    None if another writer moved the branch from that head first (then nothing of this commit is left).
    ``base`` is that parent as read or committed: the manifest is stored as its change from it when
    that is cheaper (``_stored``).

    Two steps: the manifest is stored under a free number (`_take_number`), then the branch is moved
    there by creating its move exclusively (``_refs.advance``). The move is the commit: a kill before
    it leaves a manifest no branch reaches (``vacuum`` removes it), never a half-moved branch.
    """
    when = time.time()
    stored = _take_number(backend, lambda n: replace(build(n), time=when), first, base)
    line, parent = stored.line, stored.parent
    assert line is not None
    assert parent is not None
    if not advance(backend, line, parent, stored.version):
        backend.delete(version_key(stored.version))  # never committed: no branch reaches it
        return None
    _write_hints(backend, stored.version)
    write_line_hint(backend, line, stored.version)
    return stored


def branch_head(backend: Backend, ref: BranchRef) -> int:
    """The version branch ``ref`` is at: its start, followed along its line's moves.

    The line's hint names a recent head, so a lookup is a few small reads; a missing or torn hint costs
    one listing of the line's moves. The hint is used only once a move of this line is found to name it
    (`_moved_here`): a hint naming another branch's version, or a commit that never finished, is ignored.
    The head found is checked too: stored, and (when a move named it) a descendant of the version the
    move went from, as every commit and fast-forward is.

    Raises:
        DatasetCorruptError: the ref or a move names a version that is not stored or not on the branch,
            or a move is damaged.
    """
    hint = read_line_hint(backend, ref.line)
    if hint is not None and hint > ref.start and _moved_here(backend, ref, hint):
        head, frm, via = hint, None, None  # checked: nothing to check again unless a move follows
    else:
        head, via = last_move(backend, ref)
        frm = None if via is None else int(via.rsplit("/", 1)[1][: -len(".json")])
        via = via or branch_key(ref.name)
    while (nxt := moved_to(backend, ref.line, head)) is not None:
        head, frm, via = nxt, head, move_key(ref.line, head)
    if via is not None:
        _check_head(backend, head, frm, via)
    return head


def _moved_here(backend: Backend, ref: BranchRef, version: int) -> bool:
    """Whether a move of branch ``ref``'s line names ``version``: the line moved there from the version's
    parent (a commit on the branch), from the newest version of the line it descends from, or from the
    branch's start (fast-forwards)."""
    try:
        header = read_header(backend, version)
    except (DatasetNotFoundError, DatasetCorruptError):
        return False
    candidates = {header.parent, header.reach_of().get(ref.line), ref.start}
    return any(
        p is not None and p < version and moved_to(backend, ref.line, p) == version
        for p in sorted(c for c in candidates if c is not None)
    )


def _check_head(backend: Backend, head: int, frm: int | None, via: str) -> None:
    """Refuse a head that ``via`` (the branch's ref file, or the move of its line from version ``frm``)
    names but that is not stored, or that does not descend from ``frm``.

    Raises:
        DatasetCorruptError: naming ``via``.
    """
    hint = "The ref was changed outside lakecompute: restore it from a backup, or delete the file to drop it."
    if not backend.exists(version_key(head)):
        raise DatasetCorruptError(backend.url, via, f"it names version {head}, which is not stored", hint)
    if frm is None or not backend.exists(version_key(frm)):
        return  # the branch's start, or a move from a version vacuum(keep_versions=...) removed
    header, before = read_header(backend, head), read_header(backend, frm)
    if not header.descends_from(before):
        where = "before branches" if header.branch is None else f"on branch {header.branch!r}"
        raise DatasetCorruptError(
            backend.url,
            via,
            f"it moves the branch from version {frm} to version {head}, which is not on the branch "
            f"(it was committed {where} and does not descend from {frm})",
            hint,
        )


def is_committed(backend: Backend, manifest: Manifest | VersionHeader) -> bool:
    """Whether ``manifest`` was committed (a branch moved to it), not left by a commit that lost its
    race or was killed before moving its branch.

    Raises:
        DatasetCorruptError: the branch's move after the manifest's parent is damaged.
    """
    if manifest.line is None or manifest.parent is None:
        return True  # committed before refs (or a dataset's first version): by existing
    return moved_to(backend, manifest.line, manifest.parent) == manifest.version


def _write_hints(backend: Backend, version: int) -> None:
    try:
        # Fixed width, written in place: a reader that sees a torn or stale value finds a
        # missing version (and lists) or an older one (and steps forward), never a wrong answer.
        backend.write_hint(_HINT, f"{version:010d}".encode())
    except OSError:
        pass  # the hint is an optimisation; readers find the version without it


def commit_manifest(backend: Backend, manifest: Manifest) -> Manifest | None:
    """Publish ``manifest`` as its version, stamped with the time, without a branch (a dataset's first
    version); the manifest committed, or None if that number is taken."""
    manifest = replace(manifest, time=time.time())
    data, stored = encode(manifest, None)
    if not backend.create_exclusive(version_key(manifest.version), data):
        return None
    remember(backend, data, manifest.recorded(None, stored))
    _write_hints(backend, manifest.version)
    return manifest


# Storage keys of segment arrays and of typed arrays, as the readers name them in errors.
_SEGMENT_KEY = re.compile(SEGMENTS + r"/([^/]+)/(data|index)/(?:c/([0-9]+)|zarr\.json)")
_TYPED_KEY = re.compile("(" + TENSORS + r"/[^/]+/[^/]+)/(?:c(?:/[0-9]+)+|zarr\.json)")


def _covers(frag: Fragment, seg: str, array: str | None, chunk: int | None) -> bool:
    """Whether ``frag`` needs chunk ``chunk`` of ``array`` in ``seg`` (any of it if ``chunk`` is None)."""
    if frag.seg != seg:
        return False
    if chunk is None or array is None:
        return True
    if array == "data":
        return (
            frag.nbytes > 0 and frag.off // DATA_CHUNK <= chunk <= (frag.off + frag.nbytes - 1) // DATA_CHUNK
        )
    if frag.idx is None:
        return False
    entries = frag.total * (1 + frag.ndim)
    return entries > 0 and frag.idx // INDEX_CHUNK <= chunk <= (frag.idx + entries - 1) // INDEX_CHUNK


def needed_by_a_version(backend: Backend, key: str) -> bool | None:
    """Whether some committed version still needs the stored data at ``key`` (a chunk or an array's
    metadata); None if ``key`` is not such data.

    When data a reader needs is missing and no committed version needs it, ``vacuum()`` removed it
    together with the version the reader holds. Reads every manifest: for error messages only.
    """
    seg_match, typed_match = _SEGMENT_KEY.fullmatch(key), _TYPED_KEY.fullmatch(key)
    if seg_match is not None:
        seg, array = seg_match.group(1), seg_match.group(2)
        chunk = None if seg_match.group(3) is None else int(seg_match.group(3))
    elif typed_match is not None:
        seg, array, chunk = "@" + typed_match.group(1), None, None
    else:
        return None
    for version in list_versions(backend):
        try:
            manifest = read_manifest(backend, version)
        except LakeComputeError:
            continue
        for state in manifest.tensors.values():
            if any(_covers(f, seg, array, chunk) for f in state.fragments):
                return True
    return False
