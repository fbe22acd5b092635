"""Chunks of a dataset on object storage read through the local disk cache (`DiskCache`).

`ArrayCache` (`lakecompute.storage._cache`) reads a chunk of a remote array through `RemoteChunks` when
the handle was opened with a cache (``cache_dir=``), else through zarr as before.

**Why (dataset, key, fill) names a chunk's bytes.** A segment's slot is written by one writer, only
ever appended to, in whole chunks: the partly filled last chunk is rewritten, padded, with the next
write (`lakecompute.versioned._segments`). So the bytes of a chunk up to the last item written never
change again, while the items after it (zeros, then new samples) do. The version a reader reads says,
through its fragments, how many items of each chunk it uses (its *fill*, computed by the table layer,
`lakecompute.versioned.ChunkFills`); an entry holding at least that many final items serves it, and
one holding fewer is fetched again and replaced. A chunk of a typed array ``compact()`` wrote is whole
before any version names it (`WHOLE`). Arrays whose chunks carry no crc32c (datasets written before
checksums) are never cached: the cache could not verify them.

**Keeping S3 busy.** The chunks a read needs that the cache lacks are fetched together, concurrently,
on zarr's own event loop (no thread of ours): a loader batch over many chunks costs one round trip, not
one per chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from lakecompute.storage._chain import plain_chain
from lakecompute.storage._checked import DECODE_ERRORS, decode_chunk, verify_checksum
from lakecompute.storage._diskcache import DiskCache, about_note, namespace
from lakecompute.storage._probes import LAYOUT_PROBES

if TYPE_CHECKING:
    from zarr.abc.store import Store

    from lakecompute.storage._backend import Backend
    from lakecompute.storage._cache import ArrayCache

__all__ = ["Fills", "RemoteChunks", "chunk_span", "chunks_covered"]

#: How many items of chunk ``c`` (of ``size`` items) of the array at ``path`` the version read uses
#: ``(path, c, size)``: 0 for none, or an array the format does not let the cache keep.
Fills = Callable[[str, int, int], int]

#: Chunks fetched at once by one read (bounds the bytes held before they are decoded: 64 MiB chunks at
#: most, `MAX_CHUNK_BYTES`, so at most a few hundred MiB in the worst case, a few MiB in practice).
_FETCH_GROUP = 16


class _Layout:
    """How the chunks of one array are decoded here, once its layout is known to be zarr's."""

    def __init__(self, arr: zarr.Array[Any]) -> None:
        self.usable = False
        self.zstd: Any = None
        self.size = int(arr.chunks[0]) if arr.ndim == 1 else 0
        self.dtype = arr.dtype
        self.arr = arr
        chain = plain_chain(arr)
        if chain is None or not chain.checksum:
            return  # N-D, other codecs, or no checksum to verify an entry with: never cached
        if chain.zstd is not None:
            from numcodecs import Zstd

            self.zstd = Zstd()
        self.usable = LAYOUT_PROBES.verdict(chain.metadata, arr.dtype, self.zstd, True) is None

    def key(self, path: str, c: int) -> str:
        return f"{path}/{self.arr.metadata.encode_chunk_key((c,))}"


