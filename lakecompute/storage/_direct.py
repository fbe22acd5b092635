"""Whole chunks of a 1-D array read from a local disk directly, without zarr's asynchronous machinery.

`ArrayCache` (`lakecompute.storage._cache`) reads a chunk through `DirectChunks` when the array's
layout allows it (`lakecompute.storage._probes`), else through zarr.
"""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
import zarr

from lakecompute.storage._chain import plain_chain
from lakecompute.storage._checked import (
    DECODE_ERRORS,
    MissingChunkError,
    decode_chunk,
    read_chunk_file,
    verify_checksum,
    zstd_content_size,
)
from lakecompute.storage._probes import LAYOUT_PROBES

if TYPE_CHECKING:
    from lakecompute.storage._cache import ArrayCache

__all__ = ["DirectChunks", "StoredChunk"]


class DirectChunks:
    """Reads whole chunks of a 1-D array from a local disk without zarr's asynchronous machinery.

    A one-chunk read through zarr costs ~1 ms more than its work here (hand-offs between the caller,
    zarr's event-loop thread and its worker threads), and sample-by-sample scans and random reads
    read one chunk at a time. For a `LocalStore` array with the codecs segments use (bytes,
    then optionally zstd, then optionally crc32c) the file is read and decoded with the libraries
    zarr itself uses, with the same checks: a missing file, a link, a failed checksum or a frame
    that does not decode to exactly one chunk raise as they would through zarr. Anything else
    (other stores, codecs, N-D arrays) goes through zarr, by design and silently.

    Whether this zarr writes chunks the way the direct reader decodes them is decided from the
    array's metadata alone (`LayoutProbes`: a small probe array with the same dtype and codecs,
    written by zarr in memory once per process), never by comparing the dataset's own chunks: a chunk
    that a concurrent writer is filling may change between two reads, which says nothing about the
    layout. When the probe disagrees, or the metadata surprises `_setup`, the direct path is off and
    one `LakeComputeWarning` per process says so.
    """

    def __init__(self, cache: ArrayCache, root: str | None, path: str, arr: zarr.Array[Any]) -> None:
        # The cache holds this reader: a weak reference back, so that the two are not a cycle that only
        # the garbage collector frees (with the cache's decoded chunks).
        self.cache = cast("ArrayCache", weakref.proxy(cache))
        self.path = path
        self.arr = arr
        self._folder: str | None = None
        self._zstd: Any = None
        self._checksum = False
        try:
            self._setup(root)
        except Exception as exc:  # any surprise in zarr's metadata: read through zarr, and say so
            self._folder = None
            LAYOUT_PROBES.fell_back(path, f"its metadata surprised the reader: {type(exc).__name__}: {exc}")

    def _setup(self, root: str | None) -> None:
        if root is None:
            return
        chain = plain_chain(self.arr)
        if chain is None:
            return
        self._checksum = chain.checksum
        if chain.zstd is not None:
            from numcodecs import Zstd

            self._zstd = Zstd()
        self._size = int(self.arr.chunks[0])
        reason = LAYOUT_PROBES.verdict(chain.metadata, self.arr.dtype, self._zstd, self._checksum)
        if reason is not None:
            LAYOUT_PROBES.fell_back(self.path, reason)
            return
        self._folder = os.path.join(root, *self.path.split("/"))

    @property
    def local(self) -> bool:
        """Whether chunks are read here (else `get` gives None: they are read through zarr)."""
        return self._folder is not None

    def get(self, c: int) -> np.ndarray | None:
        """Chunk ``c``, decoded and checked; None when this chunk must be read through zarr."""
        if self._folder is None:
            return None
        key = self.arr.metadata.encode_chunk_key((c,))
        try:
            values = self._read(os.path.join(self._folder, *key.split("/")), f"{self.path}/{key}")
        except MissingChunkError as exc:
            raise self.cache.damaged(exc.key, exc.reason) from None
        except DECODE_ERRORS as exc:
            reason = f"the chunk does not decode ({type(exc).__name__}: {exc})"
            raise self.cache.damaged(f"{self.path}/{key}", reason) from exc
        return values

    def _read(self, file: str, key: str) -> np.ndarray:
        return decode_chunk(
            read_chunk_file(file, key), self.arr.dtype, self._size, self._zstd, self._checksum
        )

    def stored(self, c: int) -> StoredChunk | np.ndarray:
        """Chunk ``c`` as stored, checked but not decoded yet (see `decode_into`): its checksum, and the
        size its frame declares; a chunk whose frame declares none comes decoded (`get`)."""
        assert self._folder is not None, "only for chunks read here (local)"
        key = self.arr.metadata.encode_chunk_key((c,))
        file, name = os.path.join(self._folder, *key.split("/")), f"{self.path}/{key}"
        try:
            payload = (
                verify_checksum(read_chunk_file(file, name))
                if self._checksum
                else read_chunk_file(file, name)
            )
            nbytes = self._size * self.arr.dtype.itemsize
            declared = len(payload) if self._zstd is None else zstd_content_size(payload)
            if declared is None:
                return decode_chunk(payload, self.arr.dtype, self._size, self._zstd, False)
            if declared != nbytes:
                raise ValueError(f"expected {nbytes} bytes, got {declared}")
        except MissingChunkError as exc:
            raise self.cache.damaged(exc.key, exc.reason) from None
        except DECODE_ERRORS as exc:
            reason = f"the chunk does not decode ({type(exc).__name__}: {exc})"
            raise self.cache.damaged(name, reason) from exc
        return StoredChunk(name, payload)

    def decode_into(self, chunk: StoredChunk, out: np.ndarray) -> None:
        """Decode a chunk `stored` gave into ``out`` (a contiguous part of the result, the chunk's size)."""
        target = out.reshape(-1).view(np.uint8)
        try:
            if self._zstd is None:
                target[:] = np.frombuffer(chunk.payload, dtype=np.uint8)
            else:
                self._zstd.decode(chunk.payload, out=target)
        except DECODE_ERRORS as exc:
            reason = f"the chunk does not decode ({type(exc).__name__}: {exc})"
            raise self.cache.damaged(chunk.key, reason) from exc


class StoredChunk(NamedTuple):
    """A chunk as stored (its checksum verified), to be decoded into its place in a larger read."""

    key: str
    payload: bytes | memoryview
