"""The threaded scheduler: tasks run in a pool of threads of the calling process.

Good for work that releases the GIL (numpy, Pillow, zarr I/O). Nothing is pickled: tasks, results and
exceptions are passed as they are.

Threads cannot be killed, which shapes how a run stops:

- Worker threads are daemon threads started by each run (not a ``ThreadPoolExecutor``, whose threads
  the interpreter waits for at exit): a thread stuck in user code can never keep the process alive.
- Cancelling (a task failed, the consumer stopped, Ctrl-C) stops queued tasks from starting and makes
  running ones raise an internal ``BaseException`` at their next ``progress()`` call, including
  ``progress(0)``, the per-sample cancellation point.
- The run then waits up to `STOP_GRACE` seconds for running tasks to stop. A task still running
  after that (blocked in user code that never calls ``progress``) is abandoned: its thread goes on in
  the background until the task returns or reaches a cancellation point, its result is dropped, and a
  `lakecompute.errors.LakeComputeWarning` says how many threads were left behind.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import warnings
from collections.abc import Generator, Iterator
from typing import ClassVar, Generic, TypeVar, cast

from lakecompute.errors import InvalidArgumentError, LakeComputeWarning
from lakecompute.parsing import DevicesLike, parse_devices
from lakecompute.schedulers._base import (
    PAUSE,
    Job,
    PlacedScheduler,
    ProgressFn,
    Results,
    TaskFn,
    _set_thread_device,
    _set_thread_worker_id,
    call_task,
    pause_error,
)
from lakecompute.schedulers._devices import Placement, place_workers
from lakecompute.threads import PREFIX, start_thread

__all__ = ["STOP_GRACE", "ThreadedScheduler"]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

# Worker threads are named with this prefix so that tests (and people reading a stack dump) can find them.
THREAD_NAME_PREFIX = PREFIX + "worker"

STOP_GRACE = 1.0
"""Seconds running tasks get to reach a cancellation point once a run is cancelled, before their threads
are abandoned."""


class _Cancelled(BaseException):
    """Raised inside a task by ``progress()`` once the run is cancelled, to stop the task early.

    A BaseException so that a task's ``except Exception`` does not swallow it.
    """


class _Event(Generic[ResultT]):
    """A message from a worker thread to the thread iterating the run."""

    __slots__ = ("error", "increment", "position", "value")

    def __init__(
        self,
        position: int = -1,
        value: ResultT | None = None,
        error: BaseException | None = None,
        increment: int = 0,
    ) -> None:
        self.position = position
        """The task's position; -1 for a progress event."""
        self.value = value
        """The task's result (completion events)."""
        self.error = error
        """The exception the task raised (failure events)."""
        self.increment = increment
        """The progress increment (progress events)."""


class ThreadedScheduler(PlacedScheduler):
    """Runs tasks in ``num_workers`` daemon threads of the calling process.

    A run that ends (success, failure, the consumer stopping, Ctrl-C) returns within about
    `STOP_GRACE` seconds even if a task is stuck; see the module documentation for how.

    With ``devices``, thread ``k`` is told device ``k % len(devices)`` (`worker_device`, as
    ``"cuda:<n>"`` in this process's numbering: the threads share the process's CUDA).
    """

    name: ClassVar[str] = "threaded"
    shares_memory: ClassVar[bool] = True

    def __init__(self, num_workers: int = 1, devices: DevicesLike = None) -> None:
        """Create the scheduler.

        Args:
            num_workers: the number of threads, at least 1.
            devices: ``"cuda"`` or GPU indices to place the threads on, round robin; None for none.

        Raises:
            InvalidArgumentError: if ``num_workers`` is less than 1, or ``devices`` names no GPU this
                process sees.
        """
        super().__init__(num_workers)
        if self.num_workers < 1:
            raise InvalidArgumentError(
                f"Expected num_workers >= 1 for the threaded scheduler. Got {num_workers!r}. "
                "Use get_scheduler('threaded', 0) or SerialScheduler() to run in the calling thread."
            )
        self._placement = place_workers(parse_devices("devices", devices))

    def _run(self, job: Job[TaskT, ResultT]) -> Results[ResultT]:
        """The generator behind `run`."""
        return _ThreadedRun(job.fn, self.num_workers, job.on_progress, self._placement).results(
            job.tasks, job.limit
        )


