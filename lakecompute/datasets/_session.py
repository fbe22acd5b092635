"""Buffered writing of checked samples into slots: shared by dataset handles and eval tasks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from lakecompute.datasets._schema import TensorSchema
from lakecompute.errors import InvalidSampleError
from lakecompute.htypes import Encoded, TensorSpec
from lakecompute.threads import thread_pool
from lakecompute.versioned import Fragment, SampleBuffer, SlotWriter

__all__ = ["FLUSH_BYTES", "WRITE_THREADS", "WriteSession", "rank_of"]

FLUSH_BYTES = 16 << 20  # per tensor: large enough for chunk-sized writes, small enough for bounded memory

SlotSource = Callable[[TensorSpec], SlotWriter]

# A flush of this many tensors or more stores their chunks from a few threads: each chunk is a file
# created and renamed (~1 ms of waiting on the file system, little CPU), so they overlap well.
_CONCURRENT_FROM = 4
#: Threads a dataset handle's flush stores its tensors' chunks from (an eval's task: its budget's).
WRITE_THREADS = 4


def rank_of(item: Encoded | np.ndarray | list[Encoded]) -> int | None:
    """The rank of checked samples (a stacked block's rows, or the first of a list; None if empty)."""
    if isinstance(item, np.ndarray):
        return item.ndim - 1
    if isinstance(item, list):
        return len(item[0].shape) if item else None
    return len(item.shape)


class WriteSession:
    """Checks, buffers and writes samples of several tensors; hands back the fragments written.

    Every check and decision is the tensor's `TensorSchema`'s; the session remembers only the rank of
    what it buffered (so samples of one tensor agree even before a commit records that rank).

    Args:
        slot_source: gives the slot writer a tensor writes into (called once per tensor).
        flush_bytes: a tensor's buffer is written out once it holds this many bytes.
        threads: threads a flush of many tensors stores their chunks from.
    """

    def __init__(
        self, slot_source: SlotSource, flush_bytes: int = FLUSH_BYTES, threads: int = WRITE_THREADS
    ) -> None:
        self._slot_source = slot_source
        self.flush_bytes = flush_bytes
        self.threads = threads
        self.buffers: dict[str, SampleBuffer] = {}
        self._writers: dict[str, SlotWriter] = {}
        self._ndims: dict[str, int] = {}
        self._indexed: set[str] = set()

    # -- checking -------------------------------------------------------------------------------
    def _schema(self, schema: TensorSchema) -> TensorSchema:
        # Only reads: the rank is recorded by add(), so a refused call leaves no trace behind.
        if schema.ndim is not None or not self._ndims:
            return schema
        return schema.with_rank(self._ndims.get(schema.name))

    def encode(self, schema: TensorSchema, value: object, first: int | None = None) -> Encoded:
        """Check one sample (raises InvalidSampleError; buffers nothing)."""
        return self._schema(schema).encode(value, first)

    def encode_many(self, schema: TensorSchema, values: object) -> np.ndarray | list[Encoded]:
        """Check many samples: a stacked array when the fast path applies, else a list."""
        schema = self._schema(schema)
        if isinstance(values, np.ndarray) and values.ndim >= 1:
            block = schema.encode_block(values)
            if block is not None:
                return block
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            raise InvalidSampleError(
                schema.name,
                f"extend() takes a sequence of samples. Got {type(values).__name__}; "
                "use append() for one sample.",
            )
        if isinstance(values, list):
            ragged = schema.encode_ragged(values)
            if ragged is not None:
                return ragged
        out: list[Encoded] = []
        for v in values:
            out.append(schema.encode(v, len(out[0].shape) if out else None))
        return out

    def encode_ragged(self, schema: TensorSchema, values: list[Any]) -> list[Encoded] | None:
        """Check arrays whose first dimension varies in one go (see `TensorSchema.encode_ragged`); None
        when that does not apply or a value would be refused (`encode` each to find it)."""
        return self._schema(schema).encode_ragged(values)

    def prefer_indexed(self, name: str) -> None:
        """Write ``name``'s samples as indexed runs (per-sample rows) even when their shapes agree."""
        self._indexed.add(name)

    # -- buffering ------------------------------------------------------------------------------
    def add(self, schema: TensorSchema, item: Encoded | np.ndarray | list[Encoded]) -> list[Fragment]:
        """Buffer checked samples; returns fragments if the buffer had to be written out."""
        name = schema.name
        buf = self.buffers.get(name)
        if buf is None:
            buf = self.buffers[name] = SampleBuffer()
        rank = rank_of(item)
        if rank is not None:
            self._ndims.setdefault(name, rank)
        if isinstance(item, np.ndarray):
            buf.add_block(item)
        elif isinstance(item, list):
            for enc in item:
                buf.add(enc)
        else:
            buf.add(item)
        if buf.nbytes >= self.flush_bytes:
            return self.flush(schema)
        return []

    def pending(self, name: str) -> int:
        buf = self.buffers.get(name)
        return 0 if buf is None else buf.count

    def pending_names(self) -> list[str]:
        """The tensors with samples buffered."""
        return [name for name, buf in self.buffers.items() if buf.count]

    def flush(self, schema: TensorSchema) -> list[Fragment]:
        """Write out a tensor's buffer; returns the fragment written (0 or 1 of them)."""
        buf = self.buffers.get(schema.name)
        if buf is None or buf.count == 0:
            return []
        return self._write(self._schema(schema), buf, self._writer(schema))

    def flush_many(self, schemas: list[TensorSchema], *, seal: bool = False) -> dict[str, list[Fragment]]:
        """Write out several tensors' buffers; the fragments written, by tensor, in ``schemas``' order.
        ``seal``: also store what every slot writer of the session holds back (`SlotWriter`'s
        ``hold_tails``), so that every fragment it handed out is stored whole.

        Each tensor writes its own slot, so their chunks are stored concurrently: a commit into many
        tensors waits for the file system's round trips side by side instead of one after another.
        """
        jobs = []
        for schema in schemas:
            buf = self.buffers.get(schema.name)
            if buf is not None and buf.count:
                jobs.append((self._schema(schema), buf, self._writer(schema)))  # slots handed out in order

        def run(job: tuple[TensorSchema, SampleBuffer, SlotWriter]) -> list[Fragment]:
            frags = self._write(*job)
            if seal:
                job[2].seal()
            return frags

        if len(jobs) < _CONCURRENT_FROM:
            out = {job[0].name: run(job) for job in jobs}
        else:
            with thread_pool(self.threads, "flush") as pool:
                done = list(pool.map(run, jobs))
            out = {job[0].name: frags for job, frags in zip(jobs, done, strict=True)}
        if seal:  # the writers of tensors with nothing left buffered
            for name, writer in self._writers.items():
                if name not in out:
                    writer.seal()
        return out

    def _writer(self, schema: TensorSchema) -> SlotWriter:
        writer = self._writers.get(schema.name)
        if writer is None:
            writer = self._writers[schema.name] = self._slot_source(schema.spec)
        return writer

    def _write(self, schema: TensorSchema, buf: SampleBuffer, writer: SlotWriter) -> list[Fragment]:
        """Write one tensor's buffer into its slot (touches only that tensor's buffer and writer)."""
        assert schema.ndim is not None  # add() recorded the rank of the first samples buffered
        dtype = schema.spec.dtype or ""
        if schema.spec.kind == "array":
            dtype = schema.run_dtype(_dtypes(buf))
        indexed = schema.name in self._indexed
        frag = buf.write(writer, ndim=schema.ndim, dtype=dtype, prefer_indexed=indexed)
        buf.clear()
        if frag is None:
            return []
        if frag.shape is None:
            # Once a tensor has varying shapes, keep writing indexed runs so they merge.
            self._indexed.add(schema.name)
        return [frag]

    def forget(self, name: str) -> None:
        """Drop a tensor's buffer and rank (the tensor was deleted or renamed)."""
        self.buffers.pop(name, None)
        self._ndims.pop(name, None)

    def discard(self) -> None:
        """Drop everything buffered (a rolled-back transaction); later writes go to new slots."""
        for buf in self.buffers.values():
            buf.clear()
        self._ndims.clear()
        self.new_slots()

    def new_slots(self) -> None:
        """Write into new slots from now on (the segments of the current ones are no longer ours)."""
        self._writers.clear()


def _dtypes(buf: SampleBuffer) -> list[np.dtype[Any]]:
    out: list[np.dtype[Any]] = []
    for item in buf.items:
        arr = item if isinstance(item, np.ndarray) else item.array
        if arr is not None:
            out.append(arr.dtype)
    return out
