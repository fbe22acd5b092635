"""Slots of a handle's own segments, handed out under its lease: where a transaction's writes go.

Data is written once into slots nobody else uses; it becomes part of the dataset only when a manifest
that names it is committed (`lakecompute.datasets._transaction`).
"""

from __future__ import annotations

from zarr.abc.store import Store

from lakecompute import compression
from lakecompute.htypes import TensorSpec
from lakecompute.storage import ArrayCache
from lakecompute.table import MAX_SLOTS, Lease, OpenSegment, SlotWriter, create_segment, new_segment_id

__all__ = ["SlotAllocator"]


class SlotAllocator:
    """Hands out slots of this handle's own segments: one segment per chunk codec, slots in order.

    Every segment (and typed array) it makes is covered by the handle's `Lease` before it is created,
    and it writes into a segment only while that lease still covers it: once the lease lets the segment
    go (a rollback, or idle after a commit), new slots come from new segments.
    """

    def __init__(self, store: Store, cache: ArrayCache, lease: Lease) -> None:
        self._store = store
        self._cache = cache
        self.lease = lease
        self._generation = lease.generation
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
            segment = self._open[seg] = OpenSegment(self._store, seg)
        return SlotWriter(segment, slot, self._cache)

    def new_segment(self, chunk_compression: str | None) -> str:
        """Create a fresh segment (in this process: only one process may create arrays)."""
        seg = self.new_id()
        create_segment(self._store, seg, compression.zarr_compressors(chunk_compression))
        return seg

    def new_id(self) -> str:
        """A fresh segment id, covered by the lease (create the segment or typed array after this)."""
        self.hold()
        seg = new_segment_id()
        self.lease.cover(seg)
        self._generation = self.lease.generation
        return seg
