"""Which array layouts the direct chunk reader may read, decided once per layout and process.

A layout's verdict comes from a small probe array that zarr itself writes in memory, decoded the way the
direct reader (`lakecompute.storage._direct`) decodes chunks: from metadata alone, never from a
dataset's own chunks, which a concurrent writer may be changing between two reads.

Verdicts travel to the processes that read for this one (eval and loader workers, with a dataset's
`lakecompute.datasets.Snapshot`) as `LayoutVerdicts`: a forked worker inherits them anyway, and a
worker started otherwise adopts them only when its zarr and codecs are this process's versions, so
that a worker never probes again what its caller decided, and never takes a verdict another zarr made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numcodecs
import numpy as np
import zarr

from lakecompute.errors import warn
from lakecompute.storage._checked import DECODE_ERRORS, decode_chunk

if TYPE_CHECKING:
    from zarr.core.metadata import ArrayV3Metadata

__all__ = ["LAYOUT_PROBES", "LayoutProbes", "LayoutVerdicts", "adopt_layout_verdicts", "layout_verdicts"]

_PROBE_ITEMS: Final = 256
#: What decides a verdict besides the layout: the zarr that writes chunks, the codecs and numpy that
#: decode them directly (a verdict holds only where these are the same).
_MADE_BY: Final = (
    f"zarr {zarr.__version__}",
    f"numcodecs {numcodecs.__version__}",
    f"numpy {np.__version__}",
)


@dataclass(frozen=True, slots=True)
class LayoutVerdicts:
    """Layout verdicts as they travel to another process (see `LayoutProbes.carried`).

    Attributes:
        made_by: the versions of zarr, numcodecs and numpy that decided them.
        verdicts: ``(layout, verdict)`` pairs: None when the direct reader reads the layout's chunks as
            that zarr writes them, else why not.
    """

    made_by: tuple[str, ...] = ()
    verdicts: tuple[tuple[str, str | None], ...] = ()


class LayoutProbes:
    """Which array layouts this process's direct chunk reader may read, decided once per layout.

    A layout is what decides how a chunk is stored: the dtype, the codecs and the chunk key encoding.
    Its verdict comes from a probe array of that layout that zarr writes into a `MemoryStore`, decoded
    directly: from metadata alone, never from a dataset's own chunks, which a concurrent writer may be
    changing between two reads.

    Attributes:
        verdicts: per layout, None when the direct reader reads chunks as this zarr writes them, else
            why not.
        warned: whether this process has said (once) that it reads some chunks through zarr after all.
        probed: how many probe arrays this process wrote (one per layout it decided itself).
    """

    def __init__(self) -> None:
        self.verdicts: dict[str, str | None] = {}
        self.warned = False
        self.probed = 0

    def carried(self) -> LayoutVerdicts:
        """This process's verdicts so far, to hand to the processes that read for it."""
        return LayoutVerdicts(_MADE_BY, tuple(self.verdicts.items()))

    def adopt(self, carried: LayoutVerdicts) -> None:
        """Take the verdicts another process decided, when its zarr, numcodecs and numpy are this
        process's versions (else they are decided here again, by probing); verdicts already decided
        here stay."""
        if carried.made_by != _MADE_BY:
            return
        for layout, verdict in carried.verdicts:
            self.verdicts.setdefault(layout, verdict)

    def decode(self, data: bytes, dtype: np.dtype[Any], size: int, zstd: Any, checksum: bool) -> np.ndarray:
        """How a probe's chunk is decoded: as the direct reader decodes chunks (`decode_chunk`)."""
        return decode_chunk(data, dtype, size, zstd, checksum)

    def verdict(self, meta: ArrayV3Metadata, dtype: np.dtype[Any], zstd: Any, checksum: bool) -> str | None:
        """None when this zarr writes chunks of an array with metadata ``meta`` the way the direct
        reader decodes them (``zstd``, ``checksum``: the codecs it found there), else the reason they
        differ."""
        layout = json.dumps(
            [dtype.str, [c.to_dict() for c in meta.codecs], meta.chunk_key_encoding.to_dict()],
            sort_keys=True,
            default=str,
        )
        # No lock: two threads probing the same layout at once find the same answer, and a lock held
        # across zarr's I/O could be inherited, held, by a worker forked meanwhile.
        if layout not in self.verdicts:
            self.verdicts[layout] = self._probe(meta, dtype, zstd, checksum)
        return self.verdicts[layout]

    def _probe(self, meta: ArrayV3Metadata, dtype: np.dtype[Any], zstd: Any, checksum: bool) -> str | None:
        from zarr.abc.codec import ArrayBytesCodec, BytesBytesCodec
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync
        from zarr.storage import MemoryStore

        # _setup let through only bytes, then zstd and crc32c: one serializer, then compressors.
        serializer, *rest = meta.codecs
        assert isinstance(serializer, ArrayBytesCodec)
        compressors = [c for c in rest if isinstance(c, BytesBytesCodec)]
        # Every item different from its neighbours and from zero (zarr skips a chunk of fill values).
        ramp = np.arange(1, _PROBE_ITEMS + 1)
        values = (ramp % 2).astype(dtype) if dtype.kind == "b" else (ramp * 37 % 251 + 1).astype(dtype)
        self.probed += 1
        store = MemoryStore()
        probe = zarr.create_array(
            store,
            shape=(_PROBE_ITEMS,),
            chunks=(_PROBE_ITEMS,),
            dtype=dtype,
            serializer=serializer,
            compressors=compressors,
            chunk_key_encoding=meta.chunk_key_encoding,
        )
        probe[:] = values
        key = probe.metadata.encode_chunk_key((0,))
        stored = sync(store.get(key, prototype=default_buffer_prototype()))
        if stored is None:
            return f"zarr stored the probe's chunk elsewhere than at {key!r}"
        try:
            decoded = self.decode(stored.to_bytes(), dtype, _PROBE_ITEMS, zstd, checksum)
        except DECODE_ERRORS as exc:
            return f"a chunk zarr wrote does not decode directly ({type(exc).__name__}: {exc})"
        if not np.array_equal(decoded, values):
            return "a chunk zarr wrote decodes directly to other values"
        return None

    def fell_back(self, path: str, reason: str) -> None:
        """Say once per process that local chunks are read through zarr after all (correct, but slower)."""
        if self.warned:
            return
        self.warned = True
        warn(
            f"lakecompute reads the local chunks of arrays like {path!r} through zarr itself ({reason}): "
            f"correct, but about 1 ms slower per chunk. This zarr ({zarr.__version__}) may store chunks in "
            "a way lakecompute's direct reader does not know yet; please report it with zarr's version."
        )


#: This process's layout verdicts, shared by every handle's direct chunk reader.
LAYOUT_PROBES: Final = LayoutProbes()


def layout_verdicts() -> LayoutVerdicts:
    """This process's layout verdicts, to travel with what another process reads (a `Snapshot`)."""
    return LAYOUT_PROBES.carried()


def adopt_layout_verdicts(carried: LayoutVerdicts) -> None:
    """Take layout verdicts another process decided, when they hold here (see `LayoutProbes.adopt`)."""
    LAYOUT_PROBES.adopt(carried)
