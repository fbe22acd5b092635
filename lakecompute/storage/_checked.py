"""Stored chunks, verified: a missing chunk raises, and a chunk's bytes pass their checksum and decode.

zarr reads a chunk that is not there as fill values, silently; a reader of a dataset must never see
zeros in place of data. So readers open arrays through `CheckedStore`, which raises when a
chunk key is missing. Segments written since checksums exist carry zarr's ``crc32c`` codec in their
chunk chain; `verify_checksum` and `decode_chunk` check and decode such a chunk's bytes as zarr's codecs
would, for the direct reader (`lakecompute.storage._direct`) and the layout probes.
"""

from __future__ import annotations

import errno
import os
import re
import zlib
from typing import Any, Final

import google_crc32c  # zarr's own dependency: its crc32c codec uses it
import numpy as np
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding
from zarr.storage import LocalStore, WrapperStore

__all__ = [
    "DECODE_ERRORS",
    "LINKED_CHUNK",
    "CheckedStore",
    "MissingChunkError",
    "chunk_folder",
    "chunk_key",
    "decode_chunk",
    "read_chunk_file",
    "stored",
    "verify_checksum",
    "zstd_content_size",
]

#: How the arrays lakecompute writes name their chunks: zarr's default for v3 (``c/<i>``).
_CHUNK_KEYS = DefaultChunkKeyEncoding()


def chunk_key(array_key: str, chunk: int) -> str:
    """The storage key of chunk ``chunk`` of the 1-D array at ``array_key``, as zarr names it."""
    return f"{array_key}/{_CHUNK_KEYS.encode_chunk_key((chunk,))}"


def chunk_folder(array_key: str) -> str:
    """The folder holding the chunks of the 1-D array at ``array_key`` (named by their numbers)."""
    return chunk_key(array_key, 0).rsplit("/", 1)[0]


# A chunk key of a zarr v3 array: ".../c/<i>[/<j>...]" (not zarr.json, not a v2 ".zarray" probe).
_CHUNK_KEY: Final = re.compile(r"/c(?:/[0-9]+)+$")
#: What a chunk that does not decode raises in zarr's codecs (bytes, crc32c, zstd, gzip, blosc).
DECODE_ERRORS: Final = (ValueError, RuntimeError, TypeError, EOFError, zlib.error, IndexError)


class MissingChunkError(Exception):
    """Raised inside zarr's read when a chunk key is not stored (see `CheckedStore`).

    Attributes:
        key: the chunk's storage key.
        reason: why it cannot be read (missing, or a symbolic link that is not followed).
    """

    def __init__(self, key: str, reason: str = "the chunk is missing") -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")


LINKED_CHUNK: Final = "the chunk is a symbolic link; lakecompute never follows links inside a dataset"


class CheckedStore(WrapperStore[Store]):
    """A read-only view of a store in which a missing chunk raises instead of reading as fill values.

    Only chunk keys raise: zarr's metadata lookups may legitimately find nothing. On a local disk a
    chunk that is a symbolic link is refused as well (it may point anywhere).
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._root = str(store.root) if isinstance(store, LocalStore) else None

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        chunk = _CHUNK_KEY.search(key) is not None
        if chunk and self._root is not None and os.path.islink(os.path.join(self._root, key)):
            raise MissingChunkError(key, LINKED_CHUNK)
        value = await self._store.get(key, prototype, byte_range)
        if value is None and chunk:
            raise MissingChunkError(key)
        return value


def read_chunk_file(file: str, key: str) -> bytes:
    """A chunk file's bytes (never through a symbolic link)."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise MissingChunkError(key) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MissingChunkError(key, LINKED_CHUNK) from None
        raise
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def verify_checksum(data: bytes | memoryview) -> memoryview:
    """A chunk's bytes without the crc32c zarr's codec stores after them, once they match it (a view of
    ``data``: slicing a chunk's bytes copies them, and two copies of every chunk read cost more than its
    checksum).

    Raises:
        ValueError: they do not match (or there is no room for the checksum).
    """
    if len(data) < 4:
        raise ValueError(f"{len(data)} bytes: shorter than the checksum")
    # As zarr's Crc32cCodec: the bytes' crc32c, stored after them as a little-endian uint32.
    body = np.frombuffer(data, dtype=np.uint8)[:-4]
    if int(google_crc32c.value(body)).to_bytes(4, "little") != data[-4:]:
        raise ValueError("Stored and computed checksum do not match.")
    return memoryview(data)[:-4]


def decode_chunk(
    data: bytes | memoryview, dtype: np.dtype[Any], size: int, zstd: Any, checksum: bool
) -> np.ndarray:
    """A stored chunk of ``size`` items decoded as the direct reader does: checksum, zstd, raw bytes.

    A zstd frame that declares its decoded size (zarr's do) is decoded straight into the array returned,
    once the declared size is checked against the chunk's: no copy of the decoded bytes.

    Raises:
        ValueError: (or zstd's own errors) the bytes do not decode to exactly one chunk.
    """
    if checksum:
        data = verify_checksum(data)
    nbytes = size * dtype.itemsize
    if zstd is not None and zstd_content_size(data) == nbytes:
        out = np.empty(size, dtype=dtype)
        zstd.decode(data, out=out.view(np.uint8))  # zstd checks the frame decodes to the size it declares
        return out
    raw = data if zstd is None else bytes(zstd.decode(data))
    if len(raw) != nbytes:
        raise ValueError(f"expected {nbytes} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).copy()


_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"


def zstd_content_size(frame: bytes | memoryview) -> int | None:
    """The decoded size a zstd frame declares in its header (RFC 8878, 3.1.1.1), or None when it declares
    none or the bytes do not start with a frame header."""
    if len(frame) < 6 or frame[:4] != _ZSTD_MAGIC:
        return None
    descriptor = frame[4]
    single = (descriptor >> 5) & 1
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]  # window descriptor, dictionary id
    width = (single, 2, 4, 8)[descriptor >> 6]
    if not width or len(frame) < at + width:
        return None
    value = int.from_bytes(frame[at : at + width], "little")
    return value + 256 if width == 2 else value


# Items in the probe array: enough for every byte of every item to vary, small enough to cost nothing.
_PROBE_ITEMS: Final = 256


def stored(store: Store, key: str) -> bool:
    """Whether ``store`` holds ``key`` (asked from a thread that is not zarr's event loop)."""
    from zarr.core.sync import sync

    return bool(sync(store.exists(key)))
