"""What a worker reads for a task, and how: its reader threads, its decoding helpers, its batches.

How many readers, whether they read across tasks, how many decoding helpers, and whether batches are
staged in pinned memory is the worker's budget's (`lakecompute.compute._budget.budget_of`). A worker
placed on a device (`WorkerBudget.placed`) reads for a model on a GPU: it decodes its images in helper
processes (`start_decoding_helpers`, `lakecompute.compute._decoders`) and stacks its batches in
page-locked memory (`lakecompute.schedulers.pinned_staging`), so that the thread running the model keeps
its GIL and its host-to-device copies are only queued. With ``decode_on_device`` its reads decode JPEG
images on the GPU instead (`decode_device`, `lakecompute.compute.DatasetSource.read_with`).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable
from typing import Any

from lakecompute.compute._budget import WorkerBudget, budget_of
from lakecompute.compute._decoders import decode_in_processes, decode_with_helpers
from lakecompute.compute._inputs import DatasetSource, Source
from lakecompute.compute._job import Job, Task
from lakecompute.compute._options import EvalOptions
from lakecompute.compute._overlap import ReadAhead, Stages
from lakecompute.errors import InvalidArgumentError, warn
from lakecompute.perprocess import PerProcess
from lakecompute.schedulers import pinned_staging, take_next_task, worker_device
from lakecompute.threads import start_thread

__all__ = [
    "check_decode_on_device",
    "decode_device",
    "read_ahead",
    "read_samples",
    "start_decoding_helpers",
]

#: The blocks of one task.
Blocks = ReadAhead[Iterable[tuple[int, Any]]]


class _Reading:
    """What this process's readers share across tasks: the eval whose decoding helpers it started (once:
    if they die, it decodes itself), and the blocks read for tasks before they started, by (eval, task
    number): its predecessor in this worker took it early (`take_next_task`) once its own blocks were
    all read, so that no task starts by waiting for its first block to be read and decoded (on an H200,
    one worker's model waited there at every task start)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.helpers_for = ""
        self.early: dict[tuple[str, int], Blocks] = {}


_READING = PerProcess(_Reading)


def start_decoding_helpers(job: Job) -> None:
    """In a worker process placed on a device, decode the dataset's images in helper processes (its
    budget's `WorkerBudget.decode_helpers`: its share of the CPUs less one): its GIL is then the model's,
    not its readers'. Started on a thread, so that their start overlaps the model's build; reads before
    they are up decode here. Once per eval: helpers that died are not started again."""
    budget = budget_of(job)
    if not budget.decode_helpers:
        return
    reading = _READING.get()
    with reading.lock:
        if reading.helpers_for == job.token:
            return
        reading.helpers_for = job.token
    start_thread(
        "decoding-helpers",
        decode_in_processes,
        budget.decode_helpers,
        budget.decode_min_sent,
        budget.decode_per_request,
    )


def read_ahead(job: Job, task: Task, stages: Stages, overlap: bool) -> Blocks:
    """The blocks of ``task``, read ahead of their use on reader threads (the budget's
    `WorkerBudget.readers`; none without ``overlap``): those its predecessor in this worker started
    reading already, else new ones. Once they are all read, the readers of a worker with
    `WorkerBudget.early_reads` take this worker's next task (`take_next_task`) and start on its blocks."""
    reading = _READING.get()
    with reading.lock:
        early = reading.early.pop((job.token, task.number), None)
        for key in [k for k in reading.early if k[0] != job.token]:  # another eval's, left by a failure
            del reading.early[key]
    if early is not None:
        early.adopt(stages)
        return early
    return _new_read_ahead(job, task, stages, overlap)


def _new_read_ahead(job: Job, task: Task, stages: Stages, overlap: bool, early: bool = False) -> Blocks:
    assert task.decided is not None
    block = task.decided.block
    ranges = [(s, min(task.stop, s + block)) for s in range(task.start, task.stop, block)]
    budget = budget_of(job)
    threads = budget.readers if overlap else 0
    # One worker, or one on a GPU (whose device idles while a task's first block is read): with several
    # CPU workers, a busy one taking the next task could leave another idle at the end, for little gain.
    then = functools.partial(_start_next, job) if threads and budget.early_reads else None
    return ReadAhead(functools.partial(read_samples, job, task), ranges, threads, stages, then, early)


def _start_next(job: Job) -> None:
    """On a reader thread whose task's blocks are all read: start reading this worker's next task, if it
    can be taken now and is one that reads (not the preflight, not a warm-up)."""
    task = take_next_task()
    if not isinstance(task, Task) or task.decided is None or task.preflight or task.warm:
        return
    early = _new_read_ahead(job, task, Stages(), True, early=True)
    reading = _READING.get()
    with reading.lock:
        reading.early[(job.token, task.number)] = early


def read_samples(job: Job, task: Task, start: int, stop: int) -> Iterable[tuple[int, Any]]:
    """Inputs ``start..stop`` of ``task`` as ``(index, sample_in)`` pairs (batches with batch_size), read
    now; the pairs and rows of dataset input are made as they are taken."""
    budget = budget_of(job)
    host = decode_with_helpers if budget.decode_helpers else None
    job.source.read_with(decode_device(job), host, budget.cache_bytes)
    return _read(job, budget, task, start, stop)


def _read(job: Job, budget: WorkerBudget, task: Task, start: int, stop: int) -> Iterable[tuple[int, Any]]:
    batch = job.options.batch_size
    if task.items is not None:
        items = task.items[start - task.start : stop - task.start]
        if batch:
            return [(start + b, items[b : b + batch]) for b in range(0, len(items), batch)]
        return list(zip(range(start, stop), items, strict=True))
    source = job.source
    if batch:
        # A worker placed on a GPU stacks its batches in page-locked memory (`pinned_staging`).
        staging = functools.partial(pinned_staging, kept=budget.pinned_kept) if budget.pinned else None
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
