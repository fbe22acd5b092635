"""A worker's inside in one place: the threads, helper processes and bytes per stage an eval's work uses.

Guarantee 6 says a worker's memory depends on the task size, not on the dataset's. What bounds it is a
handful of figures — reader threads and the blocks they read ahead, the outputs drained and written
behind, the buffers a task's writer flushes, the chunk cache of its input, the batches kept in pinned
memory — and until issue 43 they were constants in eight modules that nothing added up. They are the
fields of `WorkerBudget` now, each with what it bounds, and `WorkerBudget.total_bytes` is their sum:
``tests/compute/test_worker_budget.py`` runs a worker on images many times that size and holds its peak
resident memory to it.

A budget is derived once per eval in each process that runs its work (`budget_of`): from the plan (the
eval's options and input, in the `Job`) and the placement (this process's CPUs, whether it is a worker
process placed on a device). The caller derives its own too: it runs the work itself with
``num_workers=0`` or the threaded scheduler, and plans with the same figures (`stream_task_bytes`,
`speculative_batches`). Processes on other machines (Ray, the ranks of a distributed job) derive theirs
from their own CPUs, as their readers always took their share of their own machine.
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass, replace

from lakecompute.compute._job import Job
from lakecompute.compute._options import EvalOptions
from lakecompute.perprocess import PerProcess
from lakecompute.schedulers import usable_cpus
from lakecompute.storage import CACHE_BYTES

__all__ = [
    "PLACED_MAPPED_BYTES",
    "WorkerBudget",
    "budget_of",
    "budgets_here",
    "derive_budget",
    "map_large_blocks",
]

_MiB = 1 << 20
#: `WorkerBudget.mapped_bytes` of a worker placed on a device: glibc's own ceiling for its moving threshold.
PLACED_MAPPED_BYTES = 32 * _MiB
#: glibc's ``mallopt`` parameter for the size from which blocks are mapped (malloc.h).
_M_MMAP_THRESHOLD = -3


@dataclass(frozen=True, slots=True)
class WorkerBudget:
    """What one worker of an eval may use: threads, helper processes and bytes per stage (frozen: derived
    once, by `derive_budget`). A block is the unit of reading and writing inside a task: as many inputs
    as hold `block_bytes` (sized from the first input; with ``batch_size`` a whole number of batches)."""

    readers: int
    """Reader threads per task: what the input allows (none for input already in memory, one for a
    sequence whose ``__getitem__`` is the user's) and for datasets this worker's share of its machine's
    CPUs, at most `max_readers`. Each holds one block; a task's readers run at most this many blocks
    ahead of the one its function runs."""
    early_reads: bool
    """Whether the readers go on to this worker's next task once its own blocks are all read (a lone
    worker, or one placed on a GPU, whose device would idle while a task's first block is read); at
    most one task ahead."""
    placed: bool
    """Whether this is a worker process placed on a device (``devices=``): it reads for a model on a GPU,
    with helpers (`decode_helpers`), pinned batches (`pinned`) and early reads."""
    pinned: bool
    """Whether its batches are stacked in page-locked memory once its code has started CUDA (a placed
    worker), so that their copies to the device are only queued."""
    decode_helpers: int
    """Helper processes decoding this worker's images (a placed worker reading a dataset: its share of
    the CPUs less one; 0: its readers decode)."""
    output_tensors: int
    """The tensors the eval writes: each has a write buffer of `flush_bytes` in a task."""
    max_readers: int = 4
    """The most reader threads a task uses. Past four, threads of one process only queue for the GIL
    (Pillow's header parsing and the copies out of it hold it): 224x224 JPEG batches on a 16-core machine
    decoded at 1,484 images/s on 1 thread, 3,786 on 4, 3,287 on 8 and 2,496 on 16, against 11,316 for 4
    processes of 4 threads (docs/performance.md). More decoding takes more worker processes."""
    block_bytes: int = 16 * _MiB
    """Input read at once (a block), and outputs buffered before they are checked and handed to the
    writer thread (a drain): few, large reads (zarr's cost per call is ~ms) within a bounded size."""
    flush_bytes: int = 4 * _MiB
    """Checked outputs a task buffers per tensor before the writer thread stores them: small, so that
    the writer stores every drain's outputs while the function makes the next (a 16 MiB buffer was
    written in bursts the function then waited for: W1 at 0 workers 0.50 s against 0.45 s)."""
    flush_threads: int = 4
    """Threads storing a task's last buffers at its end, when it writes four tensors or more (each chunk
    is a file created and renamed: ~1 ms of waiting on the file system, little CPU)."""
    cache_bytes: int = CACHE_BYTES
    """Decoded chunks the worker's handle of its input keeps (`lakecompute.storage.ArrayCache`): enough
    that reading a tensor sample by sample decodes each chunk once."""
    pinned_kept: int = 8
    """Batches in page-locked memory kept alive after they were given out (a placed worker whose code
    started CUDA): a copy to the device queued from one is never overtaken by its reuse."""
    decode_min_sent: int = 8
    """Fewer samples than this are decoded by the reader, not sent to the helpers (a request costs a
    few hundred microseconds)."""
    decode_per_request: int = 16
    """At least this many samples go to a helper in one request: each costs the reading process, under
    its GIL, a request's pickling and a result's mapping."""
    speculative_batches: int = 1
    """Batches each worker but the preflight's runs beside the preflight with ``batch_size`` (each a
    task of its own: within `block_bytes`)."""
    stream_task_bytes: int = 8 * _MiB
    """Items of a streamed input a task carries (the caller holds them per task in flight; the worker
    for its task): a streamed task's input."""
    mapped_bytes: int = 1 * _MiB
    """In a worker process (not the caller's), allocations of at least this many bytes are mapped from
    the system and handed back when freed (glibc's ``M_MMAP_THRESHOLD``, set once: `map_large_blocks`).
    With glibc's default, which raises that threshold to the largest block freed so far, blocks
    allocated by one thread (a reader) and freed by another (the function's, the writer's) stay in
    each thread's heap: a worker copying 1 MiB images grew its peak resident memory from 98 to 224 MiB
    over 2,300 samples against this budget's 172; with the threshold fixed it stayed at 64-73 MiB
    (``tests/compute/test_worker_budget.py``). A worker placed on a device maps only blocks of
    `PLACED_MAPPED_BYTES` or more: its batches (64 224x224 images are 9.6 MB) are made by a reader thread
    while the model's thread launches kernels, and as fresh mappings each was faulted in page by page,
    which cost the model's call 1.7 ms per batch on an H200 (12.7 ms at stop 37, 14.4 ms after this
    threshold came) and 1.4-2 ms in a CPU stand-in (a worker on a declared GPU whose model holds the GIL
    for 3.8 ms: 6.5-7.3 ms per call with 1 MiB, 5.4 ms with 32 MiB)."""

    @property
    def input_blocks(self) -> int:
        """Input blocks a worker holds at most: the one its function runs, those its readers read ahead,
        and as many of its next task's with early reads."""
        return 1 + self.readers * (2 if self.early_reads else 1)

    @property
    def threads(self) -> int:
        """Threads the worker starts for an eval's work at most, besides the one running tasks: its
        readers (twice over with early reads), the writer thread, the flush's threads, the thread that
        reads the preflight's first input, and the helpers' dispatcher."""
        return (
            self.readers * (2 if self.early_reads else 1)
            + 1
            + self.flush_threads
            + 1
            + int(self.decode_helpers > 0)
        )

    @property
    def total_bytes(self) -> int:
        """The bytes a worker's work holds at most beyond what it held before its first task (its code,
        the user's model): its input blocks, each once decoded and once as read; its outputs, buffered,
        checked and being written (three drains); its write buffers; its chunk cache; its pinned batches;
        a streamed task's items."""
        input_bytes = 2 * self.input_blocks * self.block_bytes
        output_bytes = 3 * self.block_bytes + self.output_tensors * self.flush_bytes
        pinned = self.pinned_kept * self.block_bytes if self.pinned else 0
        return input_bytes + output_bytes + self.cache_bytes + pinned + self.stream_task_bytes


def derive_budget(
    options: EvalOptions, parallel_reads: int, output_tensors: int, cpus: int, placed: bool
) -> WorkerBudget:
    """The budget of a worker of an eval with ``options`` over input that allows ``parallel_reads`` reader
    threads (`lakecompute.compute._inputs.Source.parallel_reads`), writing ``output_tensors`` tensors, in a
    process with ``cpus`` CPUs, ``placed`` on a device or not."""
    base = WorkerBudget(0, False, placed, placed, 0, output_tensors)
    workers = max(1, options.num_workers)
    readers = parallel_reads
    if parallel_reads > 1:
        readers = max(1, min(parallel_reads, cpus // workers, base.max_readers))
    helpers = max(0, cpus // workers - 1) if placed and parallel_reads > 1 else 0
    early = readers > 0 and (options.num_workers == 1 or placed)
    mapped = PLACED_MAPPED_BYTES if placed else base.mapped_bytes
    return replace(base, readers=readers, early_reads=early, decode_helpers=helpers, mapped_bytes=mapped)


#: The budgets this process derived, by eval (a few: a worker that outlives its evals drops old ones).
_BUDGETS: PerProcess[dict[str, WorkerBudget]] = PerProcess(dict)


def budget_of(job: Job) -> WorkerBudget:
    """This process's budget for ``job``'s eval: derived on first use here (`derive_budget`), from the
    job's options and input, this process's CPUs, and whether it is a worker process placed on a device
    (``devices=``, in a process of its own: not the caller, not a thread)."""
    budgets = _BUDGETS.get()
    budget = budgets.get(job.token)
    if budget is None:
        options = job.options
        placed = options.devices is not None and bool(options.num_workers) and os.getpid() != job.parent_pid
        budget = derive_budget(
            options, job.source.parallel_reads, len(job.schema.names), usable_cpus(), placed
        )
        if os.getpid() != job.parent_pid:
            map_large_blocks(budget.mapped_bytes)
        while len(budgets) >= 8:
            del budgets[next(iter(budgets))]
        budgets[job.token] = budget
    return budget


#: The threshold this process set (`map_large_blocks`), if it did.
_MAPPED: PerProcess[list[int]] = PerProcess(list)


def map_large_blocks(threshold: int) -> bool:
    """Have this process's allocator map blocks of at least ``threshold`` bytes from the system and hand
    them back when freed (glibc's ``mallopt(M_MMAP_THRESHOLD)``), once per process. Returns whether the
    allocator took it (False where the C library is not glibc: nothing changes there)."""
    mapped = _MAPPED.get()
    if mapped:
        return mapped[0] == threshold
    mapped.append(-1)
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    if libc.mallopt(_M_MMAP_THRESHOLD, threshold) != 1:  # glibc's mallopt returns 1 on success
        return False
    mapped[0] = threshold
    return True


def budgets_here() -> list[WorkerBudget]:
    """The budgets this process derived, oldest first (for tests: what a worker ran with)."""
    return list(_BUDGETS.get().values())
