"""What a worker reads for a task, and how: its reader threads, its decoding helpers, its batches.

A worker placed on a device (`placed`) reads for a model on a GPU: it decodes its images in helper
processes (`start_decoding_helpers`) and stacks its batches in page-locked memory
(`lakecompute.schedulers.pinned_staging`), so that the thread running the model keeps its GIL and its
host-to-device copies are only queued. With ``decode_on_device`` its reads decode JPEG images on the
GPU instead (`decode_device`, `lakecompute.compute.DatasetSource.decode_on`).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable
from typing import Any

from lakecompute.compute._inputs import DatasetSource, Source
from lakecompute.compute._job import Job, Task
from lakecompute.compute._options import EvalOptions
from lakecompute.compute._overlap import ReadAhead, Stages
from lakecompute.errors import InvalidArgumentError, warn
from lakecompute.htypes import decode_in_processes
from lakecompute.schedulers import pinned_staging, take_next_task, usable_cpus, worker_device

__all__ = [
    "check_decode_on_device",
    "decode_device",
    "placed",
    "read_ahead",
    "read_samples",
    "readers",
    "start_decoding_helpers",
]

#: The eval whose decoding helpers this process has started (once: if they die, it decodes itself).
_helpers_started_for: list[str] = []


def start_decoding_helpers(job: Job) -> None:
    """In a worker process placed on a device, decode the dataset's images in helper processes, its
    share of the CPUs less one (`lakecompute.htypes.decode_in_processes`): its GIL is then the model's,
    not its readers'. Started on a thread, so that their start overlaps the model's build; reads before
    they are up decode here. Once per eval: helpers that died are not started again."""
    if not placed(job):
        return
    helpers = usable_cpus() // job.options.num_workers - 1
    if helpers > 0 and job.source.parallel_reads > 1 and _helpers_started_for != [job.token]:
        _helpers_started_for[:] = [job.token]
        threading.Thread(target=decode_in_processes, args=(helpers,), daemon=True).start()


def placed(job: Job) -> bool:
    """Whether this is a worker process placed on a device (not the caller, not a thread)."""
    options = job.options
    return options.devices is not None and bool(options.num_workers) and os.getpid() != job.parent_pid


#: The blocks of one task.
Blocks = ReadAhead[Iterable[tuple[int, Any]]]

#: Blocks read for a task before it started, by (eval, task number): its predecessor in this worker took it
#: early (`take_next_task`) once its own blocks were all read, so that no task starts by waiting for its
#: first block to be read and decoded (on an H200, one worker's model waited there at every task start).
_early: dict[tuple[str, int], Blocks] = {}
_early_lock = threading.Lock()


def read_ahead(job: Job, task: Task, stages: Stages, overlap: bool) -> Blocks:
    """The blocks of ``task``, read ahead of their use on reader threads (see `readers`; none without
    ``overlap``): those its predecessor in this worker started reading already, else new ones. Once they
    are all read, the readers of a lone worker or of one placed on a GPU take this worker's next task
    (`take_next_task`) and start on its blocks."""
    with _early_lock:
        early = _early.pop((job.token, task.number), None)
        for key in [k for k in _early if k[0] != job.token]:  # another eval's, left by a failure
            del _early[key]
    if early is not None:
        early.adopt(stages)
        return early
    return _new_read_ahead(job, task, stages, overlap)


def _new_read_ahead(
    job: Job, task: Task, stages: Stages, overlap: bool
) -> ReadAhead[Iterable[tuple[int, Any]]]:
    assert task.decided is not None
    block = task.decided.block
    ranges = [(s, min(task.stop, s + block)) for s in range(task.start, task.stop, block)]
    threads = readers(job) if overlap else 0
    # One worker, or one on a GPU (whose device idles while a task's first block is read): with several
    # CPU workers, a busy one taking the next task could leave another idle at the end, for little gain.
    early = threads and (job.options.num_workers == 1 or placed(job))
    then = functools.partial(_start_next, job) if early else None
    return ReadAhead(functools.partial(read_samples, job, task), ranges, threads, stages, then)


def _start_next(job: Job) -> None:
    """On a reader thread whose task's blocks are all read: start reading this worker's next task, if it
    can be taken now and is one that reads (not the preflight, not a warm-up)."""
    task = take_next_task()
    if not isinstance(task, Task) or task.decided is None or task.preflight or task.warm:
        return
    early = _new_read_ahead(job, task, Stages(), True)
    with _early_lock:
        _early[(job.token, task.number)] = early


def readers(job: Job) -> int:
    """Reader threads per task: what the source allows (none for input already in memory, one for a
    sequence whose ``__getitem__`` is the user's), and for datasets a share of this machine's CPUs per
    worker (decoding, which releases the GIL, then runs in parallel)."""
    allowed = job.source.parallel_reads
    if allowed <= 1:
        return allowed
    return max(1, min(allowed, usable_cpus() // max(1, job.options.num_workers)))


def read_samples(job: Job, task: Task, start: int, stop: int) -> Iterable[tuple[int, Any]]:
    """Inputs ``start..stop`` of ``task`` as ``(index, sample_in)`` pairs (batches with batch_size), read
    now; the pairs and rows of dataset input are made as they are taken."""
    job.source.decode_on(decode_device(job))
    return _read(job, task, start, stop)


def _read(job: Job, task: Task, start: int, stop: int) -> Iterable[tuple[int, Any]]:
    batch = job.options.batch_size
    if task.items is not None:
        items = task.items[start - task.start : stop - task.start]
        if batch:
            return [(start + b, items[b : b + batch]) for b in range(0, len(items), batch)]
        return list(zip(range(start, stop), items, strict=True))
    source = job.source
    if batch:
        # A worker placed on a GPU stacks its batches in page-locked memory (`pinned_staging`).
        staging = pinned_staging if placed(job) else None
        batches = source.read_batches(start, stop, batch, staging)
        return list(zip(range(start, stop, batch), batches, strict=True))
    return zip(range(start, stop), source.read_block(start, stop, batch=False), strict=True)


def decode_device(job: Job) -> str | None:
    """The GPU this process's readers decode JPEG images on (``decode_on_device``), or None: a worker
    process given one GPU (``devices=``, or a Ray task with ``num_gpus``: its ``lc.worker_device()`` is
    ``"cuda:0"`` on every thread). Worker threads and the calling process (``num_workers=0``) decode on
    the CPU: their readers do not know which of the caller's GPUs is theirs."""
    if not job.options.decode_on_device or os.getpid() == job.parent_pid:
        return None
    device = worker_device()
    return device if device.startswith("cuda") else None


def check_decode_on_device(source: Source, options: EvalOptions) -> None:
    """In the caller: refuse ``decode_on_device=True`` for input that has no JPEG image tensor, and warn
    where it cannot take effect (workers that are not processes of their own).

    Raises:
        InvalidArgumentError: ``data_in`` is not a dataset, or none of its tensors holds JPEG images.
    """
    if not options.decode_on_device:
        return
    images = source.image_compressions() if isinstance(source, DatasetSource) else {}
    if "jpeg" not in images.values():
        listed = ", ".join(f"{name!r} ({kind or 'uncompressed'})" for name, kind in images.items())
        got = f"its image tensors are {listed}" if listed else "it has no image tensor"
        if not isinstance(source, DatasetSource):
            got = "data_in is not a dataset"
        raise InvalidArgumentError(
            f"decode_on_device=True decodes a dataset's JPEG image tensors (sample_compression='jpeg') on "
            f"the GPU, but {got}. Leave decode_on_device False."
        )
    if options.num_workers == 0 or options.scheduler == "threaded":
        where = "num_workers=0" if options.num_workers == 0 else "scheduler='threaded'"
        warn(
            f"decode_on_device=True decodes in worker processes placed on a GPU; with {where} the images are "
            "decoded on the CPU (numpy arrays, as without it). Use num_workers >= 1 with the processed "
            "scheduler (the default)."
        )
