"""Buffered writing of checked samples into slots: shared by dataset handles and eval tasks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.htypes import Encoded, TensorSpec, encode_batch, encode_sample
from lakecompute.storage import Fragment, SampleBuffer, SlotWriter, TensorState, write_fragment

__all__ = ["FLUSH_BYTES", "WriteSession"]

FLUSH_BYTES = 16 << 20  # per tensor: large enough for chunk-sized writes, small enough for bounded memory

SlotSource = Callable[[TensorSpec], SlotWriter]


class WriteSession:
    """Checks, buffers and writes samples of several tensors; hands back the fragments written.

    Args:
        slot_source: gives the slot writer a tensor writes into (called once per tensor).
        flush_bytes: a tensor's buffer is written out once it holds this many bytes.
    """

    def __init__(self, slot_source: SlotSource, flush_bytes: int = FLUSH_BYTES) -> None:
        self._slot_source = slot_source
        self.flush_bytes = flush_bytes
        self.buffers: dict[str, SampleBuffer] = {}
        self._writers: dict[str, SlotWriter] = {}
        self._ndims: dict[str, int] = {}
        self._indexed: set[str] = set()

    # -- checking -------------------------------------------------------------------------------
    def _ndim_check(self, state: TensorState, ndim: int, batch_ndim: int | None = None) -> None:
        # Only checks: the rank is recorded by add(), so a refused call leaves no trace behind.
        known = self._ndims.get(state.spec.name, state.ndim)
        if known is None:
            known = batch_ndim
        if known is not None and known != ndim:
            raise InvalidSampleError(
                state.spec.name,
                f"every sample of a tensor has the same number of dimensions: expected {known}, got {ndim}.",
            )

    def encode(self, state: TensorState, value: object, batch_ndim: int | None = None) -> Encoded:
        """Check one sample (raises InvalidSampleError; buffers nothing)."""
        enc = encode_sample(state.spec, value, _class_names(state), state.info)
        self._ndim_check(state, len(enc.shape), batch_ndim)
        return enc

    def encode_many(self, state: TensorState, values: object) -> np.ndarray | list[Encoded]:
        """Check many samples: a stacked array when the fast path applies, else a list."""
        if isinstance(values, np.ndarray) and values.ndim >= 1:
            block = encode_batch(state.spec, values, _class_names(state))
            if block is not None:
                self._ndim_check(state, block.ndim - 1)
                return block
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            raise InvalidSampleError(
                state.spec.name,
                f"extend() takes a sequence of samples. Got {type(values).__name__}; "
                "use append() for one sample.",
            )
        out: list[Encoded] = []
        for v in values:
            out.append(self.encode(state, v, len(out[0].shape) if out else None))
        return out

    def prefer_indexed(self, name: str) -> None:
        """Write ``name``'s samples as indexed runs (per-sample rows) even when their shapes agree."""
        self._indexed.add(name)

    # -- buffering ------------------------------------------------------------------------------
    def add(self, state: TensorState, item: Encoded | np.ndarray | list[Encoded]) -> list[Fragment]:
        """Buffer checked samples; returns fragments if the buffer had to be written out."""
        name = state.spec.name
        buf = self.buffers.get(name)
        if buf is None:
            buf = self.buffers[name] = SampleBuffer()
        if isinstance(item, np.ndarray):
            self._ndims.setdefault(name, item.ndim - 1)
            buf.add_block(item)
        elif isinstance(item, list):
            if item:
                self._ndims.setdefault(name, len(item[0].shape))
            for enc in item:
                buf.add(enc)
        else:
            self._ndims.setdefault(name, len(item.shape))
            buf.add(item)
        if buf.nbytes >= self.flush_bytes:
            return self.flush(state)
        return []

    def pending(self, name: str) -> int:
        buf = self.buffers.get(name)
        return 0 if buf is None else buf.count

    def flush(self, state: TensorState) -> list[Fragment]:
        """Write out a tensor's buffer; returns the fragment written (0 or 1 of them)."""
        name = state.spec.name
        buf = self.buffers.get(name)
        if buf is None or buf.count == 0:
            return []
        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = self._slot_source(state.spec)
        ndim = self._ndims.get(name, state.ndim)
        frag = write_fragment(state.spec, ndim, buf, writer, prefer_indexed=name in self._indexed)
        buf.clear()
        if frag is None:
            return []
        if frag.shape is None:
            # Once a tensor has varying shapes, keep writing indexed runs so they merge.
            self._indexed.add(name)
        return [frag]

    def discard(self) -> None:
        """Drop everything buffered (a rolled-back transaction); later writes go to new slots."""
        for buf in self.buffers.values():
            buf.clear()
        self._ndims.clear()
        self.new_slots()

    def new_slots(self) -> None:
        """Write into new slots from now on (the segments of the current ones are no longer ours)."""
        self._writers.clear()


def _class_names(state: TensorState) -> list[str]:
    names: Any = state.info.get("class_names") or []
    return list(names)
