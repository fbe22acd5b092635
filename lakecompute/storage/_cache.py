"""Reading stored arrays, verified: every chunk is there, decodes, and passes its checksum.

zarr reads a chunk that is not there as fill values, silently; a reader of a dataset must never see
zeros in place of data. So readers open arrays through `CheckedStore` (`lakecompute.storage._checked`),
which raises when a chunk key is missing, and every decode failure (a truncated chunk, a failed
``crc32c`` checksum, a zstd frame that does not decode) becomes a
`lakecompute.errors.DatasetCorruptError` naming the storage key. Segments written since this check
exists carry zarr's ``crc32c`` codec in their chunk chain, so a flipped bit is caught too; older ones
are read as before (a missing or undecodable chunk is still caught). One-chunk reads of local arrays
skip zarr's asynchronous machinery (`lakecompute.storage._direct`).

Reads are bounded: a large read goes to zarr in groups of chunks, so a damaged or hostile manifest
that names a huge range fails at the first chunk that is not stored, instead of allocating the whole
range up front.

`ArrayCache` is the one cache of decoded chunks a dataset handle reads through (tensor reads, views,
eval input, loaders, token blocks, compact), within a byte budget. Besides ranges it reads *runs* in
an array's flat item space (a segment's ``data`` array holds bytes, a typed ``(n, *shape)`` array
``prod(shape)`` values per row): `ArrayCache.gather` cuts many equal runs out of the chunks that hold
them, each chunk decoded once, for a shuffled batch or windows of a token stream.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np
import zarr
from numpy.lib.stride_tricks import sliding_window_view
from zarr.abc.store import Store
from zarr.storage import LocalStore

from lakecompute.errors import DatasetCorruptError
from lakecompute.storage._checked import DECODE_ERRORS, CheckedStore, MissingChunkError, chunk_folder, stored
from lakecompute.storage._direct import DirectChunks, StoredChunk
from lakecompute.storage._remote import chunk_span, chunks_covered

if TYPE_CHECKING:
    from lakecompute.storage._backend import Backend
    from lakecompute.storage._remote import RemoteChunks

__all__ = ["CACHE_BYTES", "LOADER_CACHE_BYTES", "MAX_CHUNK_BYTES", "ArrayCache", "ArrayRules"]

#: The largest chunk a reader accepts (array metadata asking for more is damaged or hostile).
MAX_CHUNK_BYTES: Final = 64 << 20
#: Decoded bytes a dataset handle keeps by default: enough that reading a tensor sample by sample
#: decodes each chunk once.
CACHE_BYTES: Final = 32 << 20
#: Decoded bytes a loader's handle keeps (per loader worker). A shuffled epoch touches every chunk in
#: every batch, so a tensor whose decoded size fits here is decoded once per epoch; a larger one is
#: decoded again as chunks fall out, but memory stays bounded.
LOADER_CACHE_BYTES: Final = 256 << 20
#: Runs of at most this many chunks are cut from cached chunks; longer ones are read in bounded groups.
_FEW: Final = 4
#: Chunks per zarr call in a large read: bounds what one call allocates before its chunks are seen.
_GROUP: Final = 16


def _has_checksum(arr: zarr.Array[Any]) -> bool:
    return any(type(c).__name__ == "Crc32cCodec" for c in arr.metadata.codecs)  # type: ignore[union-attr]


class ArrayRules(Protocol):
    """What the format stored above says of its arrays. The cache verifies bytes (every chunk there, its
    checksum, its size); which arrays must have which shape and dtype is the format's to say
    (`lakecompute.versioned` gives its rules to the caches it opens)."""

    def refuse(self, path: str, arr: zarr.Array[Any]) -> str | None:
        """Why the array at ``path`` is not one the format writes (None: it may be read)."""

    def zeros_when_unchecked(self, path: str) -> bool:
        """Whether the array at ``path``, when its chunks carry no checksum, is one written before
        checksums whose missing chunks mean zeros."""


class ArrayCache:
    """Opened arrays and recently decoded chunks, so sequential reads decode each chunk once.

    Every array a read returns is the caller's own (a copy cut from the cached chunks), never a view
    into the cache: a caller that changes it must not change what later reads return.

    Args:
        store: the dataset's zarr store.
        max_bytes: decoded bytes kept (least recently used chunks are dropped first; the chunk being
            read is always kept).
        backend: the dataset's backend, when known: errors then name its location, and a missing
            chunk is recognised as data a ``vacuum()`` removed.
        rules: what the format says of its arrays (None: any array is read, a missing chunk is damage).

    Attributes:
        fetched: chunks fetched and decoded so far (a measure of read amplification).
        chunk_reads: how often each chunk was fetched and decoded, by ``(array path, chunk number)``
            (in this process, through this cache; every read path counts here).
    """

    def __init__(
        self,
        store: Store,
        max_bytes: int = CACHE_BYTES,
        *,
        backend: Backend | None = None,
        rules: ArrayRules | None = None,
    ) -> None:
        self.store = store
        self.rules = rules
        self.backend = backend
        self.url = backend.url if backend is not None else str(store)
        self.max_bytes = max_bytes
        self.fetched = 0
        self._checked = CheckedStore(store)
        self._arrays: dict[str, zarr.Array[Any]] = {}
        # Chunk length and length along axis 0 (zarr's .chunks and .shape cost microseconds a call).
        self._sizes: dict[str, tuple[int, int]] = {}
        self._per_row: dict[str, int] = {}  # items per row (1 for a 1-D array)
        self._dtypes: dict[str, np.dtype[Any]] = {}  # zarr's .dtype costs ~20 us a call
        self._chunks: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._bytes = 0
        # Sliding-window views of cached chunks by run width: building one costs ~50 us, more than
        # cutting a batch's runs out of it, so it is kept as long as its chunk.
        self._windows: dict[tuple[str, int], dict[int, np.ndarray]] = {}
        self._index_rows: dict[tuple[str, int, int, int], np.ndarray] = {}
        self._getters: dict[str, DirectChunks] = {}
        self._lock = threading.Lock()
        # Chunks being read now, by key: a thread that needs one waits for the reader instead of reading
        # it a second time (tasks on the threaded scheduler share a handle, and their ranges share chunks).
        self._pending: dict[tuple[str, int], threading.Event] = {}
        self.chunk_reads: dict[tuple[str, int], int] = {}
        #: The local disk cache of a remote dataset's chunks, when the handle was opened with one.
        self.remote: RemoteChunks | None = None

    @property
    def held_bytes(self) -> int:
        """Decoded bytes of the chunks held now: at most ``max_bytes``, but for the one being read."""
        with self._lock:
            return sum(v.nbytes for v in self._chunks.values())

    # -- errors -----------------------------------------------------------------------------------
    def damaged(self, key: str, reason: str) -> DatasetCorruptError:
        """The error for stored data at ``key`` that cannot be read."""
        return DatasetCorruptError(self.url, key, reason)

    def _chunk_key(self, path: str, arr: zarr.Array[Any], row: int) -> str:
        coords = (row // int(arr.chunks[0]),) + (0,) * (arr.ndim - 1)
        return f"{path}/{arr.metadata.encode_chunk_key(coords)}"

    # -- arrays -----------------------------------------------------------------------------------
    def array(self, path: str) -> zarr.Array[Any]:
        """The array at ``path``, opened for verified reading.

        Raises:
            DatasetCorruptError: its metadata is missing, does not parse, or describes an array no
                lakecompute writer makes (chunks over 64 MiB; what the cache's rules refuse, such as a
                segment array that is not 1-D bytes).
        """
        arr = self._arrays.get(path)
        if arr is None:
            arr = self._arrays[path] = self._open(path)
        return arr

    def _open(self, path: str) -> zarr.Array[Any]:
        self._check_inside(path)
        key = f"{path}/zarr.json"
        try:
            arr = zarr.open_array(self._checked, path=path, mode="r", zarr_format=3)
        except Exception as exc:  # zarr raises many types for a missing or damaged zarr.json
            if isinstance(exc, MemoryError):
                raise
            if not stored(self.store, key):
                raise self.damaged(key, "the array's metadata is missing") from None
            raise self.damaged(
                key, f"the array's metadata does not parse ({type(exc).__name__}: {exc})"
            ) from exc
        self._check_array(path, key, arr)
        if self.rules is not None and self.rules.zeros_when_unchecked(path) and not _has_checksum(arr):
            arr = zarr.open_array(self.store, path=path, mode="r", zarr_format=3)
        return arr

    def _check_array(self, path: str, key: str, arr: zarr.Array[Any]) -> None:
        refused = self.rules.refuse(path, arr) if self.rules is not None else None
        if refused is not None:
            raise self.damaged(key, refused)
        chunk_bytes = math.prod(int(c) for c in arr.chunks) * arr.dtype.itemsize
        if chunk_bytes > MAX_CHUNK_BYTES:
            raise self.damaged(key, f"chunks of {chunk_bytes} bytes (at most {MAX_CHUNK_BYTES} expected)")

    def _check_inside(self, path: str) -> None:
        """Refuse an array folder reached through a symbolic link (it may lead out of the dataset)."""
        if not isinstance(self.store, LocalStore):
            return
        root = str(self.store.root)
        real_root = os.path.realpath(root)
        for sub in (path, chunk_folder(path)):
            full = os.path.join(root, *sub.split("/"))
            if os.path.realpath(full) != os.path.join(real_root, *sub.split("/")):
                raise self.damaged(sub, "a symbolic link; lakecompute never follows links inside a dataset")

    # -- chunks -----------------------------------------------------------------------------------
    def clear(self) -> None:
        with self._lock:
            self._chunks.clear()
            self._windows.clear()
            self._bytes = 0
            self._index_rows.clear()

    def forget(self, path: str, first: int, last: int) -> None:
        with self._lock:
            for c in range(first, last + 1):
                self._drop((path, c))

    def _drop(self, key: tuple[str, int]) -> None:
        old = self._chunks.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes
            self._windows.pop(key, None)

    def _fetch(self, path: str, arr: zarr.Array[Any], start: int, stop: int) -> np.ndarray:
        """Rows ``start..stop`` straight from zarr, every chunk verified."""
        try:
            return np.asarray(arr[start:stop])
        except MissingChunkError as exc:
            raise self.damaged(exc.key, exc.reason) from None
        except DECODE_ERRORS as exc:
            size = int(arr.chunks[0])
            if stop - start > size:
                # Several chunks: find the one that does not decode, so the error names it.
                for a in range(start - start % size, stop, size):
                    self._fetch(path, arr, max(a, start), min(a + size, stop))
            key = self._chunk_key(path, arr, start)
            raise self.damaged(key, f"the chunk does not decode ({type(exc).__name__}: {exc})") from exc

    def prepare(self, path: str) -> None:
        """Open the array at ``path`` for reading and decide how its chunks are read (directly, or
        through zarr: its layout's verdict, once per process), reading no chunk: what its first read
        would do before reading, done ahead (a worker's warm-up).

        Raises:
            DatasetCorruptError: as `array`.
        """
        self._direct(path, self.array(path))

    def _direct(self, path: str, arr: zarr.Array[Any]) -> DirectChunks:
        getter = self._getters.get(path)
        if getter is None:
            root = str(self.store.root) if isinstance(self.store, LocalStore) else None
            getter = self._getters[path] = DirectChunks(self, root, path, arr)
        return getter

    def _chunk(self, path: str, arr: zarr.Array[Any], c: int, size: int) -> np.ndarray:
        key = (path, c)
        while True:
            with self._lock:
                hit = self._chunks.get(key)
                if hit is not None:
                    self._chunks.move_to_end(key)
                    return hit
                pending = self._pending.get(key)
                if pending is None:  # this thread reads it; others asking meanwhile wait for it
                    pending = self._pending[key] = threading.Event()
                    break
            pending.wait()  # another thread is reading it: take it from the cache (or read it if it failed)
        try:
            values = self._uncached(path, arr, c, size)
            with self._lock:
                self._keep({key: values})
        finally:
            with self._lock:
                del self._pending[key]
            pending.set()
        return values

    def _uncached(self, path: str, arr: zarr.Array[Any], c: int, size: int) -> np.ndarray:
        """Chunk ``c`` read and decoded now, past the cache (counted in `fetched` and `chunk_reads`)."""
        values = self._direct(path, arr).get(c)
        if values is None and self.remote is not None and self.remote.cacheable(path, arr, c):
            values = self.remote.get_many(self, path, arr, (c,))[c]
        if values is None:
            values = self._fetch(path, arr, c * size, (c + 1) * size)
        self._count(path, c)
        return values

    def _remote_chunks(
        self, path: str, arr: zarr.Array[Any], chunks: list[int]
    ) -> dict[int, np.ndarray] | None:
        """``chunks`` through the disk cache, fetched concurrently where it lacks them (counted); None when
        some of them are not read through it (no disk cache, or not cacheable)."""
        remote = self.remote
        if remote is None or not all(remote.cacheable(path, arr, c) for c in chunks):
            return None
        found = remote.get_many(self, path, arr, chunks)
        for c in chunks:
            self._count(path, c)
        return found

    def warm(self, path: str, starts: np.ndarray, lengths: np.ndarray | int) -> None:
        """Have the chunks that runs of ``lengths`` items from ``starts`` (flat items of the 1-D array at
        ``path``) cover decoded in this cache, those not held read together: concurrently from a remote
        store, through the disk cache (what a batch needs, before it is cut out of them, so that a shuffled
        batch costs one round trip to S3 instead of one per chunk). Without a disk cache this does nothing:
        each chunk is read when first needed."""
        if self.remote is None or len(starts) < 2:
            return
        arr, size, _ = self._known(path)
        # Once every chunk from the first the runs touch to the last is held (a loader's batches after its
        # first few), `chunks_covered` is skipped: its arrays cost 60 µs a batch amid the batch's copies.
        if all((path, c) in self._chunks for c in chunk_span(starts, lengths, size)):
            return
        wanted = [c for c in chunks_covered(starts, lengths, size) if (path, c) not in self._chunks]
        found = self._remote_chunks(path, arr, wanted) if len(wanted) > 1 else None
        if not found:
            return
        with self._lock:
            self._keep({(path, c): values for c, values in found.items() if (path, c) not in self._pending})

    def _keep(self, chunks: dict[tuple[str, int], np.ndarray]) -> None:
        """Hold ``chunks`` decoded (replacing what is held of them), then drop the least recently used
        ones past the budget (the newest kept). Under the lock."""
        for key, values in chunks.items():
            self._drop(key)
            self._chunks[key] = values
            self._bytes += values.nbytes
        while self._bytes > self.max_bytes and len(self._chunks) > 1:
            self._drop(next(iter(self._chunks)))

    def _count(self, path: str, c: int) -> None:
        with self._lock:
            self.fetched += 1
            self.chunk_reads[(path, c)] = self.chunk_reads.get((path, c), 0) + 1

    def _known(self, path: str) -> tuple[zarr.Array[Any], int, int]:
        """The array at ``path``, its rows per chunk and its length along the first axis."""
        arr = self.array(path)
        known = self._sizes.get(path)
        if known is None:
            known = self._sizes[path] = (int(arr.chunks[0]), int(arr.shape[0]))
            self._per_row[path] = math.prod(int(s) for s in arr.shape[1:])
            self._dtypes[path] = arr.dtype
        return arr, known[0], known[1]

    def read_rows(self, path: str, start: int, count: int, out: np.ndarray | None = None) -> np.ndarray:
        """``count`` values (rows, for an N-D array) from ``start`` along the first axis.

        The array is the caller's own, never a view into a cached chunk: a caller that changes it
        (a compute function updating its input in place, a user writing into ``.numpy()``'s result)
        must not change what later reads return. The copy is one ``memcpy`` of the range read; with
        ``out`` (``count`` rows of the array's dtype) the values are read into it and it is returned.

        Raises:
            DatasetCorruptError: a chunk in the range is missing or does not decode, or the range
                runs past the array's end (the error names the key).
        """
        known = self._sizes.get(path)
        arr, size, length = (self._arrays[path], *known) if known is not None else self._known(path)
        if count <= 0:
            return np.empty((0, *arr.shape[1:]), dtype=arr.dtype) if out is None else out
        if start < 0 or start + count > length:
            raise self.damaged(
                f"{path}/zarr.json", f"rows {start}..{start + count} run past its {length} rows"
            )
        first, last = start // size, (start + count - 1) // size
        if last - first >= _FEW:
            return self._read_spanning(path, arr, start, start + count, size, out)
        if first == last:
            chunk = self._chunk(path, arr, first, size)
            lo = start - first * size
            if out is None:
                return chunk[lo : lo + count].copy()
            out[...] = chunk[lo : lo + count]
            return out
        # Only the rows the range covers are copied, not the chunks joined whole (a batch across a chunk
        # edge would copy 2 MiB for its few hundred KB).
        parts = [self._chunk(path, arr, c, size) for c in range(first, last + 1)]
        parts[0] = parts[0][start - first * size :]
        parts[-1] = parts[-1][: start + count - last * size]
        return np.concatenate(parts, out=out)

    def _read_spanning(
        self, path: str, arr: zarr.Array[Any], start: int, stop: int, size: int, out: np.ndarray | None
    ) -> np.ndarray:
        """Rows ``start..stop`` over many chunks, each decoded once in this process (into ``out`` when
        given).

        The chunks the range covers whole are read past the cache (a range is read once: keeping them
        would only push out chunks that are read again, such as a small tensor's one chunk); a chunk it
        covers in part, or one cached already, comes through the cache, so the block or task that reads
        the rest of it finds it there.
        """
        first, last = start // size, (stop - 1) // size
        lo = first if start % size == 0 and (path, first) not in self._chunks else first + 1
        hi = last if stop % size == 0 and (path, last) not in self._chunks else last - 1
        getter = self._direct(path, arr)
        if getter.local:
            # Every chunk is read and checked (its checksum, the size it declares) before the result is
            # allocated: a damaged size fails at the first chunk that is not stored, not with a huge
            # allocation. Then the whole chunks are decoded straight into the result.
            pieces: list[tuple[int, np.ndarray | StoredChunk]] = []
            for c in range(first, last + 1):
                if lo <= c <= hi:
                    pieces.append((c, getter.stored(c)))
                    self._count(path, c)
                else:
                    pieces.append((c, self._chunk(path, arr, c, size)))
            if out is None:
                out = np.empty((stop - start, *arr.shape[1:]), dtype=self._dtypes[path])
            for c, part in pieces:
                a, b = max(start - c * size, 0), min(stop - c * size, size)
                target = out[c * size + a - start : c * size + b - start]
                if isinstance(part, StoredChunk):
                    getter.decode_into(part, target)
                else:
                    target[...] = part[a:b]
            return out
        # Elsewhere (object stores) zarr fetches the whole chunks concurrently, in bounded groups (through
        # the disk cache, when there is one).
        parts = [] if lo == first else [self._chunk(path, arr, first, size)[start - first * size :]]
        whole = self._remote_chunks(path, arr, list(range(lo, hi + 1)))
        if whole is not None:
            parts.extend(whole[c] for c in range(lo, hi + 1))
        else:
            parts.append(self._read_large(path, arr, lo * size, (hi + 1) * size, size))
        if hi < last:
            parts.append(self._chunk(path, arr, last, size)[: stop - last * size])
        return np.concatenate(parts, out=out) if len(parts) > 1 or out is not None else parts[0]

    def _read_large(self, path: str, arr: zarr.Array[Any], start: int, stop: int, size: int) -> np.ndarray:
        # zarr fetches and decodes the chunks of one call concurrently; groups of _GROUP chunks keep
        # that, and bound what is allocated before a missing chunk is seen.
        for c in range(start // size, (stop - 1) // size + 1):
            self._count(path, c)
        step = size * _GROUP
        if stop - start <= step:
            return self._fetch(path, arr, start, stop)
        parts = []
        pos = start
        while pos < stop:
            end = min(stop, (pos // size) * size + step)
            parts.append(self._fetch(path, arr, pos, end))
            pos = end
        return np.concatenate(parts)

    # -- runs in an array's flat item space -----------------------------------------------------
    def items(self, path: str) -> tuple[int, int, np.dtype[Any]]:
        """``(items per chunk, items in the array, item dtype)`` of the array at ``path``, seen as a
        flat run of items (rows laid end to end)."""
        _, size, length = self._known(path)
        per_row = self._per_row[path]
        return size * per_row, length * per_row, self._dtypes[path]

    def require(self, path: str, item: int) -> None:
        """Check that the chunk holding flat item ``item`` of the array at ``path`` is stored.

        A cheap check (one existence test, none when the chunk is cached) that a declared size does
        not run past what was written, made before anything that size is read or allocated.

        Raises:
            DatasetCorruptError: the item is past the array's end, or its chunk is not stored.
        """
        arr, size, length = self._known(path)
        row = item // self._per_row[path]
        if item < 0 or row >= length:
            raise self.damaged(f"{path}/zarr.json", f"item {item} is past its {length} rows")
        c = row // size
        if (path, c) in self._chunks or (self.remote is not None and self.remote.holds(path, arr, c)):
            return  # decoded here, or kept (verified) in the disk cache: it was stored
        key = self._chunk_key(path, arr, row)
        if not stored(self.store, key):
            raise self.damaged(key, "the chunk is missing")

    def _flat_chunk(self, path: str, c: int) -> np.ndarray:
        arr, size, _ = self._known(path)
        return self._chunk(path, arr, c, size).reshape(-1)

    def _check_run(self, path: str, lo: int, hi: int, total: int) -> None:
        if lo < 0 or hi > total:
            raise self.damaged(f"{path}/zarr.json", f"items {lo}..{hi} run past its {total} items")

    def span(self, path: str, start: int, count: int, out: np.ndarray | None = None) -> np.ndarray:
        """Items ``start .. start + count`` of the array at ``path``, flat: the caller's own copy, or
        read into ``out`` (``count`` items of the array's dtype) and returned.

        Raises:
            DatasetCorruptError: as `read_rows`; a long run is read in bounded groups of chunks, so a
                damaged size fails at the first chunk that is not stored.
        """
        size, total, dtype = self.items(path)
        self._check_run(path, start, start + count, total)
        if out is not None and (out.dtype != dtype or out.shape != (max(count, 0),)):
            raise ValueError(f"span: out must be {count} items of {dtype}, got {out.shape} of {out.dtype}")
        if count <= 0:
            return np.empty(0, dtype=dtype) if out is None else out
        first, last = start // size, (start + count - 1) // size
        if last - first < _FEW:
            return self._span_few(path, first, last, start - first * size, count, out)
        if out is not None and self._arrays[path].ndim == 1:  # items are rows: read into ``out``
            return self.read_rows(path, start, count, out)
        per_row = self._per_row[path]
        row = start // per_row
        rows = self.read_rows(path, row, -(-(start + count) // per_row) - row).reshape(-1)
        lo = start - row * per_row
        return rows[lo : lo + count] if out is None else _into(out, rows[lo : lo + count])

    def _span_few(
        self, path: str, first: int, last: int, lo: int, count: int, out: np.ndarray | None
    ) -> np.ndarray:
        """`span` of ``count`` items from item ``lo`` of chunk ``first``, inside chunks ``first..last``
        (a few, through the cache)."""
        parts = [self._flat_chunk(path, c) for c in range(first, last + 1)]
        if first == last:
            run = parts[0][lo : lo + count]
            return run.copy() if out is None else _into(out, run)
        # Only the parts the run covers are copied (a sample across a chunk edge is a few hundred bytes
        # of two 1 MiB chunks).
        size = len(parts[-1])  # a whole chunk's items
        parts[0] = parts[0][lo:]
        parts[-1] = parts[-1][: lo + count - (last - first) * size]
        return np.concatenate(parts, out=out)

    def _windows_of(self, path: str, c: int, width: int) -> np.ndarray:
        """Every run of ``width`` items inside chunk ``c``: row ``i`` is items ``i .. i + width``."""
        key = (path, c)
        views = self._windows.get(key)
        view = views.get(width) if views is not None else None
        if view is not None:  # the common case: a batch's runs cut from a chunk already cached
            # Kept recently used without the lock (one C call, atomic under the GIL): taking it for
            # each of a batch's chunks costs ~4% of a token-block batch. Dropped meanwhile: no matter.
            try:
                self._chunks.move_to_end(key)
            except KeyError:
                pass
            return view
        chunk = self._flat_chunk(path, c)
        if views is None:
            with self._lock:
                if (path, c) not in self._chunks:  # already dropped (a tiny budget): keep no view of it
                    return sliding_window_view(chunk, width)
                views = self._windows.setdefault((path, c), {})
        view = views.get(width)
        if view is None:
            view = views[width] = sliding_window_view(chunk, width)
        return view

    def gather(self, path: str, starts: np.ndarray, width: int) -> np.ndarray:
        """Runs of ``width`` items from each of ``starts`` (any order, repeats): a new
        ``(len(starts), width)`` array.

        Runs are grouped by the chunk they start in; each chunk is decoded at most once and its runs
        are cut out with one fancy index over a sliding window. Runs crossing into the next chunk
        (at most one per chunk boundary) are joined one by one. Runs longer than a chunk are read
        one by one in bounded groups of chunks, *before* the result is allocated: a damaged size
        fails at the first chunk that is not stored, not with a huge allocation.

        Raises:
            DatasetCorruptError: as `span`.
        """
        size, total, dtype = self.items(path)
        if width > size:
            runs = [self.span(path, int(s), width) for s in starts.tolist()]  # each run checked
            return np.stack(runs) if runs else np.empty((0, width), dtype=dtype)
        out = np.empty((len(starts), width), dtype=dtype)
        if not len(starts) or not width:
            return out
        first = starts // size
        order = np.argsort(first, kind="stable")
        # Every run starts in a chunk from first[order[0]] to first[order[-1]]: when those lie well
        # inside the array, so do the runs, without a pass over them (a gather is per batch).
        if first[order[0]] < 0 or (int(first[order[-1]]) + 1) * size + width > total:
            self._check_run(path, int(starts.min()), int(starts.max()) + width, total)
        self.warm(path, starts, width)
        crossing = (starts + width - 1) // size != first
        bounds = np.flatnonzero(np.diff(first[order])) + 1
        for group in np.split(order, bounds):
            c = int(first[group[0]])
            inside = group[~crossing[group]]
            if len(inside):
                out[inside] = self._windows_of(path, c, width)[starts[inside] - c * size]
        for i in np.flatnonzero(crossing).tolist():
            out[i] = self.span(path, int(starts[i]), width)
        return out

    def index_rows(self, path: str, idx: int, total: int, width: int) -> np.ndarray:
        """The ``(total, width)`` rows from entry ``idx`` of the 1-D index array at ``path`` (cached: they
        are small and immutable)."""
        key = (path, idx, total, width)
        rows = self._index_rows.get(key)
        if rows is None:
            flat = self.read_rows(path, idx, total * width)
            rows = np.array(flat, dtype=np.int64).reshape(total, width)
            self._index_rows[key] = rows
        return rows


def _into(out: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` copied into ``out``, which is returned."""
    out[...] = values
    return out