class RemoteChunks:
    """One dataset's chunks kept in a `DiskCache`: read from it when an entry holds what the version uses,
    fetched from the store (several at once) and kept otherwise.

    Args:
        disk: the cache.
        backend: the dataset's backend (its place names the entries, with the id).
        dataset_id: the dataset's id.
        fills: what the version read uses of each chunk (`Fills`).
    """

    def __init__(self, disk: DiskCache, backend: Backend, dataset_id: str, fills: Fills) -> None:
        self.disk = disk
        self.ns = namespace(backend.place(), dataset_id)
        self.about = about_note(backend.url, dataset_id)
        self.fills = fills
        self._layouts: dict[str, _Layout] = {}
        #: Chunks fetched from the store and served from the disk, in this process (for tests and bench).
        self.fetched = 0
        self.hits = 0

    def _layout(self, path: str, arr: zarr.Array[Any]) -> _Layout:
        layout = self._layouts.get(path)
        if layout is None:
            layout = self._layouts[path] = _Layout(arr)
        return layout

    def cacheable(self, path: str, arr: zarr.Array[Any], c: int) -> bool:
        """Whether chunk ``c`` of the array at ``path`` is read through the disk cache."""
        layout = self._layout(path, arr)
        return layout.usable and self.fills(path, c, layout.size) > 0

    def holds(self, path: str, arr: zarr.Array[Any], c: int) -> bool:
        """Whether the disk cache has an entry of chunk ``c`` that holds what the version uses (its
        header checked; its bytes are checked when read): the chunk was stored, without a request."""
        if not self.cacheable(path, arr, c):
            return False
        layout = self._layout(path, arr)
        return self.disk.holds(self.ns, layout.key(path, c), self.fills(path, c, layout.size))

    def get_many(
        self, cache: ArrayCache, path: str, arr: zarr.Array[Any], chunks: Iterable[int]
    ) -> dict[int, np.ndarray]:
        """Chunks ``chunks`` (each cacheable), decoded and verified: from the disk where an entry holds
        what the version uses, the others fetched concurrently, verified, kept, then decoded.

        Raises:
            DatasetCorruptError: a chunk is missing from the store or does not decode (named by key).
        """
        layout = self._layout(path, arr)
        wanted = list(chunks)

        def from_disk(c: int) -> np.ndarray | None:
            data = self.disk.read(self.ns, layout.key(path, c), self.fills(path, c, layout.size))
            return None if data is None else self._decode(cache, layout, path, c, data)

        # Entries are read, checked and decoded here, one after another, as the same chunks on local
        # disk are (`DirectChunks`): on zarr's I/O threads (asyncio.to_thread) a shuffled epoch of 40,000
        # 3 KB rows from a warm cache took 0.174-0.34 s against 0.147-0.20 s read so (15 epochs each).
        held = [from_disk(c) for c in wanted]
        found = {c: values for c, values in zip(wanted, held, strict=True) if values is not None}
        self.hits += len(found)
        missing = [c for c in wanted if c not in found]
        for start in range(0, len(missing), _FETCH_GROUP):
            group = missing[start : start + _FETCH_GROUP]
            for c, data in zip(group, self._fetch(cache, [layout.key(path, c) for c in group]), strict=True):
                fill = self.fills(path, c, layout.size)
                self.disk.write(self.ns, layout.key(path, c), fill, data, self.about)
                # verified by `_fetch`
                found[c] = self._decode(cache, layout, path, c, memoryview(data)[:-4])
        return {c: found[c] for c in wanted}

    def _fetch(self, cache: ArrayCache, keys: list[str]) -> list[bytes]:
        """The stored bytes of ``keys`` (their crc32c last), fetched concurrently and checked."""
        found = sync(_get_all(cache.store, keys))
        out = []
        for key, data in zip(keys, found, strict=True):
            if data is None:
                raise cache.damaged(key, "the chunk is missing")
            try:
                verify_checksum(data)
            except ValueError as exc:
                raise cache.damaged(key, f"the chunk does not decode (ValueError: {exc})") from None
            out.append(data)
            self.fetched += 1
        return out

    def _decode(
        self, cache: ArrayCache, layout: _Layout, path: str, c: int, body: bytes | memoryview
    ) -> np.ndarray:
        try:
            # ``body``: the chunk without its crc32c, verified already (read from the cache or fetched).
            return decode_chunk(body, layout.dtype, layout.size, layout.zstd, False)
        except DECODE_ERRORS as exc:
            # Its checksum held, so the store holds it so (a chunk written damaged): the store's bytes.
            reason = f"the chunk does not decode ({type(exc).__name__}: {exc})"
            raise cache.damaged(layout.key(path, c), reason) from exc


def chunk_span(starts: np.ndarray, lengths: np.ndarray | int, size: int) -> range:
    """The chunks (of ``size`` items) from the first that runs of ``lengths`` items from ``starts`` touch
    to the last (those between included): two reductions, where `chunks_covered` builds arrays."""
    if len(starts) == 0:
        return range(0)
    first = int(starts.min()) // size
    return range(first, (int(starts.max()) + max(int(np.max(lengths)), 1) - 1) // size + 1)


def chunks_covered(starts: np.ndarray, lengths: np.ndarray | int, size: int) -> list[int]:
    """The chunks (of ``size`` items) that runs of ``lengths`` items from ``starts`` cover, sorted."""
    if len(starts) == 0:
        return []
    first = starts // size
    last = (starts + np.maximum(lengths, 1) - 1) // size
    if bool(np.all(last - first <= 1)):  # runs within a chunk or across one edge: the common case
        lo = int(first.min())
        span = int(last.max()) - lo + 1
        if span > 64 * len(starts):  # a mask longer than sorting the ends costs
            return list(np.unique(np.concatenate((first, last))).tolist())
        # Marked in a mask, not sorted (np.unique): a loader asks this of every batch (9 against 25 µs
        # for a batch of 256 over 120 chunks).
        covered = np.zeros(span, dtype=bool)
        covered[first - lo] = True
        covered[last - lo] = True
        return list((np.flatnonzero(covered) + lo).tolist())
    runs = [np.arange(a, b + 1) for a, b in zip(first, last, strict=True)]
    return list(np.unique(np.concatenate(runs)).tolist())


async def _get_all(store: Store, keys: list[str]) -> list[bytes | None]:
    prototype = default_buffer_prototype()
    found = await asyncio.gather(*(store.get(key, prototype) for key in keys))
    return [None if buf is None else buf.to_bytes() for buf in found]
