"""Decoding JPEG images on a GPU, for ``eval(decode_on_device=True)``.

On a 16-core host feeding an H200, decoding JPEGs on the CPU bounds a ResNet-50 column: the card runs
the model several times faster than the host decodes its input. nvJPEG decodes them on the device
(the H100/H200's hardware JPEG engines for baseline JPEGs, CUDA kernels for the rest), as NVIDIA DALI
does; torchvision's ``decode_jpegs_cuda`` op batches it (one call per list of images).

A reader thread of a worker placed on a GPU reads its block under `decoding_on` (the worker's device):
`decode_on_device`, asked first by `lakecompute.htypes.decode_many`, then decodes the block's JPEG
samples there, after the reading process has verified their stored bytes, as every read does. What it
does not send to the device, or what the device refuses, is decoded on the host as without the option
and copied to the device, so that a block's values are all tensors on it; a sample that does not decode
on the host either keeps its error, which the reader reports as `DatasetCorruptError` naming the sample.
A process where the device cannot decode at all (no torchvision, no CUDA) warns once and decodes on the
host from then on: its values are numpy arrays, as without the option.

Each value is the decoded image as ``numpy()`` shapes it (HxWxC, or HxW for greyscale stored so), a view
of nvJPEG's CxHxW output; `stack_on_device` stacks a batch's into one tensor.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from lakecompute.errors import InvalidArgumentError, LakeComputeWarning
from lakecompute.imagefiles import jpeg_frame
from lakecompute.specs import TensorSpec

__all__ = [
    "HostDecode",
    "as_stored",
    "decode_on_device",
    "decode_on_host_with",
    "decoding_device",
    "decoding_on",
    "host_decoder",
    "is_tensor",
    "jpeg_mode",
    "stack_on_device",
]

#: Decodes blobs on the host (values, or errors in place): `lakecompute.htypes.decode_blobs`, or a
#: worker's decoding helpers.
HostDecode = Callable[[TensorSpec, Sequence[tuple[Any, tuple[int, ...]]]], list[Any]]

_state = threading.local()
_lock = threading.Lock()
#: Why this process decodes on the host although asked to decode on the device ("" while it tries).
_unusable = ""
_refusal_warned = False
#: torchvision's ImageReadMode values (the op takes the number).
_GRAY, _RGB = 1, 3
#: The JPEG frames sent to nvJPEG, with the values checked against the host's decode on an H200
#: (torchvision 0.26, CUDA 13; tests/devices/test_gpu.py): Huffman-coded baseline, extended and
#: progressive frames; greyscale with sampling factors 1x1 only (nvJPEG decoded greyscale frames with
#: 2x1 or 2x2 factors, which Pillow writes when asked for subsampling, to values 16-136 levels off on
#: average, silently; progressive ones it decoded right); colour as YCbCr with chroma 1x1 and luma 1x1,
#: 2x1 or 2x2 (4:4:4, 4:2:2, 4:2:0). The rest (lossless, hierarchical or arithmetic-coded frames, CMYK,
#: RGB-coded colour, other subsamplings) is decoded on the host, exactly as without the option.
_NVJPEG_FRAMES = frozenset({0xC0, 0xC1, 0xC2})
_NVJPEG_LUMA = frozenset({(1, 1), (2, 1), (2, 2)})
#: Component ids "R", "G", "B": libjpeg reads such a frame as RGB, not YCbCr.
_RGB_IDS = (0x52, 0x47, 0x42)


@contextlib.contextmanager
def decoding_on(device: str | None, host: HostDecode | None = None) -> Iterator[None]:
    """Decode the JPEG images this thread reads on ``device`` (a torch device name) inside the block, and
    what it decodes on the host through ``host`` (a worker's decoding helpers); None for either decodes
    as outside the block (on the host, here). At its end this thread waits for what it queued on the
    device (the decodes, copies and stacks): the values are ready before the function's thread takes
    them, whatever CUDA stream that uses, and the wait is the reader's, not the model's."""
    before = getattr(_state, "device", None), getattr(_state, "used", False), getattr(_state, "host", None)
    _state.device, _state.used, _state.host = device, False, host
    try:
        yield
    finally:
        if _state.used:
            sys.modules["torch"].cuda.current_stream(device).synchronize()
        _state.device, _state.used, _state.host = before


#: What this process's reads decode on the host with where their thread was given nothing
#: (`decode_on_host_with`: the runtime's decoding helpers, `lakecompute.compute.decode_in_processes`).
_process_host: list[HostDecode] = []


def decode_on_host_with(host: HostDecode | None) -> None:
    """Decode what this process's threads read on the host through ``host`` from now on, where a thread
    was given no host decoder of its own (`decoding_on`); None: here, the default. The runtime sets it
    (a process's decoding helpers); this module runs nothing of its own."""
    _process_host[:] = [] if host is None else [host]


def host_decoder() -> HostDecode | None:
    """What this thread decodes blobs on the host with: `decoding_on`'s ``host``, else this process's
    (`decode_on_host_with`), else None: here."""
    host: HostDecode | None = getattr(_state, "host", None)
    if host is None and _process_host:
        return _process_host[0]
    return host


def decoding_device() -> str | None:
    """The device this thread decodes JPEG images on (`decoding_on`), or None."""
    device: str | None = getattr(_state, "device", None)
    return device


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor (without importing torch)."""
    return type(value).__module__.startswith("torch") and hasattr(value, "is_cuda")


def decode_on_device(
    spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]], host: HostDecode
) -> list[Any] | None:
    """The values of ``blobs`` of tensor ``spec`` decoded on this thread's device (`decoding_on`), in
    order, each a torch uint8 tensor there or, for a blob that does not decode, its error; None when this
    read does not decode on a device (not asked, not JPEG images, or this process cannot), and the
    caller decodes on the host."""
    device = getattr(_state, "device", None)
    if device is None or spec.htype != "image" or spec.sample_compression != "jpeg" or not blobs:
        return None
    api = _torch_api()
    if api is None:
        return None
    torch, decode = api
    _state.used = True
    out: list[Any] = [None] * len(blobs)
    on_host = _decode_groups(torch, decode, device, blobs, out)
    if on_host:
        values = host(spec, [blobs[k] for k in on_host])
        for k, value in zip(on_host, values, strict=True):
            out[k] = torch.from_numpy(value).to(device) if isinstance(value, np.ndarray) else value
    return out


def _decode_groups(
    torch: Any, decode: Any, device: str, blobs: Sequence[tuple[Any, tuple[int, ...]]], out: list[Any]
) -> list[int]:
    """Decode on the device the blobs it can take, into ``out``; return the positions left to the host."""
    groups: dict[int, list[int]] = {_RGB: [], _GRAY: []}
    on_host: list[int] = []
    for k, (blob, shape) in enumerate(blobs):
        mode = jpeg_mode(blob, shape)
        (on_host if mode is None else groups[mode]).append(k)
    for mode, positions in groups.items():
        if not positions:
            continue
        try:
            decoded = decode(
                _cpu_tensors(torch, [blobs[k][0] for k in positions]), mode, torch.device(device)
            )
        except RuntimeError as exc:  # nvJPEG refused one of them (it says not which): the host decodes all
            _refused(exc, len(positions))
            on_host.extend(positions)
            continue
        for k, image in zip(positions, decoded, strict=True):
            value = as_stored(image, blobs[k][1])
            if value is None:
                on_host.append(k)  # not the stored size: the host's decode says what is wrong
            else:
                out[k] = value
    return sorted(on_host)


def jpeg_mode(blob: Any, shape: tuple[int, ...]) -> int | None:
    """The mode nvJPEG decodes ``blob`` in for its stored ``shape`` (RGB for HxWx3, greyscale for HxW and
    HxWx1), or None for the host: another shape, bytes that are not a whole JPEG (damaged: the host's
    decoder reports them as it always has, where nvJPEG might decode what it can), or a frame nvJPEG is
    not trusted with (`_NVJPEG_FRAMES`)."""
    data = np.ascontiguousarray(blob.reshape(-1)).data if isinstance(blob, np.ndarray) else memoryview(blob)
    try:
        frame = jpeg_frame(data)
    except InvalidArgumentError:
        return None
    colour = len(shape) == 3 and shape[2] == 3
    grey = len(shape) == 2 or (len(shape) == 3 and shape[2] == 1)
    if frame.marker not in _NVJPEG_FRAMES or frame.adobe_transform == 0:
        return None
    sampling = tuple((h, v) for _, h, v in frame.components)
    if grey and sampling == ((1, 1),):
        return _GRAY
    ids = tuple(c for c, _, _ in frame.components)
    if colour and sampling[1:] == ((1, 1), (1, 1)) and sampling[0] in _NVJPEG_LUMA and ids != _RGB_IDS:
        return _RGB
    return None


def _cpu_tensors(torch: Any, blobs: list[Any]) -> list[Any]:
    """The blobs as 1-d uint8 CPU tensors (what the op takes): views of one new joined array (the stored
    blobs are read-only views of a chunk, which torch would warn about)."""
    parts = [
        np.frombuffer(b, dtype=np.uint8) if not isinstance(b, np.ndarray) else b.reshape(-1) for b in blobs
    ]
    joined = torch.from_numpy(np.concatenate(parts))
    out, at = [], 0
    for part in parts:
        out.append(joined[at : at + len(part)])
        at += len(part)
    return out


def as_stored(image: Any, shape: tuple[int, ...]) -> Any:
    """nvJPEG's CxHxW image as the host's decode shapes it (HxWxC, HxW), or None if its size is not the
    stored one."""
    if tuple(image.shape[1:]) != tuple(shape[:2]):
        return None
    return image[0] if len(shape) == 2 else image.permute(1, 2, 0)


def _torch_api() -> tuple[Any, Any] | None:
    """torch and torchvision's batched nvJPEG op, or None (once warned) where this process cannot use them.

    The op is what ``torchvision.io.decode_jpeg(list, device="cuda")`` calls: called directly, since that
    wrapper also warns of its deprecation (torchvision 0.29) on every call, from every reader thread.
    """
    global _unusable
    if _unusable:
        return None
    try:
        import torch

        importlib.import_module("torchvision.io")  # loads torchvision's image ops

        decode = torch.ops.image.decode_jpegs_cuda
        # Raises where this worker has no usable GPU (a worker placed on one initialises CUDA here, as
        # its decodes would; the caller's process never runs this: the option is a worker's).
        torch.empty(0, device="cuda")
    except Exception as exc:
        with _lock:
            first = not _unusable
            _unusable = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if first:
            warnings.warn(
                f"decode_on_device=True, but this worker cannot decode on its GPU ({_unusable}); its JPEG "
                "images are decoded on the CPU and arrive as numpy arrays. Install torchvision with CUDA "
                "(nvJPEG) where the workers run.",
                LakeComputeWarning,
                stacklevel=2,
            )
        return None
    return torch, decode


def _refused(exc: BaseException, count: int) -> None:
    """Say once per process that the device refused a block's images (the host decodes them)."""
    global _refusal_warned
    with _lock:
        first, _refusal_warned = not _refusal_warned, True
    if first:
        warnings.warn(
            f"The GPU's JPEG decoder refused a block of {count} images ({str(exc).splitlines()[0]}); "
            "they are decoded on the CPU and copied to the device (said once per worker).",
            LakeComputeWarning,
            stacklevel=3,
        )


def stack_on_device(values: list[Any]) -> Any:
    """A batch's device tensors as one tensor (Bx...), where they have one shape; else the list."""
    first = values[0]
    if any(v.shape != first.shape for v in values):
        return values
    return sys.modules["torch"].stack(values)
