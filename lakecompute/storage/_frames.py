"""zstd frames of chunks that do not compress, written without compressing them.

A segment's data array is stored with zstd (its tensors' chunk compression, or the fast level that
squeezes each writer's zero padding, ``versioned.PADDING_CODEC_LEVEL``). Most of what such arrays hold
is already compressed: PNG, JPEG and WebP files kept as their bytes. zstd gains nothing on those and
still spends 0.55-0.6 ms on each MiB here, at any level from -1 to -100: 140 ms of CPU for the 237 MB
of a 2,000-image ingest, more than its file writes.

`encode_zstd` asks zstd to compress a chunk only when a probe of its first bytes compresses; otherwise
it writes the frame itself, as the zstd format allows (RFC 8878, 3.1.1): a frame header that declares
the content size, then blocks stored *raw*, or as *RLE* (one byte repeated: a run of padding costs four
bytes). Any zstd decoder reads such a frame, zarr's and ours alike, at the cost of a copy. Written
through `zstd_frame` it costs no copy: its raw blocks are views of the chunk, written by ``os.writev``
(joined, 237 MB of an ingest's images were copied once more, into new memory). The checksum zarr's
codec chain adds after the frame is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

__all__ = ["BLOCK_BYTES", "PROBE_BYTES", "encode_zstd", "zstd_frame"]

_MAGIC: Final = b"\x28\xb5\x2f\xfd"
# Frame_Header_Descriptor: a 4-byte Frame_Content_Size (flag 2) in a single segment (no window
# descriptor: the window is the content), no checksum, no dictionary.
_DESCRIPTOR: Final = bytes([(2 << 6) | (1 << 5)])
BLOCK_BYTES: Final = 128 * 1024  # the largest block a frame may hold
_RAW, _RLE = 0, 1
#: How much of a chunk is compressed to decide (the first bytes: a chunk of images starts with one).
PROBE_BYTES: Final = 64 * 1024
#: A probe that compresses to less than this share of its size is compressed whole.
_WORTH: Final = 0.9


def encode_zstd(raw: np.ndarray, compress: Callable[[Any], Any]) -> bytes:
    """A zstd frame of ``raw`` (a chunk's bytes, uint8): ``compress(raw)`` when its first bytes
    compress, else raw and RLE blocks written here (the same bytes to any zstd decoder)."""
    return b"".join(zstd_frame(raw, compress))


def zstd_frame(raw: np.ndarray, compress: Callable[[Any], Any]) -> list[Any]:
    """`encode_zstd`'s frame as the parts that make it, one after the other: a stored frame's raw blocks
    are read-only views of ``raw`` (written with ``os.writev`` and checksummed part by part, never
    joined: a copy of every byte), its headers and runs small bytes."""
    if raw.size <= PROBE_BYTES or raw.size >= 1 << 32:
        return [bytes(compress(raw))]
    if len(compress(raw[:PROBE_BYTES])) < _WORTH * PROBE_BYTES:
        return [bytes(compress(raw))]
    return _stored_frame(raw)


def _stored_frame(raw: np.ndarray) -> list[Any]:
    """``raw`` (1 .. 4 GiB - 1 bytes) as one frame of raw blocks, and RLE blocks where a block is one byte
    repeated (a writer's zero padding)."""
    n = int(raw.size)
    view = raw.view()
    view.flags.writeable = False  # the parts hand out the bytes themselves (crc32c takes read-only ones)
    parts: list[Any] = [_MAGIC + _DESCRIPTOR + n.to_bytes(4, "little")]
    for at in range(0, n, BLOCK_BYTES):
        block = view[at : at + BLOCK_BYTES]
        size, last = len(block), at + BLOCK_BYTES >= n
        first = block[0]
        # The first and last bytes differ in almost every block of compressed data: the scan is rare.
        if block[-1] == first and not np.any(block != first):
            parts.append(_header(size, _RLE, last) + bytes([int(first)]))
        else:
            parts += (_header(size, _RAW, last), block)
    return parts


def _header(size: int, kind: int, last: bool) -> bytes:
    """A block header (RFC 8878, 3.1.1.2): Last_Block, Block_Type and Block_Size, 3 bytes little-endian."""
    return (int(last) | kind << 1 | size << 3).to_bytes(3, "little")
