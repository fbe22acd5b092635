"""Devices as a scheduler resource: which GPU each worker gets, and what a worker may assume about CUDA.

A placement (``devices="cuda"`` or ``[0, 1, ...]``) is resolved once, in the calling process, into
`Placement`: for each device, the entry a worker process puts in its ``CUDA_VISIBLE_DEVICES`` (the
caller's own entry, so a caller restricted to ``CUDA_VISIBLE_DEVICES=2,3`` places workers on GPUs 2 and 3)
and its index in the caller's numbering. Worker ``k`` gets device ``k % len(placement)``:

- a worker **process** (the processed scheduler) sets ``CUDA_VISIBLE_DEVICES`` to its one entry as it
  starts, before the task function (and with it the user's imports) is unpickled, so CUDA, whenever user
  code initialises it, shows that worker one GPU: ``cuda:0``;
- a worker **thread** (the threaded scheduler) or the caller itself (``num_workers=0``) shares the
  caller's CUDA: it is told its device in the caller's numbering, ``cuda:<index>``.

`lakecompute.schedulers.worker_device` says which, inside a compute function.

None of this initialises CUDA or imports torch: GPUs are counted through NVML (``pynvml``, when
installed) or the driver's ``/proc`` entries, never through the CUDA runtime, which would leave the
caller unable to fork workers that use CUDA ("Cannot re-initialize CUDA in forked subprocess"). Whether
the caller has initialised CUDA itself is read from torch's own flag (`cuda_initialised`), without
importing torch when the caller has not.
"""

from __future__ import annotations

import collections
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lakecompute.errors import InvalidArgumentError, RemoteError
from lakecompute.parsing import Devices
from lakecompute.perprocess import PerProcess

__all__ = [
    "Placement",
    "cuda_initialised",
    "device_oom_advice",
    "is_device_oom",
    "pinned_staging",
    "place_workers",
    "visible_devices",
]

