"""Turning buffered samples into fragments (reading them back is `lakecompute.storage.Locator`'s)."""

from __future__ import annotations

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.specs import Encoded, TensorSpec
from lakecompute.storage._manifest import Fragment, TensorState
from lakecompute.storage._segments import SlotWriter

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


def _ndim_error(spec: TensorSpec, expected: int, got: int) -> InvalidSampleError:
    return InvalidSampleError(
        spec.name,
        f"every sample of a tensor has the same number of dimensions: expected {expected}, got {got}.",
    )


def write_fragment(
    spec: TensorSpec,
    state_ndim: int | None,
    buffer: SampleBuffer,
    writer: SlotWriter,
    prefer_indexed: bool,
) -> Fragment | None:
    """Write a buffer's samples into ``writer``'s slot as one fragment (None if it is empty)."""
    if buffer.count == 0:
        return None
    if spec.kind == "bytes":
        blobs: list[bytes] = []
        shapes: list[tuple[int, ...]] = []
        for item in buffer.items:
            assert isinstance(item, Encoded)
            assert item.blob is not None
            blobs.append(item.blob)
            shapes.append(item.shape)
        ndim = _common_ndim(spec, state_ndim, shapes)
        payload = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        rows = np.empty((len(blobs), 1 + ndim), dtype=np.int64)
        rows[:, 0] = [len(b) for b in blobs]
        if ndim:
            rows[:, 1:] = shapes
        off = writer.write_data(payload)
        idx = writer.write_index(rows)
        return Fragment(
            writer.seg_id, off, payload.size, len(blobs), spec.dtype or "", None, idx, ndim, 0, len(blobs)
        )

    arrays: list[np.ndarray] = []
    for item in buffer.items:
        if isinstance(item, np.ndarray):
            arrays.append(item)
        else:
            assert item.array is not None
            arrays.append(item.array[None])
    dtype = np.result_type(*arrays) if spec.dtype is None else np.dtype(spec.dtype)
    sample_shapes = {a.shape[1:] for a in arrays}
    ndim = _common_ndim(spec, state_ndim, list(sample_shapes))
    if len(sample_shapes) == 1 and not prefer_indexed:
        (shape,) = sample_shapes
        block = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
        block = np.ascontiguousarray(block, dtype=dtype)
        off = writer.write_data(block.reshape(-1).view(np.uint8))
        return Fragment(
            writer.seg_id, off, block.nbytes, len(block), dtype.name, shape, None, ndim, 0, len(block)
        )
    samples = [s for a in arrays for s in a]
    rows = np.empty((len(samples), 1 + ndim), dtype=np.int64)
    rows[:, 0] = [s.size * dtype.itemsize for s in samples]
    if ndim:
        rows[:, 1:] = [s.shape for s in samples]
    payload = np.concatenate(
        [np.ascontiguousarray(s, dtype=dtype).reshape(-1).view(np.uint8) for s in samples]
    )
    off = writer.write_data(payload)
    idx = writer.write_index(rows)
    return Fragment(
        writer.seg_id, off, payload.size, len(samples), dtype.name, None, idx, ndim, 0, len(samples)
    )


def _common_ndim(spec: TensorSpec, state_ndim: int | None, shapes: list[tuple[int, ...]]) -> int:
    ndims = {len(s) for s in shapes}
    expected = state_ndim if state_ndim is not None else min(ndims)
    for n in ndims:
        if n != expected:
            raise _ndim_error(spec, expected, n)
    return expected


def append_fragment(state: TensorState, frag: Fragment) -> None:
    """Add ``frag`` at the end of ``state``, merging it into the last fragment when contiguous."""
    if state.ndim is None:
        state.ndim = frag.ndim
    if state.fragments:
        last = state.fragments[-1]
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
            state.fragments[-1] = Fragment(
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
            state.fragments[-1] = Fragment(
                last.seg, last.off, last.nbytes + frag.nbytes, last.total + frag.total, last.dtype,
                None, last.idx, last.ndim, last.k, last.n + frag.n,
            )  # fmt: skip
            return
    state.fragments.append(frag)
