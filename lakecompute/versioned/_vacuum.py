"""Vacuum: removing stored data that no kept version references and no live writer may still commit.

Data is written once and never changed in place, so crashes and aborted writes leave bytes that
no version references. `vacuum` removes them — but never bytes a live writer may still commit,
wherever that writer runs: every writer holds a lease in the dataset's storage on the segments and
typed arrays it writes (`lakecompute.versioned.Lease`), and vacuum leaves alone everything an unexpired
lease names, and everything younger than ``grace_seconds`` (which is what protected data before
leases existed). No process ids are consulted.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lakecompute.progress import progress_bar
from lakecompute.storage import TEMP_PREFIX, Backend, chunk_folder
from lakecompute.versioned._header import VersionHeader
from lakecompute.versioned._history import collectable
from lakecompute.versioned._keys import (
    SEGMENTS,
    TENSORS,
    TYPED_PREFIX,
    line_key,
    segment_key,
    typed_array_key,
    version_key,
)
from lakecompute.versioned._leases import LEASE_SECONDS, let_go_released, read_leases
from lakecompute.versioned._manifest import Fragment, Manifest
from lakecompute.versioned._reads import read_manifest
from lakecompute.versioned._refs import list_branches, list_lines, read_branch
from lakecompute.versioned._segments import DATA_CHUNK, INDEX_CHUNK, segment_time
from lakecompute.versioned._stored import whole_bytes
from lakecompute.versioned._versions import list_versions

__all__ = ["TEMP_FILE_SECONDS", "Parked", "vacuum"]

_SEGMENT_NAME = re.compile(r"^\d+-\d+-[0-9a-f]+$")  # see new_segment_id()

#: The fragments a version keeps aside besides its tensors' (an interrupted in-place eval parks its new
#: fragments in its record, and a rerun commits them): what the layer that reads eval records says.
Parked = Callable[[Manifest], Iterable[Fragment]]


def _referenced(manifests: list[Manifest], parked: Parked) -> dict[str, list[tuple[str, int, int]]]:
    """Per segment: (array, first, last) chunk ranges that some version needs — its tensors, and the
    fragments it keeps aside (``parked``)."""
    out: dict[str, list[tuple[str, int, int]]] = {}
    for m in manifests:
        fragments = [f for state in m.tensors.values() for f in state.fragments]
        fragments += parked(m)
        for f in fragments:
            ranges = out.setdefault(f.seg, [])
            if f.seg.startswith(TYPED_PREFIX):
                continue  # a whole typed array: kept as long as it is named
            if f.nbytes:
                ranges.append(("data", f.off // DATA_CHUNK, (f.off + f.nbytes - 1) // DATA_CHUNK))
            if f.idx is not None:
                n = f.total * (1 + f.ndim)
                ranges.append(("index", f.idx // INDEX_CHUNK, (f.idx + n - 1) // INDEX_CHUNK))
    return out


def vacuum(
    backend: Backend,
    grace_seconds: float = 3600.0,
    keep_versions: int | None = None,
    progressbar: bool = True,
    parked: Parked = lambda manifest: (),
) -> dict[str, int]:
    """Delete stored data no kept version references and no live writer may still commit.

    Only the dataset's own storage is walked, through its backend: a symbolic link inside a local
    dataset is never followed (links are removed as links, what they point to is left alone).

    The order of the steps matters. Stored segments and typed arrays are listed first, then the
    leases read, then the versions: a segment is written only while one lease has covered it since
    before it was created, and that lease is let go only after a commit (whose version the last step
    then sees) or a rollback (after which the segment is garbage). So a segment listed here that no
    lease covers when the leases are read is never written again, and it is garbage if no version
    read afterwards references it.

    Versions follow reachability: every version a branch or a tag reaches is kept (with
    ``keep_versions=n``, the ``n`` newest of each branch and the tagged ones); a deleted branch's versions
    go once older than ``grace_seconds``; the data only removed versions used goes with them.

    Args:
        backend: where the dataset lives (every branch's newest version is always kept).
        grace_seconds: data younger than this is left alone whatever the leases say (data written
            by lakecompute versions before leases is protected by this alone), and so are versions of
            deleted branches committed more recently.
        keep_versions: keep only this many newest versions of each branch (None keeps all).
        progressbar: show a progress bar of the stored segments and typed arrays looked at.
        parked: the fragments a version keeps aside besides its tensors' (see `Parked`).

    Returns:
        Counts of removed ``versions``, ``segments`` and ``chunks``.
    """
    let_go_released(backend.url)  # this process's writers that committed: they start new segments next
    stored = _Stored.list(backend)
    now = time.time()
    leases = read_leases(backend, now)
    removable = _Removable(leases.covered, grace_seconds, now)
    lines = list_lines(backend)
    versions = list_versions(backend)
    removed = {"versions": 0, "segments": 0, "chunks": 0}
    headers, drop = collectable(backend, versions, keep_versions, grace_seconds, LEASE_SECONDS, now)
    manifests = _kept_whole(backend, headers, set(drop))
    # Newest first: a vacuum killed part-way leaves older versions only, each with the base it is a delta of.
    for v in sorted(drop, reverse=True):
        backend.delete(version_key(v))
        removed["versions"] += 1
    _drop_dead_lines(backend, lines, headers)
    with progress_bar(
        len(stored.typed) + len(stored.segments), "vacuum", unit="array", enabled=progressbar
    ) as bar:
        _remove_unneeded(backend, stored, removable, _referenced(manifests, parked), removed, bar)
    for key in leases.expired:
        backend.delete(key)  # its writer can no longer commit (see Lease.check)
    _sweep_temp_files(backend, removable, max(grace_seconds, TEMP_FILE_SECONDS))
    return removed


def _remove_unneeded(
    backend: Backend,
    stored: _Stored,
    removable: _Removable,
    needed: dict[str, list[tuple[str, int, int]]],
    removed: dict[str, int],
    bar: Any,
) -> None:
    """Remove the typed arrays and segments no kept version needs, and the chunks of needed segments
    outside what is needed (counting them in ``removed``; ``bar`` counts the arrays looked at)."""
    for path in stored.typed:
        if removable(path.rsplit("/", 1)[-1]) and TYPED_PREFIX + path not in needed:
            backend.delete_tree(path)
            removed["segments"] += 1
        bar.update(1)
    for seg in stored.segments:
        bar.update(1)
        if not removable(seg):
            continue
        if seg not in needed:
            backend.delete_tree(segment_key(seg))  # with any temp files left inside it
            removed["segments"] += 1
        else:
            removed["chunks"] += _vacuum_chunks(backend, seg, needed[seg])


def _kept_whole(backend: Backend, kept: list[VersionHeader], drop: set[int]) -> list[Manifest]:
    """The kept versions' manifests, read oldest first (a chain of deltas is read once). A kept version
    stored as the change from a version about to be removed is stored whole first, in place: the same
    content in another form, so that readers never need what vacuum removes."""
    out = []
    for header in sorted(kept, key=lambda h: h.version):
        manifest = read_manifest(backend, header.version)
        if header.base is not None and header.base in drop:
            backend.write(version_key(header.version), whole_bytes(manifest))
        out.append(manifest)
    return out


def _drop_dead_lines(backend: Backend, lines: list[str], kept: list[VersionHeader]) -> None:
    """Remove the moves of deleted branches: lines (listed before the refs are read) that no branch names
    and no kept version was committed on (their moves tell that those versions were committed).

    A line is never used again once its branch is gone (a branch made again under the same name gets a
    new line), so nothing can be adding to it that matters.
    """
    live = {ref.line for name in list_branches(backend) if (ref := read_branch(backend, name)) is not None}
    live |= {m.line for m in kept if m.line is not None}
    for line in lines:
        if line not in live:
            backend.delete_tree(line_key(line))


#: Temp files younger than this are never swept, whatever ``grace_seconds`` says: writing one file (and
#: renaming it into place) never takes this long, so a younger temp file may belong to a live write.
TEMP_FILE_SECONDS = LEASE_SECONDS


@dataclass(frozen=True, slots=True)
class _Stored:
    """The segment ids and typed array paths (``tensors/<name>/<id>``) stored when vacuum began."""

    segments: tuple[str, ...]
    typed: tuple[str, ...]

    @staticmethod
    def list(backend: Backend) -> _Stored:
        segments = tuple(s for s in backend.list(SEGMENTS) if _SEGMENT_NAME.match(s))
        typed = tuple(
            typed_array_key(tensor_dir, array_id)
            for tensor_dir in backend.list(TENSORS)
            for array_id in backend.list(typed_array_key(tensor_dir))
            if _SEGMENT_NAME.match(array_id)
        )
        return _Stored(segments, typed)


class _Removable:
    """Whether stored data named by a segment-style id may go: no live lease names it, and it is old
    enough."""

    def __init__(self, covered: frozenset[str], grace_seconds: float, now: float) -> None:
        self.covered = covered
        self.grace_seconds = grace_seconds
        self.now = now

    def __call__(self, name: str) -> bool:
        if not _SEGMENT_NAME.match(name) or name in self.covered:
            return False
        return self.now - segment_time(name) >= self.grace_seconds


def _vacuum_chunks(backend: Backend, seg: str, ranges: list[tuple[str, int, int]]) -> int:
    """Remove the chunks of a segment outside the ranges kept versions need; returns how many."""
    count = 0
    for array in ("data", "index"):
        keep = [(a, b) for kind, a, b in ranges if kind == array]
        folder = chunk_folder(segment_key(seg, array))
        for name in backend.list(folder):
            if not name.isdigit():
                continue  # a temp file: see _sweep_temp_files
            c = int(name)
            if not any(a <= c <= b for a, b in keep):
                backend.delete(f"{folder}/{name}")
                count += 1
    return count


def _sweep_temp_files(backend: Backend, removable: _Removable, min_age: float) -> None:
    """Remove temp files of killed writes older than ``min_age`` (local disks only; object stores have
    none).

    Ours (named ``TEMP_PREFIX…``) anywhere in the dataset; zarr's (``*.partial``) only inside a
    segment or typed array, where zarr writes. Never inside a segment or typed array a live lease
    covers: its writer may be renaming that file into place right now.
    """
    root = backend.local_path("")
    if root is None:
        return
    now = time.time()
    # os.walk does not descend into linked folders; a linked file is removed as a link.
    for dirpath, _dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root).split(os.sep)
        owner = _array_id(rel)
        if owner is not None and owner in removable.covered:
            continue
        for name in files:
            ours = name.startswith(TEMP_PREFIX)
            if not ours and not (owner is not None and name.endswith(".partial")):
                continue
            p = os.path.join(dirpath, name)
            try:
                if now - os.lstat(p).st_mtime >= min_age:
                    os.unlink(p)
            except OSError:
                pass


def _array_id(parts: list[str]) -> str | None:
    """The segment or typed array id a folder of the dataset (as its path parts) lies in, if any."""
    if len(parts) >= 2 and parts[0] == SEGMENTS:
        return parts[1]
    if len(parts) >= 3 and parts[0] == TENSORS:
        return parts[2]
    return None
