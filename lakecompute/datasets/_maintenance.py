"""Compaction and cleanup of stored data.

Data is written once and never changed in place, so crashes and aborted writes leave bytes that
no version references. `vacuum` removes them — but never bytes a live writer may still commit,
wherever that writer runs: every writer holds a lease in the dataset's storage on the segments and
typed arrays it writes (``lakecompute.storage.Lease``), and vacuum leaves alone everything an unexpired
lease names, and everything younger than ``grace_seconds`` (which is what protected data before
leases existed). No process ids are consulted.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute import compression
from lakecompute.datasets._core import DatasetCore, core_of
from lakecompute.datasets._history import collectable
from lakecompute.datasets._records import parse_records
from lakecompute.datasets._session import WriteSession
from lakecompute.htypes import Encoded
from lakecompute.parsing import parse_count, parse_flag
from lakecompute.progress import progress_bar
from lakecompute.storage import (
    DATA_CHUNK,
    INDEX_CHUNK,
    LEASE_SECONDS,
    SEGMENTS,
    STREAM_SEGMENT,
    TEMP_PREFIX,
    TENSORS,
    TYPED_PREFIX,
    Backend,
    Fragment,
    Manifest,
    TensorState,
    VersionHeader,
    chunk_folder,
    create_typed_array,
    let_go_released,
    list_branches,
    list_lines,
    list_versions,
    read_branch,
    read_leases,
    read_manifest,
    segment_key,
    segment_time,
    typed_array_key,
    version_key,
    whole_bytes,
)

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.datasets._reader import ColumnReader

__all__ = ["compact", "vacuum"]

_BLOCK = 4096
_WRITE_BYTES = 64 << 20  # compact reads and writes at most about this much at a time
_SEGMENT_NAME = re.compile(r"^\d+-\d+-[0-9a-f]+$")  # see new_segment_id()


def compact(ds: Dataset, progressbar: bool = True) -> int:
    """Rewrite every tensor into one contiguous fragment; content is unchanged. Returns the version.

    A tensor of fixed-shape numeric samples becomes one typed ``(n, *shape)`` zarr array under
    ``tensors/<name>/`` — readable with plain zarr; numeric samples of varying shapes (token ids, one
    1-D sample per document) become one typed stream, the samples' values back to back in a fresh
    segment's ``data`` array (see `_write_stream`); others (encoded images, text, json) become
    one run in a fresh segment. Committed through the dataset's write transaction, as message
    ``compact`` (or as part of the enclosing ``with ds:`` block). With ``progressbar``, a tqdm bar counts
    the samples rewritten (of every tensor that is not compact already).
    """
    progressbar = parse_flag("progressbar", progressbar)
    core = core_of(ds)
    with core.write("compact"):
        txn = core.txn
        states = [txn.state(name) for name in list(txn.head.tensors)]
        todo = [s for s in states if s.fragments and not _is_compact(core, s)]
        total = sum(s.length for s in todo)
        with progress_bar(total, "compact", enabled=progressbar) as bar:
            for state in todo:
                txn.set_fragments(state.spec.name, _compacted(core, state, bar))
    return core.version


def _compacted(core: DatasetCore, state: TensorState, bar: Any) -> list[Fragment]:
    """The fragments of ``state`` rewritten as one run (``bar`` counts the samples)."""
    name = state.spec.name
    reader = core.reader(name)
    shapes = {f.shape for f in state.fragments}
    if state.spec.kind == "array" and None not in shapes and len(shapes) == 1 and state.spec.dtype:
        return [_write_typed(core, reader, state, bar)]
    if state.spec.kind == "array" and state.spec.dtype:
        return [_write_stream(core, reader, state, bar)]
    session = WriteSession(core.txn.slots.new_slot)
    schema = core.txn.schema(name)
    if state.spec.kind == "bytes" or None in shapes or len(shapes) > 1:
        session.prefer_indexed(name)
    frags: list[Fragment] = []
    for start in range(0, state.length, _BLOCK):
        stop = min(start + _BLOCK, state.length)
        if state.spec.kind == "bytes":
            # Copy encoded blobs as they are: re-encoding images would be slow and (jpeg) lossy.
            session.add(schema, reader.read_encoded(start, stop))
        else:
            values = reader.read_range(start, stop)
            if isinstance(values, np.ndarray):
                session.add(schema, values)
            else:
                session.add(schema, [Encoded(np.asarray(v), None, np.shape(v)) for v in values])
        frags.extend(session.flush(schema))
        bar.update(stop - start)
    return frags


def _is_compact(core: DatasetCore, state: TensorState) -> bool:
    if len(state.fragments) != 1:
        return False
    f = state.fragments[0]
    whole = f.k == 0 and f.n == f.total
    if not whole:
        return False
    if f.seg.startswith(TYPED_PREFIX) or state.spec.kind == "bytes":
        return True
    # Numeric samples of varying shapes are compact once they are a typed stream of their own.
    data = core.cache.array(segment_key(f.seg, "data"))
    return f.shape is None and data.attrs.get("lakecompute") == STREAM_SEGMENT


def _write_stream(core: DatasetCore, reader: ColumnReader, state: TensorState, bar: Any) -> Fragment:
    """Copy numeric samples of varying shapes into a new *typed stream* segment; returns its fragment.

    The segment's ``data`` array has the tensor's dtype (not bytes) and exactly as many values as the
    samples hold, back to back in order: for a tensor of token ids it is the whole token stream as one
    typed zarr array (attribute ``"lakecompute": "compacted-stream"``), which plain zarr opens. Its
    ``index`` array has the usual rows ``[size, *shape]``, with sizes, like the fragment's ``off`` and
    ``nbytes``, counted in items of the data array (for the byte arrays of other segments, items are
    bytes): the fragment reader then reads it unchanged. Chunks hold ``DATA_CHUNK`` items, so chunk
    numbers computed from the fragment (as vacuum does) stay right.
    """
    dtype = np.dtype(state.spec.dtype)
    n = state.length
    ndim = state.ndim or 0
    rows = np.empty((n, 1 + ndim), dtype=np.int64)
    if ndim:
        rows[:, 1:] = reader.shapes(0, n)
    rows[:, 0] = np.prod(rows[:, 1:], axis=1) if ndim else 1
    total = int(rows[:, 0].sum())
    seg = core.txn.slots.new_id()
    # Checksummed, and every chunk stored (a missing one is damage, not zeros), like every typed array.
    data = create_typed_array(
        core.cache.store, segment_key(seg, "data"), (total,), (DATA_CHUNK,), dtype,
        compression.zarr_compressors(state.spec.chunk_compression),
        {"lakecompute": STREAM_SEGMENT, "tensor": state.spec.name},
    )  # fmt: skip
    index = create_typed_array(
        core.cache.store, segment_key(seg, "index"), (rows.size,), (INDEX_CHUNK,), np.dtype("int64"),
        compression.zarr_compressors("zstd"), {"lakecompute": "segment-index"},
    )  # fmt: skip
    index[:] = rows.reshape(-1)
    pos = 0
    for start in range(0, n, _BLOCK):
        values = reader.read_range(start, min(n, start + _BLOCK))
        flat = np.concatenate([np.asarray(v, dtype=dtype).reshape(-1) for v in values])
        data[pos : pos + flat.size] = flat
        pos += flat.size
        bar.update(len(values))
    return Fragment(seg, 0, total, n, dtype.name, None, 0, ndim, 0, n)


def _write_typed(core: DatasetCore, reader: ColumnReader, state: TensorState, bar: Any) -> Fragment:
    """Copy a fixed-shape numeric tensor into a new typed zarr array; returns its fragment."""
    shape = state.fragments[0].shape
    assert shape is not None
    assert state.spec.dtype is not None
    dtype = np.dtype(state.spec.dtype)
    n = state.length
    sample_bytes = max(1, math.prod(shape) * dtype.itemsize)
    chunks = typed_chunks(shape, dtype.itemsize)
    rows = chunks[0]
    path = typed_array_key(state.spec.name, core.txn.slots.new_id())
    arr = create_typed_array(
        core.cache.store,
        path,
        (n, *shape),
        chunks,
        dtype,
        compression.zarr_compressors(state.spec.chunk_compression),
        {"lakecompute": "compacted-tensor", "tensor": state.spec.name},
    )
    # Whole chunks per write (no read-modify-write), at most about _BLOCK samples or _WRITE_BYTES at once.
    step = rows * max(1, min(_BLOCK // rows, _WRITE_BYTES // (rows * sample_bytes)))
    for start in range(0, n, step):
        stop = min(n, start + step)
        arr[start:stop] = np.asarray(reader.read_range(start, stop))
        bar.update(stop - start)
    return Fragment(TYPED_PREFIX + path, 0, n * sample_bytes, n, dtype.name, shape, None, len(shape), 0, n)


def typed_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The chunk shape of a typed ``(n, *shape)`` array: whole samples, as many as fit in ``DATA_CHUNK``
    bytes; a sample larger than that is split across chunks along its own axes (a chunk of one whole
    sample would grow without bound, and readers refuse chunks over 64 MiB as hostile).
    """
    sample_bytes = math.prod(shape) * itemsize
    if sample_bytes <= DATA_CHUNK:
        return (max(1, DATA_CHUNK // max(1, sample_bytes)), *shape)
    budget = max(1, DATA_CHUNK // itemsize)  # items per chunk
    inner: list[int] = []
    for dim in reversed(shape):  # keep trailing axes whole while they fit, split the next one
        if budget >= dim:
            inner.append(dim)
            budget //= dim
        else:
            inner.append(max(1, budget))
            budget = 1
    return (1, *reversed(inner))


def _referenced(manifests: list[Manifest], url: str) -> dict[str, list[tuple[str, int, int]]]:
    """Per segment: (array, first, last) chunk ranges that some version needs — its tensors, and the
    fragments an interrupted in-place eval parked in its record (a rerun commits them)."""
    out: dict[str, list[tuple[str, int, int]]] = {}
    for m in manifests:
        fragments = [f for state in m.tensors.values() for f in state.fragments]
        for record in parse_records(m, url).values():
            fragments += [f for parked in record.parked.values() for f in parked]
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
    ds: Dataset, grace_seconds: float = 3600.0, keep_versions: int | None = None, progressbar: bool = True
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
        ds: the dataset (every branch's newest version is always kept).
        grace_seconds: data younger than this is left alone whatever the leases say (data written
            by lakecompute versions before leases is protected by this alone), and so are versions of
            deleted branches committed more recently.
        keep_versions: keep only this many newest versions of each branch (None keeps all).
        progressbar: show a progress bar of the stored segments and typed arrays looked at.

    Returns:
        Counts of removed ``versions``, ``segments`` and ``chunks``.
    """
    keep_versions = parse_count("keep_versions", keep_versions, 1, optional=True)
    progressbar = parse_flag("progressbar", progressbar)
    ds.check_writable()
    backend = core_of(ds).backend
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
        _remove_unneeded(backend, stored, removable, _referenced(manifests, ds.path), removed, bar)
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
            backend.delete_tree(f"refs/lines/{line}")


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
