"""Segments: long-lived, write-once byte arrays that hold every tensor's data.

A segment is a pair of 1-D zarr arrays under ``segments/<id>/``: ``data`` (uint8, the sample
bytes) and ``index`` (int64, per-sample rows ``[nbytes, *shape]`` for samples whose shapes vary
or that are encoded). Both arrays are created with an enormous shape: unwritten chunks cost
nothing, so the space is carved into *slots* of ``SLOT_BYTES`` bytes (and ``SLOT_INDEX`` index
entries) that start on a chunk boundary. One slot is written by exactly one writer (a dataset
handle or an eval task), which is the condition STORAGE-NOTES.md measured as lossless for
concurrent zarr writers. A writer only ever appends inside its slot, and always writes whole
chunks (the partly filled last chunk is kept in memory and rewritten, padded, with the next
write), so zarr never has to read a chunk back to merge a partial write.

Which bytes form a tensor is decided by the version manifest, never by the arrays' shapes.
"""

from __future__ import annotations

import os
import posixpath
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.codecs import Crc32cCodec

from lakecompute.versioned._chunkfiles import Appender, ChunkPut
from lakecompute.versioned._keys import SEGMENTS, TENSORS, segment_key

if TYPE_CHECKING:
    from lakecompute.storage import ArrayCache

__all__ = [
    "ARRAY_RULES",
    "CAPACITY_BYTES",
    "CAPACITY_INDEX",
    "DATA_CHUNK",
    "INDEX_CHUNK",
    "MAX_SLOTS",
    "SLOT_BYTES",
    "SLOT_INDEX",
    "STREAM_SEGMENT",
    "Compressors",
    "OpenSegment",
    "SlotWriter",
    "checked_codecs",
    "create_segment",
    "create_typed_array",
    "new_segment_id",
]

DATA_CHUNK = 1 << 20  # 1 MiB: zarr's fixed cost per chunk is small next to this (STORAGE-NOTES)
INDEX_CHUNK = 1 << 13  # int64 entries: 64 KiB
SLOT_BYTES = 1 << 40  # virtual bytes per slot; 2**22 slots fit in one segment
SLOT_INDEX = 1 << 34
CAPACITY_BYTES = 1 << 62  # the shape of every data array: unwritten chunks cost nothing
CAPACITY_INDEX = 1 << 56  # the shape of every index array
MAX_SLOTS = CAPACITY_BYTES // SLOT_BYTES


def new_segment_id() -> str:
    """A unique, time-ordered segment name (the time lets cleanup spare young segments)."""
    return f"{int(time.time() * 1000):013d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def segment_time(seg_id: str) -> float:
    """The creation time (seconds since the epoch) encoded in a segment name."""
    try:
        return int(seg_id.split("-", 1)[0]) / 1000.0
    except ValueError:
        return 0.0


#: What a segment without a chunk compression is stored with. Each writer pads the last chunk of its
#: slot with zeros (zarr stores whole chunks), so stored raw, every writer of encoded images, text
#: or json would leave up to a MiB of zeros on disk; zstd's fast negative levels squeeze that to
#: nothing, at ~0.3 ms per MiB of incompressible bytes (PNG, JPEG) to write and less to read.
PADDING_CODEC_LEVEL = -1


def segment_codecs(compressors: tuple[Any, ...]) -> tuple[Any, ...]:
    """The chunk codecs of a new segment's data array: the tensor's ``compressors``, or fast zstd when
    it has none (see `PADDING_CODEC_LEVEL`), then the checksum."""
    return checked_codecs(compressors or (zarr.codecs.ZstdCodec(level=PADDING_CODEC_LEVEL),))


#: The ``lakecompute`` attribute of a typed stream's data array: a segment whose data array holds the
#: values of numeric samples of varying shapes in their own dtype (token ids, say) instead of bytes, and
#: whose index sizes count those values. ``compact()`` writes them; plain zarr opens them as one array.
STREAM_SEGMENT = "compacted-stream"


