"""One loader run: a source, an index plan and a transform, read in this process or in workers.

With ``num_workers=n``, the batches are read by the processed scheduler's worker processes (the pool
that runs evals), one task per step: any worker may read any step (`IndexPlan` makes a step's
content independent of who reads it), and the results are put back in step order here. The pool
gives loaders what it gives evals: workers that die with their parent, take what they started with
them, never run the user's ``__main__`` again, report a death as `WorkerDiedError` naming the step,
and send errors back as themselves.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import uuid
import weakref
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

import numpy as np

from lakecompute.loaders._options import LoaderOptions
from lakecompute.loaders._plan import IndexPlan
from lakecompute.loaders._sources import RowSource, TokenSource
from lakecompute.loaders._state import LoaderCursor
from lakecompute.loaders._transform import BatchTransform
from lakecompute.schedulers import (
    PAUSE,
    InOrder,
    PickledError,
    ProcessedScheduler,
    ProgressFn,
    Scheduler,
    pickle_exception,
    rebuild_exception,
)
from lakecompute.sharedmem import SharedBatch, remove_leftovers, share_batch

__all__ = [
    "Batches",
    "LoaderSpec",
    "LoaderStep",
    "StepReader",
    "WorkerFailure",
    "int64_labels",
    "parallel_batches",
    "worker_batches",
]


def int64_labels(batch: dict[str, Any], labels: tuple[str, ...]) -> dict[str, Any]:
    """``batch`` with its class labels as int64 (what losses and metrics take; they are stored as uint32):
    a stacked array, or the list of per-object arrays of a ragged tensor (a detection image's labels)."""
    for name in labels:
        values = batch.get(name)
        if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
            batch[name] = values.astype(np.int64)
        elif isinstance(values, list) and all(
            isinstance(v, np.ndarray) and v.dtype.kind in "iu" for v in values
        ):
            batch[name] = [v.astype(np.int64) for v in values]
    return batch


@dataclass(frozen=True, slots=True)
class LoaderSpec:
    """Everything a loader worker needs, fixed before it starts (small and picklable).

    Attributes:
        source: what is read (rows of a dataset, or token blocks).
        plan: which steps this run yields and which samples each reads.
        transform: applied to each batch after reading (see `lakecompute.loaders._transform`).
    """

    source: RowSource | TokenSource
    plan: IndexPlan
    transform: Any = None


@dataclass(frozen=True, slots=True)
class LoaderStep:
    """One step of a loader run, as a task for a worker process.

    Attributes:
        step: the step (batch) of the epoch, ``0 <= step < plan.steps``.
    """

    step: int

    def describe(self) -> str:
        """Name the step in error messages (a worker that died while reading it)."""
        return f"loader step {self.step} (one batch)"


@dataclass(frozen=True, slots=True)
class WorkerFailure:
    """An exception raised while reading a step in a worker, travelling to the consumer as the step's
    item (through the schedulers' exception transport, causes included) and raised there as itself.

    Attributes:
        error: the exception, as the transport carries it.
    """

    error: PickledError

    def exception(self) -> BaseException:
        """The exception, rebuilt here: its own type, ``.index`` and the like, and the worker's traceback."""
        return rebuild_exception(self.error)


class StepReader:
    """Reads the batch of a step, in the process it is called in (a worker, or the caller).

    The source is opened, the epoch's order computed and the transform's runner built once, at the
    first step, and kept for the steps after: per worker, not per batch.

    Attributes:
        spec: what is read, and how.
    """

    def __init__(self, spec: LoaderSpec, opened: Any = None, share: str | None = None) -> None:
        self.spec = spec
        self._opened = opened
        self._share = share  # a run token: hand batches over through shared memory (see _shared)
        self._state: tuple[Any, BatchTransform, np.ndarray | None] | None = None

    def read_step(self, step: int, rank: int | None = None) -> dict[str, Any]:
        """The batch of step ``step``, transformed: of the plan's rank, or of rank ``rank`` (the same epoch
        and options; Accelerate has one process read, or iterate past, every rank's batches)."""
        if self._state is None:
            plan = self.spec.plan
            opened = self._opened if self._opened is not None else self.spec.source.open()
            self._state = (
                opened,
                BatchTransform(self.spec.transform, plan.seed, plan.epoch, getattr(opened, "meta", ())),
                plan.order(),
            )
        reader, apply, order = self._state
        plan = self.spec.plan
        if rank is not None and rank != plan.rank:
            plan = replace(plan, rank=rank)
        span = plan.step_span(step)
        if span is not None:  # one run: read as a slice, no positions made or checked
            return apply(reader.read_span(*span), np.arange(*span))
        indices = plan.step_indices(step, order)
        return apply(reader.read_batch(indices), indices)

    def __call__(
        self, task: LoaderStep, progress: ProgressFn
    ) -> dict[str, Any] | SharedBatch | WorkerFailure:
        """The scheduler's task function: the batch of one step, or why reading it failed.

        A failure is returned rather than raised, so that it reaches the consumer at its step, after
        the batches before it (the scheduler would raise it as soon as it arrived).
        """
        try:
            batch = self.read_step(task.step)
        except Exception as exc:
            return WorkerFailure(pickle_exception(exc))
        return batch if self._share is None else share_batch(batch, self._share)


def worker_batches(spec: LoaderSpec, worker: int, opened: Any = None) -> Iterator[dict[str, Any]]:
    """The batches of the steps loader worker ``worker`` reads (`IndexPlan.worker_steps`), in order.

    Samples of steps other workers own, or of steps before ``start_from_step``, are never read.
    ``opened``: the source opened already (``spec.source.open()``), whose decoded chunks an earlier pass
    left in its cache.
    """
    reader = StepReader(spec, opened)
    for step in spec.plan.worker_steps(worker):
        yield reader.read_step(step)


def _scheduler(spec: LoaderSpec, num_workers: int) -> Scheduler:
    """The processed scheduler, whose workers are not forked when the store's clients would not survive it."""
    scheduler: Scheduler = ProcessedScheduler(num_workers)
    if scheduler.needs_fork_safe_storage and not spec.source.snapshot.fork_safe:
        scheduler = scheduler.without_fork()
    return scheduler


class _Window:
    """The steps handed to the scheduler, never more than ``window`` ahead of those the consumer took.

    A step's batch counts from when its task is handed to the scheduler until the consumer takes the
    batch: being read, read and waiting in a pipe, or read out of order and waiting here. So at most
    ``window`` batches exist besides the one the consumer holds, whatever the dataset's size.
    """

    def __init__(self, steps: range, window: int) -> None:
        self.steps = steps
        self.window = window
        self.taken = 0
        """Batches the consumer has taken."""

    def tasks(self) -> Iterator[Any]:
        """The tasks, in step order, with `PAUSE` while the window is full."""
        for submitted, step in enumerate(self.steps):
            # The scheduler asks for a task just before it hands over a result, when the batch it is
            # about to hand over is not in `taken` yet: pausing only past `window` leaves `window`
            # batches read ahead once it is (and max_in_flight is window + 1 to let them run).
            while submitted - self.taken > self.window:
                yield PAUSE
            yield LoaderStep(step)


_Run = Generator[dict[str, Any], None, None]
# The worker runs not closed yet: closed at exit (`_close_live`), while the interpreter is still whole.
_live: weakref.WeakSet[_Run] = weakref.WeakSet()


def parallel_batches(spec: LoaderSpec, prefetch: int) -> _Run:
    """The run's batches in step order, read by ``num_workers`` processes of the processed scheduler.

    At most ``num_workers * prefetch`` batches are read ahead of the one the consumer holds. Closing
    the generator stops the workers and removes the batches read ahead; one left open is closed when
    collected, or at the interpreter's exit.
    """
    run = _parallel_batches(spec, prefetch)
    _live.add(run)
    return run


@atexit.register
def _close_live() -> None:
    """Close the runs still open at exit (a loader left mid-pass in a global): stop their workers and
    remove their batches' files now, before the interpreter takes modules apart, where a generator
    collected later would find their globals gone."""
    for run in list(_live):
        with contextlib.suppress(ValueError):  # running in another thread: it cannot be closed from here
            run.close()


def _parallel_batches(spec: LoaderSpec, prefetch: int) -> _Run:
    """`parallel_batches`' generator."""
    steps = range(spec.plan.start_from_step, spec.plan.steps)
    # No more workers than steps: the others would have nothing to read.
    workers = min(spec.plan.num_workers, len(steps))
    if workers == 0:
        return
    window = _Window(steps, workers * prefetch)
    # A PAUSE needs a task outstanding to end it. One always is: the scheduler asks for tasks either
    # with at least window + 1 - 1 >= 1 still running, or when this loop wants a step not read yet.
    # Batches come back through shared memory (files named with this run's token; see _shared).
    token = uuid.uuid4().hex
    reader = StepReader(spec, share=token)
    results = _scheduler(spec, workers).run(reader, window.tasks(), max_in_flight=window.window + 1)
    order = InOrder[dict[str, Any] | SharedBatch | WorkerFailure]()
    # Held here, not looked up at the end: a run collected at teardown finds this module's globals gone.
    leftovers = functools.partial(remove_leftovers, token)
    try:
        # Taking every result lets the scheduler end the run (its workers exit on their own).
        with contextlib.closing(results):
            for done, result in results:
                for batch in order.put(done, result):
                    window.taken += 1
                    if isinstance(batch, WorkerFailure):
                        raise batch.exception()
                    yield batch.open() if isinstance(batch, SharedBatch) else batch
    finally:
        leftovers()  # batches read ahead and never taken, or a worker that died mid-batch


class Batches(Iterator[dict[str, Any]]):
    """A loader of numpy batches: ``ds.batches()``. Each pass over it is an epoch.

    Iterating it runs a pass (``for batch in loader``, or ``next(loader)``); when the pass is exhausted
    the next one starts the following epoch, with its own order (see `LoaderCursor` for the rules:
    ``set_epoch``, ``start_from_step``, ``state_dict``/``load_state_dict``). ``len()`` is the batches of
    a full epoch. With workers, they start at a pass's first batch and stop when it is exhausted,
    closed (`close`, or leaving a ``with`` block), garbage-collected or left open at exit.

    Attributes:
        cursor: where the loader is (epoch, step) and what it reads.
        prefetch: batches each worker may read ahead of the consumer.
        labels: the class_label tensors, whose values arrive as int64.
    """

    def __init__(
        self, source: RowSource | TokenSource, options: LoaderOptions, labels: tuple[str, ...] = ()
    ) -> None:
        self.cursor = LoaderCursor(source, options)
        self.prefetch = options.prefetch
        self.labels = labels
        self._it: Iterator[dict[str, Any]] | None = None
        # Read in this process, the passes share one opened source: the chunks one epoch decoded (within
        # the loader's cache budget) are there for the next.
        self._opened: Any = None

    @property
    def plan(self) -> IndexPlan:
        """The index plan of the pass the next batch belongs to."""
        return self.cursor.plan(self.cursor.position)

    @property
    def num_workers(self) -> int:
        """Loader worker processes (0: read in this process)."""
        return self.cursor.options.num_workers

    def __len__(self) -> int:
        return self.cursor.steps

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._it is None:
            spec = LoaderSpec(self.cursor.source, self.cursor.begin(), self.cursor.options.transform)
            if self.num_workers:
                self._it = parallel_batches(spec, self.prefetch)
            else:
                if self._opened is None:
                    self._opened = spec.source.open()
                self._it = worker_batches(spec, 0, self._opened)
        try:
            batch = next(self._it)
        except StopIteration:
            self._finish()
            raise
        self.cursor.advance()
        return int64_labels(batch, self.labels)

    def _finish(self) -> None:
        self._it = None
        self.cursor.end()

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (its own order and transform draws), from step 0."""
        self.cursor.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is, as plain JSON: ``epoch`` and ``step`` of the next batch, the plan's
        options (``batch_size``, ``shuffle``, ``seed``, ``drop_last``, ``world_size``, ``num_workers``),
        ``rank`` and the dataset (location, version, length, what is read)."""
        return self.cursor.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` (from `state_dict`) says: the next pass yields exactly the batches
        the saved loader had left, finding them in O(1) (skipped samples are never read); the pass
        after it is the following epoch. A pass in progress is closed.

        Raises:
            InvalidArgumentError: the state was saved with other options or another dataset version.
            InvalidTypeError: ``state`` is not a loader state.
        """
        self.cursor.load_state_dict(state)
        self.close()

    def close(self) -> None:
        """Stop the workers (if any) and end the current pass; the next one starts the following epoch."""
        if self._it is not None and hasattr(self._it, "close"):
            self._it.close()
        self._finish()

    def __enter__(self) -> Batches:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        p = self.plan
        return (
            f"Batches({len(self)} batches of {p.batch_size}, rank {p.rank}/{p.world_size}, "
            f"epoch {p.epoch}, from step {p.start_from_step}, num_workers={self.num_workers})"
        )
