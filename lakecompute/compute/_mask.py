"""Which rows a function keeps (``ds.filter(fn)``): computed in parallel, kept in memory.

The function runs as an eval's would — in tasks on a scheduler (``num_workers``, ``scheduler``), each
reading its own range of rows from the committed version, with a progress bar, and a `TransformError`
naming the first row that failed — but what it gives is one bit per row, and that travels back in the
task's result. Nothing is written anywhere: no scratch dataset in the driver's temp folder (which the
nodes of a Ray cluster could not reach), nothing for a failure or a kill to leave behind.
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from lakecompute.compute._budget import derive_budget
from lakecompute.compute._inputs import DatasetSource
from lakecompute.compute._options import EvalOptions
from lakecompute.compute._plan import block_size, checked_scheduler, plan_ranges, task_size
from lakecompute.compute._runner import failure_error
from lakecompute.datasets import Dataset, DatasetView
from lakecompute.errors import TransformError
from lakecompute.schedulers import ProgressFn, get_scheduler, portable_exception, usable_cpus

__all__ = ["filter_mask"]


@dataclass(frozen=True, slots=True)
class _MaskJob:
    """What every mask task shares: the function, the rows, the block size, the calling process."""

    fn: Callable[[Any], Any]
    name: str
    source: DatasetSource
    block: int
    parent_pid: int


@dataclass(frozen=True, slots=True)
class _MaskTask:
    number: int
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class _MaskResult:
    """A task's bits (``np.packbits`` of its rows' keep flags), or the row it failed on."""

    number: int
    start: int
    stop: int
    bits: bytes = b""
    failed_at: int | None = None
    exc: BaseException | None = None
    traceback: str = ""


def _mask_task(job: _MaskJob, task: _MaskTask, progress: ProgressFn) -> _MaskResult:
    """Run the function on the task's rows, a block at a time; stop at the first row that raises."""
    keep = np.zeros(task.stop - task.start, dtype=bool)
    for start in range(task.start, task.stop, job.block):
        stop = min(task.stop, start + job.block)
        for index, row in enumerate(job.source.read_samples(start, stop, batch=False), start=start):
            try:
                keep[index - task.start] = bool(job.fn(row))
            except Exception as exc:
                text = "".join(traceback.format_exception(exc))
                portable = exc if os.getpid() == job.parent_pid else portable_exception(exc, text)
                return _MaskResult(task.number, task.start, task.stop, failed_at=index, exc=portable,
                                   traceback=text)  # fmt: skip
            progress(0)  # a cancellation point: a failed or stopped run ends this task here
        progress(stop - start)
    return _MaskResult(task.number, task.start, task.stop, np.packbits(keep).tobytes())


def filter_mask(data: Dataset | DatasetView, fn: Callable[[Any], Any], options: dict[str, Any]) -> np.ndarray:
    """``bool(fn(row))`` for every row of ``data`` (over the rows every tensor holds), in order.

    Args:
        data: the dataset or view (committed; a view reads its dataset's version).
        fn: called with each row; true keeps it. Must pickle for worker processes.
        options: ``num_workers``, ``scheduler``, ``progressbar``, checked as `eval`'s.

    Raises:
        TransformError: ``fn`` raised on a row (``.index`` in ``data``, ``.sample``, ``__cause__``): the
            first such row, whatever the scheduler.
    """
    opts = EvalOptions.parse(options)
    source = DatasetSource(data[: len(data)], pad=False)
    n = source.length or 0
    if not n:
        return np.zeros(0, dtype=bool)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    sched = checked_scheduler(get_scheduler(opts.scheduler, opts.num_workers), reads=[source.snap.url])
    budget = derive_budget(opts, source.parallel_reads, 0, usable_cpus(), placed=False)
    job = _MaskJob(fn, name, source, block_size(source.sample(0), None, budget.block_bytes), os.getpid())
    ranges = plan_ranges(n, task_size(n, opts.num_workers, 0, None), opts.num_workers, 0, None)
    return _MaskRun(job, ranges).run(sched, _progress_bar(opts, name, n))


class _MaskRun:
    """The caller's side: tasks in order, bits placed as they come, the first failure found."""

    def __init__(self, job: _MaskJob, ranges: list[tuple[int, int]]) -> None:
        self.job = job
        self.tasks = [_MaskTask(k, a, b) for k, (a, b) in enumerate(ranges)]
        self.keep = np.zeros(ranges[-1][1], dtype=bool)
        self.received: set[int] = set()
        self.failure: _MaskResult | None = None
        self.started = 0

    def _tasks(self) -> Iterator[_MaskTask]:
        for task in self.tasks:
            if self.failure is not None:
                return  # after a failure, no new task starts
            self.started += 1
            yield task

    def settled(self) -> bool:
        """After a failure: every task before the failing row has reported (so it is the first)."""
        failure = self.failure
        assert failure is not None
        assert failure.failed_at is not None
        started = self.tasks[: self.started]
        return all(t.start >= failure.failed_at or t.number in self.received for t in started)

    def receive(self, result: _MaskResult) -> None:
        """Place a task's bits, or remember its failure if it is the earliest so far."""
        self.received.add(result.number)
        if result.failed_at is None:
            bits = np.unpackbits(np.frombuffer(result.bits, np.uint8), count=result.stop - result.start)
            self.keep[result.start : result.stop] = bits.astype(bool)
        elif self.failure is None or result.failed_at < (self.failure.failed_at or 0):
            self.failure = result

    def run(self, sched: Any, bar: Any) -> np.ndarray:
        runner = sched.run(functools.partial(_mask_task, self.job), self._tasks(),
                           on_progress=bar.update if bar is not None else None)  # fmt: skip
        try:
            for _position, result in runner:
                self.received.add(result.number)
                if result.failed_at is not None:
                    if self.failure is None or result.failed_at < (self.failure.failed_at or 0):
                        self.failure = result
                else:
                    bits = np.unpackbits(
                        np.frombuffer(result.bits, np.uint8), count=result.stop - result.start
                    )
                    self.keep[result.start : result.stop] = bits.astype(bool)
                if self.failure is not None and self.settled():
                    break  # cancel the rest
        finally:
            runner.close()
            if bar is not None:
                bar.close()
        if self.failure is not None:
            raise self._error(self.failure)
        return self.keep

    def _error(self, failure: _MaskResult) -> TransformError:
        assert failure.failed_at is not None
        assert failure.exc is not None
        try:
            sample = self.job.source.sample(failure.failed_at)
        except Exception:
            sample = None  # the error itself matters more than a sample we cannot re-read
        row = self.job.source.row_of(failure.failed_at)
        err = failure_error(self.job.name, failure.failed_at, failure.exc, sample, 0, sample, row)
        err.remote_traceback = failure.traceback  # type: ignore[attr-defined]  # the full traceback
        return err


def _progress_bar(opts: EvalOptions, name: str, total: int) -> Any:
    if not opts.progressbar:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"filter {name}", unit="sample", dynamic_ncols=True)
