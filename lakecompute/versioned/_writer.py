"""The storage side of a write transaction: a writer's lease, and the slots of its own segments.

Data is written once into slots nobody else uses; it becomes part of the dataset only when a manifest
that names it is committed (`lakecompute.versioned.Table.commit`). A `Writer` belongs to one dataset
handle: every segment (and typed array) it makes is covered by its `Lease` before it is created, and it
writes into a segment only while that lease still covers it. An eval's tasks write into slots of
segments the writer made for the eval (its `SlotGrant`), from other processes too.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zarr.abc.store import Store

from lakecompute.errors import LakeComputeError
from lakecompute.perprocess import PerProcess
from lakecompute.specs import TensorSpec
from lakecompute.storage import ArrayCache, Backend, BackendSpec, open_backend
from lakecompute.versioned._compact import Rows, is_compact, write_stream, write_typed
from lakecompute.versioned._keys import LEASES, ROOT, SEGMENTS, TENSORS, segment_key, typed_array_key
from lakecompute.versioned._leases import Lease
from lakecompute.versioned._manifest import Fragment, TensorState
from lakecompute.versioned._segments import (
    MAX_SLOTS,
    Compressors,
    OpenSegment,
    SlotWriter,
    create_segment,
    new_segment_id,
)

__all__ = ["SlotGrant", "Writer"]


class Writer:
    """One dataset handle's writes into storage: its lease, its segments (one per chunk codec) and the
    slots handed out in them, in order; and whether an eval's workers still write into them.

    Args:
        backend: where the dataset lives.
        cache: the handle's chunk cache (its store is where segments are made; slot writers tell it
            which chunks they replaced).
        compressors: the codecs of each chunk compression.
    """

    def __init__(self, backend: Backend, cache: ArrayCache, compressors: Compressors) -> None:
        self.backend = backend
        self.store: Store = cache.store
        self._cache = cache
        self._compressors = compressors
        self.lease = Lease(backend)
        self.pins = 0  # evals whose workers may be writing: the lease is held until they finish
        self._generation = self.lease.generation
        self._segments: dict[str, str] = {}  # chunk codec -> this handle's current segment
        self._next: dict[str, int] = {}  # segment -> its next free slot
        self._open: dict[str, OpenSegment] = {}  # segment -> its arrays, opened once for all its slots

    def hold(self) -> bool:
        """Hold the lease for writes about to happen; False when the old segments are no longer covered
        (they are forgotten here; writers holding slots in them must ask for new slots)."""
        kept = self.lease.hold()
        if not kept or self.lease.generation != self._generation:
            self._segments.clear()
            self._next.clear()
            self._open.clear()
            self._generation = self.lease.generation
            return False
        return True

    def new_slot(self, spec: TensorSpec) -> SlotWriter:
        """A fresh slot for samples of ``spec``, in this writer's segment of its chunk codec."""
        self.hold()
        codec = spec.chunk_compression or "none"
        seg = self._segments.get(codec)
        if seg is None or self._next[seg] >= MAX_SLOTS:
            seg = self.new_segment(spec.chunk_compression)
            self._segments[codec] = seg
            self._next[seg] = 0
        slot = self._next[seg]
        self._next[seg] += 1
        segment = self._open.get(seg)
        if segment is None:
            segment = self._open[seg] = OpenSegment(self.store, seg)
        return SlotWriter(segment, slot, self._cache)

    def new_segment(self, chunk_compression: str | None) -> str:
        """Create a fresh segment (in this process: only one process may create arrays)."""
        seg = self.new_id()
        create_segment(self.store, seg, self._compressors(chunk_compression))
        return seg

    def new_id(self) -> str:
        """A fresh segment id, covered by the lease (create the segment or typed array after this)."""
        self.hold()
        seg = new_segment_id()
        self.lease.cover(seg)
        self._generation = self.lease.generation
        return seg

    # -- compaction's writes (see `lakecompute.versioned._compact`) ----------------------------------
    def is_compact(self, state: TensorState) -> bool:
        """Whether tensor ``state`` is stored as compact as `write_typed` or `write_stream` make it."""
        return is_compact(self._cache, state)

    def write_typed(self, rows: Rows, state: TensorState, bar: Any) -> Fragment:
        """Copy a fixed-shape numeric tensor into a new typed zarr array (``bar`` counts the samples)."""
        return write_typed(self.store, self.new_id(), rows, state, self._compressors, bar)

    def write_stream(self, rows: Rows, state: TensorState, bar: Any) -> Fragment:
        """Copy numeric samples of varying shapes into a new typed stream segment."""
        return write_stream(self.store, self.new_id(), rows, state, self._compressors, bar)

    # -- an eval's workers -----------------------------------------------------------------------
    def grant(self, codecs: Mapping[str, str | None], tensors: tuple[str, ...]) -> SlotGrant:
        """The slots an eval's tasks write into: a new segment per chunk codec (``codecs``: its name ->
        the chunk compression), held from now on, checkpoints included, until `unpin`."""
        self.pins += 1
        segments = {codec: self.new_segment(cc) for codec, cc in codecs.items()}
        return SlotGrant(self.backend.spec, segments, tensors)

    def unpin(self) -> None:
        """An eval's workers are done (its final commit or abort follows)."""
        self.pins = max(0, self.pins - 1)

    def check(self) -> None:
        """Before a commit: refuse when the lease lapsed (data written under it may be gone).

        Raises:
            LeaseExpiredError: the lease was not renewed in time.
        """
        self.lease.check()

    def let_go(self) -> None:
        """Release the lease after a commit, unless an eval's workers may still be writing."""
        if not self.pins:
            self.lease.release(forget=False)

    def abandon(self) -> None:
        """Drop the writes of a rollback: their segments are garbage once the lease lets them go. Where
        the dataset itself is gone (deleted under this handle while it wrote: its commit was refused
        with DatasetNotFoundError), they are removed at once (`_remove_orphaned`)."""
        self.pins = 0
        ids, writing = set(self.lease.ids), self.lease.held
        self.lease.release(forget=True)
        if ids and writing:
            with contextlib.suppress(Exception):  # best effort: a rollback never fails for it
                if self.backend.read(ROOT) is None:
                    _remove_orphaned(self.backend, ids, self.lease.key)