#: A chunk compression's zarr codecs (``compression.zarr_compressors``): the table stores chunks with the
#: codecs the layer above chose, and knows no sample encoding.
Compressors = Callable[[str | None], tuple[Any, ...]]


class _ArrayRules:
    """The arrays of the table, as every chunk cache opened on a dataset checks them when it opens one
    (`lakecompute.storage.ArrayRules`)."""

    def refuse(self, path: str, arr: zarr.Array[Any]) -> str | None:
        if not path.startswith(f"{SEGMENTS}/"):
            return None
        # A segment's data array holds bytes — or, in a typed stream that compact() wrote, the values of
        # numeric samples of varying shapes in their own dtype — and its index holds int64 rows.
        stream = arr.attrs.get("lakecompute") == STREAM_SEGMENT and arr.dtype.kind in "biuf"
        expected = {"data": np.uint8, "index": np.int64}.get(path.rsplit("/", 1)[-1])
        dtype_ok = arr.dtype == expected or (stream and path.endswith("/data"))
        if expected is None or arr.ndim != 1 or not dtype_ok:
            return f"expected a 1-D segment array, got {arr.ndim}-D {arr.dtype}"
        return None

    def zeros_when_unchecked(self, path: str) -> bool:
        # A typed array compact() wrote before chunks carried checksums: zarr skipped chunks of zeros
        # then, so a missing chunk there means zeros.
        return path.startswith(f"{TENSORS}/")


#: What the chunk caches of a dataset check of the arrays they open.
ARRAY_RULES = _ArrayRules()


def checked_codecs(compressors: tuple[Any, ...]) -> tuple[Any, ...]:
    """``compressors`` followed by zarr's ``crc32c`` codec: every chunk carries a checksum of its
    stored bytes, which zarr verifies on every read (a flipped bit or a torn chunk raises)."""
    return (*compressors, Crc32cCodec())


def create_segment(store: Store, seg_id: str, compressors: tuple[Any, ...]) -> None:
    """Create the ``data`` and ``index`` arrays of a new segment (one process only).

    A segment's metadata documents are the same for every segment with the same codecs (zarr v3
    metadata names no path), so zarr makes them once per process, in memory (`_segment_documents`),
    and each new segment stores those bytes in one call to zarr's event loop, with the ``segments``
    folder's own document where a new dataset lacks it: 2.4-3.2 ms for both arrays, where
    ``zarr.create_array`` took 6.2-6.8 ms, checking the path and each of its parents first. A new
    segment's id is unique (`new_segment_id`): there is nothing there to check.
    """
    from zarr.core.sync import sync

    codecs = _SegmentCodecs(segment_codecs(compressors), checked_codecs((zarr.codecs.ZstdCodec(level=1),)))
    documents = _segment_documents(codecs)
    if documents is None:  # not the documents this module knows: let zarr create the arrays
        _create_parts(store, seg_id, codecs)
        return
    own = {f"{segment_key(seg_id)}/{name}": data for name, data in documents.items() if name != _FOLDER}
    sync(_put_all(store, own, (f"{SEGMENTS}/{_ZARR_JSON}", documents[_FOLDER])))


@dataclass(frozen=True, slots=True)
class _SegmentCodecs:
    """The codecs of a segment's two arrays."""

    data: tuple[Any, ...]
    index: tuple[Any, ...]


def _create_parts(store: Store, seg_id: str, codecs: _SegmentCodecs) -> None:
    _create_part(store, seg_id, "data", CAPACITY_BYTES, DATA_CHUNK, "uint8", codecs.data)
    _create_part(store, seg_id, "index", CAPACITY_INDEX, INDEX_CHUNK, "int64", codecs.index)


_ZARR_JSON = "zarr.json"
#: A segment's documents, by key relative to its folder: its group's, its arrays', and the ``segments``
#: folder's (``../zarr.json``).
_DOCUMENT_NAMES = (_ZARR_JSON, f"data/{_ZARR_JSON}", f"index/{_ZARR_JSON}", f"../{_ZARR_JSON}")
_FOLDER = _DOCUMENT_NAMES[-1]
_DOCUMENTS: dict[str, dict[str, bytes] | None] = {}