class _ThreadedRun(Generic[TaskT, ResultT]):
    """The threads and queues of one run."""

    def __init__(
        self,
        fn: TaskFn[TaskT, ResultT],
        num_workers: int,
        on_progress: ProgressFn | None,
        placement: Placement | None = None,
    ) -> None:
        self._fn = fn
        self._placement = placement
        self._num_workers = num_workers
        self._on_progress = on_progress
        self._todo: queue.SimpleQueue[tuple[int, TaskT] | None] = queue.SimpleQueue()
        # Workers never call on_progress themselves: they post events here, and the iterating thread
        # delivers them, so on_progress runs in one thread and never concurrently.
        self._events: queue.SimpleQueue[_Event[ResultT]] = queue.SimpleQueue()
        # A plain attribute rather than a threading.Event: progress(0) reads it once per sample, and an
        # attribute read is several times cheaper than Event.is_set(). Writes are atomic under the GIL.
        self._cancelled = False
        self._threads: list[threading.Thread] = []
        # The threads inside a task right now, to tell a stuck thread from one about to exit.
        self._busy: set[threading.Thread] = set()

    def progress(self, increment: int) -> None:
        """The ``progress`` function tasks get: a cancellation point, then the increment, if any."""
        if self._cancelled:
            raise _Cancelled
        if increment:
            self._events.put(_Event(increment=increment))

    def results(self, tasks: Iterator[TaskT], limit: int) -> Generator[tuple[int, ResultT], None, None]:
        """Feed the tasks to the threads and yield ``(position, result)`` as they complete."""
        # Look at the first task before starting threads: an empty input costs nothing.
        try:
            first = next(tasks)
        except StopIteration:
            return
        pending = itertools.chain([first], tasks)
        positions = itertools.count()
        outstanding = 0
        exhausted = False
        try:
            self._start_threads()
            while True:
                # Pull tasks lazily: never more than `limit` outstanding, so a streamed input stays bounded.
                while not exhausted and outstanding < limit:
                    task = next(pending, _END)
                    if task is _END:
                        exhausted = True
                        break
                    if task is PAUSE:  # no more until the next result is taken (the loop comes back here)
                        if not outstanding:
                            raise pause_error()
                        break
                    self._todo.put((next(positions), cast(TaskT, task)))
                    outstanding += 1
                if outstanding == 0:
                    return
                event = self._next_completion()
                outstanding -= 1
                if event.error is not None:
                    raise event.error
                yield event.position, cast(ResultT, event.value)
        finally:
            # Reached on success, on a task's failure, when the consumer closes the generator, and on
            # KeyboardInterrupt (which interrupts the wait for events).
            self._stop()

    def _next_completion(self) -> _Event[ResultT]:
        """Deliver progress events until a task completes; return its event."""
        while True:
            event = self._events.get()
            if event.position >= 0:
                return event
            if self._on_progress is not None:
                self._on_progress(event.increment)

    def _start_threads(self) -> None:
        for worker in range(self._num_workers):
            # Daemon: a thread stuck in user code must never keep the interpreter from exiting.
            self._threads.append(start_thread(f"worker-{worker}", self._work, worker))

    def _work(self, worker: int) -> None:
        """The body of a worker thread: run tasks until told to stop."""
        _set_thread_worker_id(worker)
        if self._placement is not None:
            _set_thread_device(self._placement.in_caller(worker))
        me = threading.current_thread()
        while True:
            item = self._todo.get()
            # Checked here as well: a task queued before the cancel must not start after it.
            if item is None or self._cancelled:
                return
            position, task = item
            self._busy.add(me)
            try:
                value = call_task(self._fn, task, self.progress)
            except _Cancelled:
                return
            except BaseException as exc:
                self._events.put(_Event(position=position, error=exc))
                continue
            finally:
                self._busy.discard(me)
            self._events.put(_Event(position=position, value=value))

    def _stop(self) -> None:
        """Cancel what is left, wait a little for running tasks, abandon the ones that do not stop."""
        self._cancelled = True
        for _ in self._threads:
            self._todo.put(None)
        # A thread posts its progress events before its completion event and the queue keeps that order,
        # so after a successful run nothing is left to deliver.
        deadline = time.monotonic() + STOP_GRACE
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [thread for thread in self._threads if thread.is_alive() and thread in self._busy]
        for thread in self._threads:
            if thread not in stuck:
                # Idle (or just finishing): it exits at the None it was given, so this wait is short.
                thread.join()
        if stuck:
            warnings.warn(
                LakeComputeWarning(
                    f"{len(stuck)} worker thread(s) of the threaded scheduler were still running a task "
                    f"{STOP_GRACE:g} s after the run was cancelled, and are left running in the background "
                    "as daemon threads (they end with the process; their results are dropped). The task is "
                    "blocked in code that never calls progress(); a worker process (scheduler='processed') "
                    "can be stopped from outside."
                ),
                stacklevel=3,
            )


# Marks the end of the task iterator (a task may itself be None).
_END = object()
