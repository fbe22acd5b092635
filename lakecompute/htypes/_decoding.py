"""Decoding a read's stored samples: on a device, through the reading thread's host decoder, or here.

A reader decodes a run of stored blobs at once (`decode_many`). Where they are decoded is the reading
thread's choice, made with `lakecompute.htypes.decoding_on`: on a GPU (``decode_on_device``, see
``_device.py``), through a host decoder it is given (a worker placed on a GPU hands its images to helper
processes, `lakecompute.compute` ``_decoders.py``, so that its GIL is the model's), or here, one blob
after the other (`decode_blobs`). This module runs nothing of its own: no thread, no process, no
shared memory; those are the runtime's (``compute``, ``schedulers``), which calls the pure functions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lakecompute.errors import LakeComputeError
from lakecompute.htypes._device import decode_on_device, host_decoder
from lakecompute.htypes._registry import decode_sample
from lakecompute.specs import TensorSpec

__all__ = ["decode_blobs", "decode_many"]


def decode_many(spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]) -> list[Any]:
    """The values of ``blobs`` (each a stored blob and its shape) of tensor ``spec``, in order; a blob
    that does not decode gives its error (``ValueError`` or `LakeComputeError`) in its place, for the
    caller to report with its position. Decoded on the GPU where this thread reads for one
    (`lakecompute.htypes.decoding_on`: JPEG images, as torch tensors there), else by this thread's host
    decoder where it has one (`decoding_on`'s ``host``), else here (`decode_blobs`)."""
    host = host_decoder() or decode_blobs
    on_device = decode_on_device(spec, blobs, host)
    if on_device is not None:
        return on_device
    return host(spec, blobs)


def decode_blobs(spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]) -> list[Any]:
    """`decode_many` here, one blob after the other: each value, or its error in its place."""
    out: list[Any] = []
    for blob, shape in blobs:
        try:
            out.append(decode_sample(spec, blob, shape))
        except (LakeComputeError, ValueError) as exc:
            out.append(exc)
    return out