def _segment_documents(codecs: _SegmentCodecs) -> dict[str, bytes] | None:
    """A segment's metadata documents (`_DOCUMENT_NAMES`) with ``codecs``, as zarr writes them: made
    once per process, by creating a segment in memory. None if zarr wrote other documents than these
    (then segments are created through zarr)."""
    import json

    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync
    from zarr.storage import MemoryStore

    chains = (codecs.data, codecs.index)
    config = json.dumps([[c.to_dict() for c in chain] for chain in chains], sort_keys=True)
    if config not in _DOCUMENTS:
        memory = MemoryStore()
        _create_parts(memory, "template", codecs)
        folder = segment_key("template")
        written = set(sync(_list(memory)))
        keys = {name: posixpath.normpath(f"{folder}/{name}") for name in _DOCUMENT_NAMES}
        expected = {*keys.values(), _ZARR_JSON}  # and the root group's, which a dataset has already
        prototype = default_buffer_prototype()
        stored = {name: sync(memory.get(key, prototype=prototype)) for name, key in keys.items()}
        documents = {name: buffer.to_bytes() for name, buffer in stored.items() if buffer is not None}
        _DOCUMENTS[config] = documents if written == expected and len(documents) == len(keys) else None
    return _DOCUMENTS[config]


async def _list(store: Store) -> list[str]:
    return [key async for key in store.list()]


async def _put_all(store: Store, documents: dict[str, bytes], unless_there: tuple[str, bytes]) -> None:
    """Store ``documents`` (key: bytes) together, and ``unless_there`` (key, bytes) if its key is missing."""
    import asyncio

    from zarr.core.buffer import default_buffer_prototype

    buffer = default_buffer_prototype().buffer
    key, data = unless_there
    puts = [store.set(k, buffer.from_bytes(v)) for k, v in documents.items()]
    if not await store.exists(key):
        puts.append(store.set(key, buffer.from_bytes(data)))
    await asyncio.gather(*puts)


def _create_part(
    store: Store, seg_id: str, part: str, size: int, chunk: int, dtype: str, codecs: tuple[Any, ...]
) -> None:
    """Create array ``part`` of a new segment: 1-D, ``size`` long, zeros where unwritten."""
    zarr.create_array(
        store,
        name=segment_key(seg_id, part),
        shape=(size,),
        chunks=(chunk,),
        dtype=dtype,
        fill_value=0,
        compressors=codecs,
        attributes={"lakecompute": f"segment-{part}"},
    )


def create_typed_array(
    store: Store,
    path: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    dtype: Any,
    compressors: tuple[Any, ...],
    attributes: dict[str, Any],
) -> zarr.Array[Any]:
    """Create a typed ``(n, *shape)`` array (what ``compact()`` writes), returned ready for writing.

    Its chunks carry checksums, and every chunk is stored, even one of zeros, so that a reader can
    tell a missing chunk (damage) from zeros.
    """
    arr = zarr.create_array(
        store,
        name=path,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=0,
        compressors=checked_codecs(compressors),
        attributes=attributes,
    )
    return _for_writing(arr)


def _for_writing(array: zarr.Array[Any]) -> zarr.Array[Any]:
    """``array`` with ``write_empty_chunks`` on.

    With it off (zarr's default) every chunk write first compares the whole chunk with the fill
    value (``np.array_equal`` against a broadcast scalar: ~4 ms per 1 MiB chunk here, twice the
    cost of encoding and storing it). Our writes are whole chunks that are almost never all
    zeros, and a chunk of zeros that is stored reads back exactly like one that is not.
    """
    try:
        return array.with_config({"write_empty_chunks": True})
    except (AttributeError, TypeError):  # a zarr without per-array runtime config
        return array


