"""What a version uses of each chunk: the part of a chunk whose bytes never change again.

A local cache of stored chunks (`lakecompute.storage.RemoteChunks`) must never serve bytes a chunk no
longer holds. A segment's slot is written by one writer, appended to only, in whole chunks: the partly
filled last chunk is stored padded and rewritten with the next write, under the same key. So the items
of a chunk up to the last one a version's fragments name are final, and those after it are not.
`ChunkFills` says, for a version (or a handle's working copy), how many items of each chunk it uses;
the cache keeps a chunk with that count and serves an entry only to a reader that needs no more.

Slots start on chunk boundaries (`SLOT_BYTES`, `SLOT_INDEX` are multiples of the chunk sizes), so a chunk
lies in one slot, and the last item a version names in that slot bounds what it uses of the chunk. A
typed array ``compact()`` wrote is stored whole before any version names it: all of it is final.
"""

from __future__ import annotations

from collections.abc import Iterable

from lakecompute.versioned._keys import TYPED_PREFIX, segment_key
from lakecompute.versioned._manifest import TensorState
from lakecompute.versioned._segments import SLOT_BYTES, SLOT_INDEX

__all__ = ["WHOLE_ARRAY", "ChunkFills"]

#: The fill of a chunk of an array stored whole before any version names it (a typed array).
WHOLE_ARRAY = 2**64 - 1


class ChunkFills:
    """How many items of each chunk of the table's arrays a version uses (0: none).

    Args:
        states: the tensors of the version (or of a handle's working copy, its written samples
            included).
    """

    def __init__(self, states: Iterable[TensorState]) -> None:
        # array path -> slot -> the end (in items) of the last run a fragment names in the slot
        self._ends: dict[str, dict[int, int]] = {}
        self._typed: set[str] = set()
        for state in states:
            for f in state.fragments:
                if f.seg.startswith(TYPED_PREFIX):
                    self._typed.add(f.seg[len(TYPED_PREFIX) :])
                    continue
                self._note(segment_key(f.seg, "data"), f.off // SLOT_BYTES, f.off + f.nbytes)
                if f.idx is not None:
                    self._note(
                        segment_key(f.seg, "index"), f.idx // SLOT_INDEX, f.idx + f.total * (1 + f.ndim)
                    )

    def _note(self, path: str, slot: int, end: int) -> None:
        slots = self._ends.setdefault(path, {})
        if end > slots.get(slot, 0):
            slots[slot] = end

    def fill(self, path: str, c: int, size: int) -> int:
        """Items of chunk ``c`` (of ``size`` items) of the array at ``path`` the version uses: final, so
        that an entry holding them serves it (`WHOLE_ARRAY` for a typed array's; 0 for a chunk it does
        not use, or an array that is not the table's)."""
        if path in self._typed:
            return WHOLE_ARRAY
        slots = self._ends.get(path)
        if slots is None or size <= 0:
            return 0
        start = c * size
        per_slot = SLOT_BYTES if path.endswith("/data") else SLOT_INDEX
        end = slots.get(start // per_slot, 0)
        return max(0, min(size, end - start))