#: The environment variable CUDA reads, once, when it is initialised in a process.
CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True, slots=True)
class Placement:
    """The devices the workers of a run are placed on, round robin.

    Attributes:
        entries: per device, the ``CUDA_VISIBLE_DEVICES`` entry that shows a worker process that device
            alone (an index, or a GPU or MIG UUID, as the caller's own variable names it).
        local: per device, its index in the caller's numbering (``cuda:<index>`` in the caller).
    """

    entries: tuple[str, ...]
    local: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.entries)

    def entry(self, worker: int) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` value of worker process ``worker``."""
        return self.entries[worker % len(self.entries)]

    def in_caller(self, worker: int) -> str:
        """The device of worker ``worker`` when it shares the caller's CUDA (a thread, or the caller)."""
        return f"cuda:{self.local[worker % len(self.local)]}"

    def __repr__(self) -> str:
        return f"Placement({list(self.entries)!r})"


def visible_devices() -> tuple[str, ...]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries (without initialising CUDA).

    ``CUDA_VISIBLE_DEVICES`` when it is set (CUDA's own rule: entries up to the first invalid one; empty
    or ``-1``: none), else ``"0"`` .. ``"n-1"`` for the n GPUs NVML or the NVIDIA driver reports.
    """
    declared = os.environ.get(CUDA_VISIBLE)
    if declared is not None:
        entries: list[str] = []
        for entry in (e.strip() for e in declared.split(",")):
            if not entry or entry.startswith("-"):
                break  # CUDA stops at the first entry it cannot read
            entries.append(entry)
        return tuple(entries)
    return tuple(str(i) for i in range(_gpu_count()))


def _gpu_count() -> int:
    """GPUs on this machine, from NVML or the driver's /proc entries; 0 when neither says."""
    try:
        import pynvml  # nvidia-ml-py: NVML, which never initialises CUDA

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass  # not installed, or no driver: ask the driver's files instead
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        return sum(1 for _ in gpus.iterdir())
    except OSError:
        return 0


def place_workers(devices: Devices, share: tuple[int, int] | None = None) -> Placement | None:
    """Resolve ``devices=`` (as `lakecompute.parsing.parse_devices` returns it) against this process's GPUs.

    Args:
        devices: the checked ``devices=``.
        share: ``(local_rank, local_world)`` when this process is one of several of a distributed job on
            this machine: it takes its share of the devices (every ``local_world``-th from its own, or,
            with fewer devices than processes, one device, ``local_rank`` round robin), so that the
            processes of one machine do not all place their workers on the same GPUs.

    Raises:
        InvalidArgumentError: no GPU is visible, or an index names a GPU that is not.
    """
    if devices is None:
        return None
    visible = visible_devices()
    where = (
        f"{CUDA_VISIBLE}={os.environ[CUDA_VISIBLE]!r}"
        if CUDA_VISIBLE in os.environ
        else "NVML and the NVIDIA driver report none"
    )
    if not visible:
        raise InvalidArgumentError(
            f"devices={devices!r} places each worker on a GPU, but this process sees none ({where}). Run "
            "on a machine with a GPU, or pass devices=None to run on the CPU."
        )
    indices = tuple(range(len(visible))) if devices == "cuda" else devices
    missing = sorted({i for i in indices if i >= len(visible)})
    if missing:
        raise InvalidArgumentError(
            f"devices={list(indices)!r} names GPU {missing[0]}, but this process sees {len(visible)} "
            f"(cuda:0 .. cuda:{len(visible) - 1}; {CUDA_VISIBLE}: {os.environ.get(CUDA_VISIBLE)!r}). Use "
            "indices below that, or devices='cuda' for all of them."
        )
    if share is not None:
        rank, count = share
        own = range(rank, len(indices), count) if len(indices) >= count else [rank % len(indices)]
        indices = tuple(indices[k] for k in own)
    return Placement(tuple(visible[i] for i in indices), indices)


def cuda_initialised() -> bool:
    """Whether this process has initialised CUDA through torch (then a forked child cannot use CUDA).

    Reads torch's own flag, and only when the program imported torch: never imports it, never
    initialises anything.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    is_initialized = getattr(cuda, "is_initialized", None)
    if is_initialized is None:
        return False
    try:
        return bool(is_initialized())
    except Exception:
        return False  # a torch too broken to say has not initialised CUDA through itself


# -- page-locked batches ------------------------------------------------------------------------------


class _Pinned:
    """This process's page-locked batches: the last ones given out, kept alive (see `pinned_staging`), and
    whether pinning failed here (then batches are plain arrays from then on)."""

    def __init__(self) -> None:
        self.kept: collections.deque[np.ndarray] = collections.deque()
        self.failed = False


_PINNED = PerProcess(_Pinned)


def pinned_staging(shape: tuple[int, ...], dtype: np.dtype, kept: int) -> np.ndarray | None:
    """A new array of ``shape`` and ``dtype`` in page-locked (pinned) host memory, for a batch that a
    worker placed on a GPU stacks for its function, once this process has initialised CUDA through torch
    (the user's model is on the device); else None (a plain array will do).

    Copied from pinned memory, a batch goes to the device by DMA, and with ``non_blocking=True`` the copy
    is only queued: the function's thread goes on to the model at once (from pageable memory the copy
    is staged through the driver's buffer, the thread waiting). This is what ``pin_memory=True`` does for
    a torch ``DataLoader``, and what a loop that keeps its images pinned does.

    The memory comes from torch's caching host allocator, which knows a copy queued from the start of a
    block and does not hand the block out again before the copy has run. For a copy of a part of it, the
    last ``kept`` arrays (the worker's budget's) are kept alive here as well: a block is reused only after
    that many later batches were read, by when the function that copied it has long returned its outputs
    (which waits for the device). Memory that cannot be pinned is no error: the batches are plain arrays
    from then on.
    """
    pinned = _PINNED.get()
    if pinned.failed or not cuda_initialised():
        return None
    torch = sys.modules["torch"]
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    try:
        raw = torch.empty(count * dtype.itemsize, dtype=torch.uint8, pin_memory=True)
        out: np.ndarray = raw.numpy().view(dtype).reshape(shape)
    except Exception:
        pinned.failed = True
        return None
    pinned.kept.append(out)
    while len(pinned.kept) > kept:
        pinned.kept.popleft()
    return out


# -- running out of device memory ------------------------------------------------------------------

_OOM_TEXT = ("CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "out of memory on device")
_MAX_CHAIN = 16


def is_device_oom(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception in its ``__cause__``/``__context__`` chain) says a device ran out of
    memory: torch's ``OutOfMemoryError`` (``torch.cuda.OutOfMemoryError``), the same from another
    process (a `RemoteError` standing in for it), or CUDA's own message."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(link))
        names = [f"{c.__module__}.{c.__qualname__}" for c in type(link).__mro__]
        if isinstance(link, RemoteError):
            names.append(link.type_name)
        if any(n.startswith("torch") and n.endswith("OutOfMemoryError") for n in names):
            return True
        if any(text in str(link) for text in _OOM_TEXT):
            return True
        link = link.__cause__ or link.__context__
    return False


def device_oom_advice(index: int, batch_size: int | None, length: int | None) -> str:
    """What to do about a device that ran out of memory on ``data_in[index]`` (a batch's first index)."""
    if batch_size is None:
        return (
            f"The device ran out of memory on data_in[{index}]. Free what the function keeps between "
            "samples, put fewer workers on each device, or use a device with more memory."
        )
    stop = index + batch_size if length is None else min(length, index + batch_size)
    smaller = max(1, batch_size // 2)
    return (
        f"The device ran out of memory on the batch data_in[{index}:{stop}] (batch_size={batch_size}). "
        f"Pass a smaller batch_size (such as {smaller}), put fewer workers on each device, or free what "
        "the function keeps between batches."
    )