def _remove_orphaned(backend: Backend, ids: set[str], lease: str) -> None:
    """Remove what a writer stored under ``ids`` (segments, typed arrays) and its ``lease`` file from a
    dataset deleted under it, then the folders left holding nothing (or only the ``zarr.json`` zarr put
    in them with the arrays), the dataset's own last: writes that went on after the delete made those
    folders again, and what is left at the path keeps ``lc.empty`` and ``lc.delete`` from it (they touch
    only a dataset). Anything else there stays."""
    for seg in ids:
        backend.delete_tree(segment_key(seg))
    for tensor in backend.list(TENSORS):
        for array_id in ids:
            backend.delete_tree(typed_array_key(tensor, array_id))
        _remove_bare(backend, typed_array_key(tensor))
    backend.delete(lease)
    for folder in (SEGMENTS, TENSORS, LEASES):
        _remove_bare(backend, folder)
    backend.remove_if_empty("")


def _remove_bare(backend: Backend, folder: str) -> None:
    """Remove ``folder`` if it holds nothing but zarr's group metadata (what making an array in it adds)."""
    names = backend.list(folder)
    if names == [ROOT]:
        backend.delete(f"{folder}/{ROOT}")
    if len(names) <= 1:
        backend.remove_if_empty(folder)


@dataclass(frozen=True, slots=True)
class SlotGrant:
    """The slots an eval's tasks write into: one segment per chunk codec, a slot per task and tensor.

    Attributes:
        out: where the output dataset lives (reopened in each worker process).
        segments: chunk codec -> the eval's segment for tensors stored with it.
        tensors: the output tensors, in order (a tensor's position numbers its slot within a task).
    """

    out: BackendSpec
    segments: Mapping[str, str]
    tensors: tuple[str, ...]

    def slot(self, task: int, spec: TensorSpec) -> tuple[str, int]:
        """The segment and slot that tensor ``spec`` of task number ``task`` writes into."""
        slot = task * len(self.tensors) + self.tensors.index(spec.name)
        if slot >= MAX_SLOTS:
            raise LakeComputeError(
                f"Too many tasks for one eval ({task}); use fewer, larger tasks "
                "(a larger checkpoint_interval)."
            )
        return self.segments[spec.chunk_compression or "none"], slot

    def open_store(self) -> Store:
        """The output's zarr store in this process (opened once per process and location)."""
        return _store_for(self.out)

    def writer(self, store: Store, task: int, spec: TensorSpec) -> SlotWriter:
        """The writer of tensor ``spec``'s slot of task ``task``, in this process (``store``: from
        `open_store`). It holds back the partly filled last chunks of what it writes: `SlotWriter.seal`
        before the task's fragments are handed on."""
        seg, slot = self.slot(task, spec)
        # Tasks write behind their function, on a thread of their own (see `SlotWriter`'s concurrent), and
        # nothing reads or commits a task's writes before its end, where its writer seals them.
        return SlotWriter(_segment_for(self.out, store, seg), slot, concurrent=False, hold_tails=True)


class _Opened:
    """What this process has opened for the tasks it runs: the output store of each location (remote
    clients are costly to build, and must be built in the process that uses them: they do not survive a
    fork), and the segments tasks write into, opened once for every task and tensor (see `OpenSegment`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stores: dict[tuple[str, str], Store] = {}
        self.segments: dict[tuple[str, str], OpenSegment] = {}


_OPENED = PerProcess(_Opened)


def _store_for(spec: BackendSpec) -> Store:
    opened = _OPENED.get()
    key = (spec.url, json.dumps(spec.storage_options, sort_keys=True, default=str))
    with opened.lock:
        store = opened.stores.get(key)
        if store is None:
            store = opened.stores[key] = open_backend(spec.url, spec.storage_options).zarr_store()
    return store


def _segment_for(out: BackendSpec, store: Store, seg: str) -> OpenSegment:
    opened = _OPENED.get()
    key = (out.url, seg)
    with opened.lock:
        segment = opened.segments.get(key)
        if segment is None:
            if len(opened.segments) >= 64:
                opened.segments.clear()  # segments of evals long finished
            segment = opened.segments[key] = OpenSegment(store, seg)
    return segment
