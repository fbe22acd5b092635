"""Whole chunks of a segment's 1-D arrays, stored directly on a local disk: `ChunkPut` stores them (as zarr
would, each file replaced whole), `Appender` appends values to an array from a slot's start, storing whole
chunks only.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from functools import partial
from typing import Any

import google_crc32c  # zarr's own dependency: its crc32c codec uses it
import numpy as np
import zarr

from lakecompute.storage import plain_chain, temp_name, zstd_frame

__all__ = ["Appender", "ChunkPut"]

_IOV_MAX = 1024  # the most parts one writev takes (POSIX's minimum is 16; Linux's 1024)


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


class ChunkPut:
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


class Appender:
    """Appends values to a 1-D array from ``start``, writing whole chunks only."""

    def __init__(
        self,
        put: ChunkPut,
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
        offset = self.pos
        if self.tail.size + values.size < self.chunk:
            self.tail = np.concatenate((self.tail, values)) if self.tail.size else values.copy()
        else:
            _, whole = self._store_whole(values)
            self.tail = values[whole:].copy()
        self.unsealed = self.tail.size > 0
        self.pos += values.size
        return offset

    def _append_large(self, values: np.ndarray) -> int:
        """Append many chunks' worth: the whole chunks inside ``values`` are stored from ``values``
        itself; only the chunk the tail starts and the last, partial one are copied (and padded)."""
        offset = self.pos
        start, whole = self._store_whole(values)
        rest = values[whole:]
        if rest.size:
            last = np.zeros(self.chunk, dtype=self.tail.dtype)
            last[: rest.size] = rest
            self._put.put(start, last, self._concurrent)
        self.tail = rest.copy()
        self._tail_chunk = None
        self.pos += values.size
        return offset

    def _store_whole(self, values: np.ndarray) -> tuple[int, int]:
        """Store the chunk the tail starts, filled from ``values`` (at least that many of them), and the
        whole chunks inside ``values`` after it, from ``values`` itself; where the next chunk starts,
        and how many of ``values`` were stored."""
        chunk, kept = self.chunk, self.tail.size
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
        return start, whole
