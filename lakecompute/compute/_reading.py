"""What a worker reads for a task, and how: its reader threads, its decoding helpers, its batches.

A worker placed on a device (`placed`) reads for a model on a GPU: it decodes its images in helper
processes (`start_decoding_helpers`) and stacks its batches in page-locked memory
(`lakecompute.schedulers.pinned_staging`), so that the thread running the model keeps its GIL and its
host-to-device copies are only queued.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

from lakecompute.compute._job import Job, Task
from lakecompute.htypes import decode_in_processes
from lakecompute.schedulers import pinned_staging, usable_cpus

__all__ = ["placed", "read_samples", "readers", "start_decoding_helpers"]

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
