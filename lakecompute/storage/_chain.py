"""The codec chain the direct chunk paths handle, parsed once for reads (`_cache`) and for writes (the
table's slot writers, `lakecompute.versioned._segments`).

Both paths bypass zarr's asynchronous machinery for 1-D arrays whose chunks are stored plainly: zarr's
``bytes`` serializer in this machine's byte order, then optionally ``zstd``, then optionally ``crc32c``.
Any other array goes through zarr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec
from zarr.core.metadata import ArrayV3Metadata

__all__ = ["PlainChain", "plain_chain"]


@dataclass(frozen=True, slots=True)
class PlainChain:
    """The codecs of an array whose chunks the direct paths encode and decode themselves.

    Attributes:
        metadata: the array's (zarr v3) metadata.
        zstd: the array's zstd codec (its level and checksum flag), or None when chunks are not compressed.
        checksum: whether every chunk ends with zarr's crc32c of the bytes before it.
    """

    metadata: ArrayV3Metadata
    zstd: ZstdCodec | None
    checksum: bool


def plain_chain(array: zarr.Array[Any]) -> PlainChain | None:
    """The plain codec chain of ``array``, or None when its chunks must go through zarr (not zarr v3,
    not 1-D, another serializer or byte order, or other codecs)."""
    meta = array.metadata
    if not isinstance(meta, ArrayV3Metadata) or array.ndim != 1:
        return None
    codecs = list(meta.codecs)
    if not codecs or not isinstance(codecs[0], BytesCodec):
        return None
    # zarr up to 3.1 gives the byte order as an `Endian` enum, later versions as its string.
    endian = getattr(codecs[0].endian, "value", codecs[0].endian)
    if array.dtype.itemsize > 1 and endian != sys.byteorder:
        return None
    rest = codecs[1:]
    checksum = bool(rest) and isinstance(rest[-1], Crc32cCodec)
    if checksum:
        rest.pop()
    if not rest:
        return PlainChain(meta, None, checksum)
    if len(rest) == 1 and isinstance(rest[0], ZstdCodec):
        return PlainChain(meta, rest[0], checksum)
    return None
