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

import contextlib
import os
import posixpath
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import google_crc32c  # zarr's own dependency: its crc32c codec uses it
import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.codecs import Crc32cCodec

from lakecompute.storage import plain_chain, temp_name, zstd_frame
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

_IOV_MAX = 1024  # the most parts one writev takes (POSIX's minimum is 16; Linux's 1024)
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


def _write_file(path: str, parts: Sequence[Any]) -> None:
    """Create ``path`` holding ``parts`` (bytes-like) one after the other: one ``writev`` for them all,
    without joining them first."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        pending = [memoryview(p).cast("B") for p in parts]
        while pending:
            written = os.writev(fd, pending[:_IOV_MAX])
            while pending and written >= len(pending[0]):
                written -= len(pending[0])
                pending.pop(0)
            if written:  # a short write ended inside a part
                pending[0] = pending[0][written:]
    finally:
        os.close(fd)


class _ChunkPut:
    """Stores whole chunks of a 1-D array on a local disk without zarr's asynchronous machinery.

    A small write through zarr (``array[a:b] = buf``) costs ~2 ms here, mostly hand-offs between
    the caller, zarr's event-loop thread and its worker threads; the work itself (zstd on 1 MiB
    plus one file write) is ~0.5 ms. Single-sample commits write one tail chunk per tensor, so
    for chunks that go to a `LocalStore` with the plain codecs (bytes, optionally zstd, optionally
    crc32c) we encode with the same libraries zarr uses and store the file the way zarr's LocalStore
    does (a temp file renamed over the chunk, so a reader sees the old or the new chunk whole).
    Anything else (other stores, codecs or zarr layouts) keeps going through zarr.

    The first chunk stored this way is read back through zarr and compared; on any mismatch the
    direct path is switched off and the chunk rewritten through zarr, so a zarr whose chunk format
    differs from what this class assumes costs speed, never data.
    """

    def __init__(self, array: zarr.Array[Any]) -> None:
        self.array = array
        self._root: str | None = None
        self._encode: Any = None
        self._checksum = False
        self._verified = False
        self._first = threading.Lock()
        self._dirs: set[str] = set()
        try:
            self._setup()
        except Exception:  # any surprise in zarr's layout: use zarr for everything
            self._root = None

    def _setup(self) -> None:
        from zarr.storage import LocalStore

        store = self.array.store_path.store
        if not isinstance(store, LocalStore):
            return
        chain = plain_chain(self.array)
        if chain is None:
            return
        self._checksum = chain.checksum
        if chain.zstd is not None:
            from numcodecs import Zstd

            zstd = Zstd(level=chain.zstd.level, checksum=chain.zstd.checksum)
            # A frame written without zstd carries no content checksum: only where none is asked for.
            self._encode = zstd.encode if chain.zstd.checksum else partial(zstd_frame, compress=zstd.encode)
        self._root = os.path.join(str(store.root), self.array.store_path.path)

    def _encoded(self, raw: np.ndarray) -> list[Any]:
        """A chunk's file as the parts written one after the other (the checksum is written after the
        encoded bytes, not appended to a copy of them: a megabyte copied per chunk)."""
        parts: list[Any]
        if self._encode is not None:
            encoded = self._encode(raw)  # zstd's bytes, or `zstd_frame`'s parts
            parts = [encoded] if isinstance(encoded, bytes) else encoded
        else:
            parts = [raw.view()]
            parts[0].flags.writeable = False  # crc32c takes read-only bytes only
        if self._checksum:
            # As zarr's Crc32cCodec: the checksum of the bytes, stored after them as a little-endian uint32.
            crc = 0
            for part in parts:
                crc = google_crc32c.extend(crc, part)
            parts.append(int(crc).to_bytes(4, "little"))
        return parts

    def _path(self, c: int) -> str:
        key = self.array.metadata.encode_chunk_key((c,))
        return os.path.join(self._root or "", *key.split("/"))

    def put(self, start: int, buf: np.ndarray, concurrent: bool = True) -> None:
        """Store ``buf`` (whole chunks) from ``start`` (a chunk boundary). ``concurrent``: many chunks
        go through zarr, which encodes and stores them on both cores; else they are stored one after
        another on this thread (a writer behind other Python work: zarr's event loop and workers would
        each take the GIL from that work, and wait a switch interval for it every time)."""
        if self._root is None or (concurrent and buf.size // int(self.array.chunks[0]) > 2):
            # Nothing to verify (reading a large write back to check it costs as much again as writing it).
            self.array[start : start + buf.size] = buf
            return
        if self._verified:
            self._store(start, buf)
            return
        # The first chunk stored directly is checked before any other (slots of one segment are written
        # from several threads): if the check switches the direct path off, nothing else used it.
        with self._first:
            self._store(start, buf)
            if not self._verified:  # one chunk tells whether zarr reads our format back
                size = int(self.array.chunks[0])
                try:
                    same = np.array_equal(np.asarray(self.array[start : start + size]), buf[:size])
                except Exception:  # zarr cannot decode it (a checksum or codec it disagrees with)
                    same = False
                if not same:
                    self._root = None
                    self.array[start : start + buf.size] = buf
                self._verified = True

    def _store(self, start: int, buf: np.ndarray) -> None:
        """Encode and store the chunks of ``buf`` as zarr would, each file replaced whole."""
        if self._root is None:  # the first chunk's check switched the direct path off
            self.array[start : start + buf.size] = buf
            return
        size = int(self.array.chunks[0])
        for j in range(buf.size // size):
            self._store_chunk(start // size + j, buf[j * size : (j + 1) * size].view(np.uint8))

    def _store_chunk(self, c: int, part: np.ndarray) -> None:
        data = self._encoded(part)
        path = self._path(c)
        folder = os.path.dirname(path)
        if folder not in self._dirs:
            os.makedirs(folder, exist_ok=True)
            self._dirs.add(folder)
        tmp = os.path.join(folder, temp_name(os.path.basename(path)))
        try:
            try:
                _write_file(tmp, data)
            except FileNotFoundError:  # the folder went away since we made it
                os.makedirs(folder, exist_ok=True)
                _write_file(tmp, data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


class _Appender:
    """Appends values to a 1-D array from ``start``, writing whole chunks only."""

    def __init__(
        self,
        put: _ChunkPut,
        start: int,
        chunk: int,
        dtype: np.dtype[Any],
        concurrent: bool = True,
        hold_tail: bool = False,
    ) -> None:
        self._put = put
        self._concurrent = concurrent
        self._hold = hold_tail
        self.pos = start
        self.chunk = chunk
        self.tail = np.empty(0, dtype=dtype)  # values of the last, partly filled chunk
        self._tail_chunk: np.ndarray | None = None  # that chunk, zero-padded, when kept
        self.unsealed = False  # (hold_tail) the tail's values are not stored yet

    def seal(self) -> None:
        """(hold_tail) Store the partly filled last chunk, zero-padded, if its values are not stored yet."""
        if not self.unsealed:
            return
        last = np.zeros(self.chunk, dtype=self.tail.dtype)
        last[: self.tail.size] = self.tail
        self._put.put(self.pos - self.tail.size, last, self._concurrent)
        self.unsealed = False

    def append(self, values: np.ndarray) -> int:
        offset = self.pos
        if values.size == 0:
            return offset
        if self._hold:
            return self._append_held(values)
        chunk_start = self.pos - self.tail.size
        total = self.tail.size + values.size
        if total < self.chunk:
            # Still inside the tail chunk (every small commit): fill the zero-padded chunk kept
            # from the last write instead of allocating and copying 1 MiB again.
            if self._tail_chunk is None:
                self._tail_chunk = np.zeros(self.chunk, dtype=self.tail.dtype)
                self._tail_chunk[: self.tail.size] = self.tail
            self._tail_chunk[self.tail.size : total] = values
            self._put.put(chunk_start, self._tail_chunk, self._concurrent)
            self.tail = self._tail_chunk[:total]
            self.pos += values.size
            return offset
        if values.size >= 2 * self.chunk:
            return self._append_large(values)
        padded = -(-total // self.chunk) * self.chunk
        buf = np.zeros(padded, dtype=self.tail.dtype)
        buf[: self.tail.size] = self.tail
        buf[self.tail.size : total] = values
        self._put.put(chunk_start, buf, self._concurrent)
        full = (total // self.chunk) * self.chunk
        self.tail = buf[full:total].copy()
        self._tail_chunk = None
        self.pos += values.size
        return offset

    def _append_held(self, values: np.ndarray) -> int:
        """Append, storing only the chunks that are full: the partly filled last one stays in memory
        (`seal` stores it). A writer that appends many times before anything it wrote is read or
        committed (an eval's task) stores each chunk once, instead of storing the last one padded at
        every append and again, fuller, at the next."""
        offset, chunk, kept = self.pos, self.chunk, self.tail.size
        start = self.pos - kept  # a chunk boundary: where the tail's chunk begins
        total = kept + values.size
        if total < chunk:
            self.tail = np.concatenate((self.tail, values)) if kept else values.copy()
        else:
            lead = (chunk - kept) % chunk  # values that fill the tail's chunk (none without a tail)
            if kept:
                first = np.empty(chunk, dtype=self.tail.dtype)
                first[:kept] = self.tail
                first[kept:] = values[:lead]
                self._put.put(start, first, self._concurrent)
                start += chunk
            whole = lead + (values.size - lead) // chunk * chunk
            if whole > lead:
                self._put.put(start, values[lead:whole], self._concurrent)
            self.tail = values[whole:].copy()
        self.unsealed = self.tail.size > 0
        self.pos += values.size
        return offset

    def _append_large(self, values: np.ndarray) -> int:
        """Append many chunks' worth: the whole chunks inside ``values`` are stored from ``values``
        itself; only the chunk the tail starts and the last, partial one are copied (and padded)."""
        offset, chunk, kept = self.pos, self.chunk, self.tail.size
        start = self.pos - kept  # a chunk boundary: where the tail's chunk begins
        lead = (chunk - kept) % chunk  # values that fill the tail's chunk (none without a tail)
        if kept:
            first = np.empty(chunk, dtype=self.tail.dtype)
            first[:kept] = self.tail
            first[kept:] = values[:lead]
            self._put.put(start, first, self._concurrent)
            start += chunk
        whole = lead + (values.size - lead) // chunk * chunk
        if whole > lead:
            self._put.put(start, values[lead:whole], self._concurrent)
            start += whole - lead
        rest = values[whole:]
        if rest.size:
            last = np.zeros(chunk, dtype=self.tail.dtype)
            last[: rest.size] = rest
            self._put.put(start, last, self._concurrent)
        self.tail = rest.copy()
        self._tail_chunk = None
        self.pos += values.size
        return offset


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
        self._puts: dict[str, _ChunkPut] = {}
        self._lock = threading.Lock()  # slots of one segment are written from several threads

    def put(self, array: str) -> _ChunkPut:
        """The chunk writer of the segment's ``data`` or ``index`` array."""
        with self._lock:
            put = self._puts.get(array)
            if put is None:
                opened = zarr.open_array(self.store, path=segment_key(self.seg_id, array), mode="r+")
                put = self._puts[array] = _ChunkPut(_for_writing(opened))
            return put


class SlotWriter:
    """Writes sample bytes and index rows into one slot of one segment.

    Args:
        segment: the segment, opened (shared by the writers of its slots).
        slot: the slot this writer owns.
        cache: the chunk cache of the handle that reads what it writes, told which chunks changed.
        concurrent: store many chunks at once through zarr (for a caller that waits for the write);
            False stores them one after another on the writing thread (see `_ChunkPut.put`).
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
        self._data_: _Appender | None = None
        self._index_: _Appender | None = None
        self._concurrent = concurrent
        self._hold = hold_tails

    @property
    def _data(self) -> _Appender:
        if self._data_ is None:
            put = self._segment.put("data")
            self._data_ = _Appender(
                put, self.slot * SLOT_BYTES, DATA_CHUNK, np.dtype("uint8"), self._concurrent, self._hold
            )
        return self._data_

    @property
    def _index(self) -> _Appender:
        if self._index_ is None:
            put = self._segment.put("index")
            self._index_ = _Appender(
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
