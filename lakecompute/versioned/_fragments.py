"""Turning buffered samples into fragments (reading them back is `lakecompute.versioned.Locator`'s)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from lakecompute.specs import Encoded
from lakecompute.versioned._manifest import Fragment
from lakecompute.versioned._segments import SlotWriter

__all__ = ["SampleBuffer", "append_fragment", "write_fragment"]


class SampleBuffer:
    """Checked samples of one tensor waiting to be written, as stacked blocks or single samples."""

    __slots__ = ("count", "items", "nbytes")

    def __init__(self) -> None:
        self.items: list[np.ndarray | Encoded] = []  # ndarray: a block of samples stacked on axis 0
        self.count = 0
        self.nbytes = 0

    def add(self, sample: Encoded) -> None:
        self.items.append(sample)
        self.count += 1
        self.nbytes += sample.array.nbytes if sample.array is not None else len(sample.blob or b"")

    def add_block(self, block: np.ndarray) -> None:
        self.items.append(block)
        self.count += len(block)
        self.nbytes += block.nbytes

    def clear(self) -> None:
        self.items = []
        self.count = 0
        self.nbytes = 0

    def write(self, writer: SlotWriter, *, ndim: int, dtype: str, prefer_indexed: bool) -> Fragment | None:
        """Write the samples into ``writer``'s slot as one fragment (see `write_fragment`)."""
        return write_fragment(self, writer, ndim=ndim, dtype=dtype, prefer_indexed=prefer_indexed)


def write_fragment(
    buffer: SampleBuffer,
    writer: SlotWriter,
    *,
    ndim: int,
    dtype: str,
    prefer_indexed: bool,
) -> Fragment | None:
    """Write a buffer's samples into ``writer``'s slot as one fragment (None if it is empty).

    Records what it is given: the samples were checked, and their rank and stored dtype (``dtype``: the
    numpy dtype of an array tensor's values, or a bytes tensor's dtype name) decided, by the dataset
    layer's ``TensorSchema``.
    """
    if buffer.count == 0:
        return None
    if not all(isinstance(item, np.ndarray) or item.array is not None for item in buffer.items):
        return _write_blobs(buffer, writer, ndim, dtype)
    stored = np.dtype(dtype)
    sample_shapes = {_sample_shape(item) for item in buffer.items}
    if len(sample_shapes) == 1 and not prefer_indexed:
        (shape,) = sample_shapes
        arrays: list[np.ndarray] = []
        for item in buffer.items:
            if isinstance(item, np.ndarray):
                arrays.append(item)
            else:
                assert item.array is not None
                arrays.append(item.array[None])
        block = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
        block = np.ascontiguousarray(block, dtype=stored)
        off = writer.write_data(block.reshape(-1).view(np.uint8))
        return Fragment(
            writer.seg_id, off, block.nbytes, len(block), stored.name, shape, None, ndim, 0, len(block)
        )
    samples: list[np.ndarray] = []
    for item in buffer.items:
        if isinstance(item, np.ndarray):
            samples.extend(item)  # the rows of a stacked block
        else:
            assert item.array is not None
            samples.append(item.array)
    rows = np.empty((len(samples), 1 + ndim), dtype=np.int64)
    rows[:, 0] = [s.size for s in samples]
    rows[:, 0] *= stored.itemsize
    if ndim:
        rows[:, 1:] = [s.shape for s in samples]
    # Each sample cast to the stored dtype on its own (casting="unsafe" as astype does: the values were
    # checked to fit), never through a dtype the samples would be promoted to together.
    flat = np.concatenate([s.reshape(-1) for s in samples], dtype=stored, casting="unsafe")
    payload = flat.view(np.uint8)
    off = writer.write_data(payload)
    idx = writer.write_index(rows)
    return Fragment(
        writer.seg_id, off, payload.size, len(samples), stored.name, None, idx, ndim, 0, len(samples)
    )


def _sample_shape(item: np.ndarray | Encoded) -> tuple[int, ...]:
    """The shape of each sample of a buffered item (a stacked block's rows, or one sample's array)."""
    if isinstance(item, np.ndarray):
        return item.shape[1:]
    assert item.array is not None
    return item.array.shape