class OpenSegment:
    """A segment's two arrays opened for writing, shared by every slot writer of the segment.

    Opening a zarr array reads its metadata (a store round trip and zarr's event loop: milliseconds),
    and the direct chunk path checks its first chunk by reading it back: done once per segment and
    array, a commit that writes into many tensors costs no more per tensor than the chunks it stores.
    Each array is opened when a slot first writes to it (uniform arrays never write the index).
    """

    def __init__(self, store: Store, seg_id: str) -> None:
        self.store = store
        self.seg_id = seg_id
        self._puts: dict[str, ChunkPut] = {}
        self._lock = threading.Lock()  # slots of one segment are written from several threads

    def put(self, array: str) -> ChunkPut:
        """The chunk writer of the segment's ``data`` or ``index`` array."""
        with self._lock:
            put = self._puts.get(array)
            if put is None:
                opened = zarr.open_array(self.store, path=segment_key(self.seg_id, array), mode="r+")
                put = self._puts[array] = ChunkPut(_for_writing(opened))
            return put


class SlotWriter:
    """Writes sample bytes and index rows into one slot of one segment.

    Args:
        segment: the segment, opened (shared by the writers of its slots).
        slot: the slot this writer owns.
        cache: the chunk cache of the handle that reads what it writes, told which chunks changed.
        concurrent: store many chunks at once through zarr (for a caller that waits for the write);
            False stores them one after another on the writing thread (see `ChunkPut.put`).
        hold_tails: store only whole chunks as samples come, and the partly filled last chunk of the
            data and of the index at `seal` (for a writer whose writes nobody reads or commits before it
            is done: an eval's task). Without it each write stores that chunk padded, and the next
            stores it again.
    """

    def __init__(
        self,
        segment: OpenSegment,
        slot: int,
        cache: ArrayCache | None = None,
        concurrent: bool = True,
        hold_tails: bool = False,
    ) -> None:
        if not 0 <= slot < MAX_SLOTS:
            raise ValueError(f"slot {slot} outside 0..{MAX_SLOTS - 1}")
        if hold_tails and cache is not None:
            raise ValueError("a writer whose writes are read as they are made cannot hold its tails")
        self.seg_id = segment.seg_id
        self.slot = slot
        self._cache = cache
        self._segment = segment
        self._data_: Appender | None = None
        self._index_: Appender | None = None
        self._concurrent = concurrent
        self._hold = hold_tails

    @property
    def _data(self) -> Appender:
        if self._data_ is None:
            put = self._segment.put("data")
            self._data_ = Appender(
                put, self.slot * SLOT_BYTES, DATA_CHUNK, np.dtype("uint8"), self._concurrent, self._hold
            )
        return self._data_

    @property
    def _index(self) -> Appender:
        if self._index_ is None:
            put = self._segment.put("index")
            self._index_ = Appender(
                put, self.slot * SLOT_INDEX, INDEX_CHUNK, np.dtype("int64"), self._concurrent, self._hold
            )
        return self._index_

    def write_data(self, payload: np.ndarray) -> int:
        """Append raw bytes (a uint8 array); returns their offset in the data array."""
        first = self._data.pos // DATA_CHUNK
        off = self._data.append(payload)
        if self._cache is not None:
            # Our own reads may have cached the old, shorter tail chunk.
            last = max(first, (self._data.pos - 1) // DATA_CHUNK)
            self._cache.forget(segment_key(self.seg_id, "data"), first, last)
        return off

    def seal(self) -> None:
        """Store what a writer with ``hold_tails`` holds back: the partly filled last chunk of its data and
        of its index. What it wrote may be committed (or read) only after this."""
        for appender in (self._data_, self._index_):
            if appender is not None:
                appender.seal()

    def write_index(self, rows: np.ndarray) -> int:
        """Append index entries (an int64 array, flattened rows); returns their offset."""
        first = self._index.pos // INDEX_CHUNK
        off = self._index.append(rows.reshape(-1))
        if self._cache is not None:
            last = max(first, (self._index.pos - 1) // INDEX_CHUNK)
            self._cache.forget(segment_key(self.seg_id, "index"), first, last)
        return off