def _write_blobs(buffer: SampleBuffer, writer: SlotWriter, ndim: int, dtype: str) -> Fragment:
    """Encoded samples (images, text, json): their bytes and an index row ``[nbytes, *shape]`` each."""
    blobs: list[bytes | memoryview] = []
    shapes: list[tuple[int, ...]] = []
    for item in buffer.items:
        assert isinstance(item, Encoded)
        assert item.blob is not None
        blobs.append(item.blob)
        shapes.append(item.shape)
    runs = blob_runs(blobs)
    rows = np.empty((len(blobs), 1 + ndim), dtype=np.int64)
    rows[:, 0] = [len(b) for b in blobs]
    if ndim:
        rows[:, 1:] = shapes
    off = writer.write_data(runs[0])
    for run in runs[1:]:  # appended right after: the blobs lie back to back in the segment
        writer.write_data(run)
    nbytes = sum(run.size for run in runs)
    idx = writer.write_index(rows)
    return Fragment(writer.seg_id, off, nbytes, len(blobs), dtype, None, idx, ndim, 0, len(blobs))


def blob_runs(blobs: list[bytes | memoryview]) -> list[np.ndarray]:
    """The blobs back to back, as uint8 arrays written one after the other: a view of the buffer that
    holds a run of them back to back (a table's column of images: each row group's buffer), so that they
    are stored without being copied first; the others joined (one copy). A block of rows that spans two
    row groups was joined whole before: half of a 2,000-image ingest's bytes copied once more."""
    runs: list[np.ndarray] = []
    loose: list[bytes | memoryview] = []
    owner: Any = None
    whole = np.empty(0, dtype=np.uint8)
    lo = start = end = 0

    def flush() -> None:
        nonlocal owner
        if owner is not None:
            runs.append(whole[start - lo : end - lo])
            owner = None
        if loose:
            runs.append(np.frombuffer(b"".join(loose), dtype=np.uint8))
            loose.clear()

    for blob in blobs:
        at = _address(blob)
        if at is None:
            if owner is not None:
                flush()
            loose.append(blob)
            continue
        assert isinstance(blob, memoryview)
        if owner is not None and blob.obj is owner and at == end:
            end += len(blob)
            continue
        flush()
        try:
            exporter = np.frombuffer(cast(Any, blob.obj), dtype=np.uint8)  # the exporter's buffer, all of it
        except (TypeError, ValueError):  # not one run of bytes (a strided array's view)
            exporter = np.empty(0, dtype=np.uint8)
        base = exporter.ctypes.data
        if not exporter.size or not base <= at <= at + len(blob) <= base + exporter.size:
            loose.append(blob)
            continue
        owner, whole, lo, start, end = blob.obj, exporter, base, at, at + len(blob)
    flush()
    return _merged(runs)


#: Runs of views shorter than this are joined with their neighbours (one write, not one per blob: blobs
#: that are each a view of a buffer of their own).
_LEAST_VIEW = 1 << 20


def _merged(runs: list[np.ndarray]) -> list[np.ndarray]:
    """``runs`` with each series of short ones joined into one array, in order."""
    out: list[np.ndarray] = []
    short: list[np.ndarray] = []
    for run in runs:
        if run.size < _LEAST_VIEW:
            short.append(run)
            continue
        if short:
            out.append(np.concatenate(short) if len(short) > 1 else short[0])
            short = []
        out.append(run)
    if short:
        out.append(np.concatenate(short) if len(short) > 1 else short[0])
    return out


def _address(blob: bytes | memoryview) -> int | None:
    """Where a non-empty, contiguous view of a buffer starts in memory; None for anything else."""
    if not isinstance(blob, memoryview) or blob.obj is None or not blob.c_contiguous or not len(blob):
        return None
    try:
        return int(np.frombuffer(blob, dtype=np.uint8).ctypes.data)
    except (TypeError, ValueError):
        return None


def append_fragment(fragments: list[Fragment], frag: Fragment) -> None:
    """Add ``frag`` at the end of ``fragments``, merging it into the last one when contiguous."""
    if fragments:
        last = fragments[-1]
        contiguous = (
            last.seg == frag.seg
            and last.off + last.nbytes == frag.off
            and last.k + last.n == last.total
            and frag.k == 0
            and frag.n == frag.total
            and last.dtype == frag.dtype
            and last.ndim == frag.ndim
        )
        if contiguous and last.shape is not None and last.shape == frag.shape:
            fragments[-1] = Fragment(
                last.seg, last.off, last.nbytes + frag.nbytes, last.total + frag.total, last.dtype,
                last.shape, None, last.ndim, last.k, last.n + frag.n,
            )  # fmt: skip
            return
        if (
            contiguous
            and last.idx is not None
            and frag.idx is not None
            and last.idx + last.total * (1 + last.ndim) == frag.idx
        ):
            fragments[-1] = Fragment(
                last.seg, last.off, last.nbytes + frag.nbytes, last.total + frag.total, last.dtype,
                None, last.idx, last.ndim, last.k, last.n + frag.n,
            )  # fmt: skip
            return
    fragments.append(frag)
