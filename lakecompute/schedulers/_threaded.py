"""The threaded scheduler: tasks run in a pool of threads of the calling process.

Good for work that releases the GIL (numpy, Pillow, zarr I/O). Nothing is pickled: tasks, results and
exceptions are passed as they are.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Generator, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar, Generic, TypeVar, cast

from lakecompute.errors import InvalidArgumentError
from lakecompute.schedulers._base import (
    ProgressFn,
    Scheduler,
    TaskFn,
    _set_thread_worker_id,
)

__all__ = ["ThreadedScheduler"]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

# Worker threads are named with this prefix so that tests (and people reading a stack dump) can find them.
THREAD_NAME_PREFIX = "lakecompute-worker"


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


class ThreadedScheduler(Scheduler):
    """Runs tasks in ``num_workers`` threads of the calling process.

    Threads cannot be killed, so cancelling (after a failure, or when the consumer stops early) works
    like this: tasks not started yet never start, and a running task is stopped at its next
    ``progress()`` call (which raises an internal BaseException). `run` waits for running tasks to
    stop before it returns or raises, so no task of a run is still running afterwards.
    """

    name: ClassVar[str] = "threaded"

    def __init__(self, num_workers: int = 1) -> None:
        """Create the scheduler.

        Args:
            num_workers: the number of threads, at least 1.

        Raises:
            InvalidArgumentError: if ``num_workers`` is less than 1.
        """
        super().__init__(num_workers)
        if self.num_workers < 1:
            raise InvalidArgumentError(
                f"Expected num_workers >= 1 for the threaded scheduler. Got {num_workers!r}. "
                "Use get_scheduler('threaded', 0) or SerialScheduler() to run in the calling thread."
            )

    def _run(
        self,
        fn: TaskFn[TaskT, ResultT],
        tasks: Iterable[TaskT],
        on_progress: ProgressFn | None,
        limit: int,
    ) -> Generator[tuple[int, ResultT], None, None]:
        """The generator behind `run`."""
        # Workers never call on_progress themselves: they post events here, and the iterating thread
        # delivers them, so on_progress runs in one thread and never concurrently.
        events: queue.SimpleQueue[_Event[ResultT]] = queue.SimpleQueue()
        cancelled = threading.Event()

        def progress(increment: int) -> None:
            if cancelled.is_set():
                raise _Cancelled
            events.put(_Event(increment=increment))

        def call(position: int, task: TaskT) -> None:
            # Checked here as well as by cancel_futures: a task the executor already handed to a thread
            # just before the cancel must not start either.
            if cancelled.is_set():
                return
            try:
                value = fn(task, progress)
            except _Cancelled:
                return
            except BaseException as exc:
                events.put(_Event(position=position, error=exc))
                return
            events.put(_Event(position=position, value=value))

        ids = itertools.count()
        ids_lock = threading.Lock()

        def init_thread() -> None:
            with ids_lock:
                _set_thread_worker_id(next(ids))

        executor = ThreadPoolExecutor(
            self.num_workers, thread_name_prefix=THREAD_NAME_PREFIX, initializer=init_thread
        )
        iterator = iter(tasks)
        positions = itertools.count()
        outstanding = 0
        exhausted = False
        try:
            while True:
                # Pull tasks lazily: never more than `limit` outstanding, so a streamed input stays bounded.
                while not exhausted and outstanding < limit:
                    try:
                        task = next(iterator)
                    except StopIteration:
                        exhausted = True
                        break
                    executor.submit(call, next(positions), task)
                    outstanding += 1
                if outstanding == 0:
                    return
                event = events.get()
                if event.position < 0:
                    if on_progress is not None:
                        on_progress(event.increment)
                    continue
                outstanding -= 1
                if event.error is not None:
                    raise event.error
                yield event.position, cast(ResultT, event.value)
        finally:
            # Reached on success, on a task's failure, and when the consumer closes the generator. Stop
            # queued tasks from starting, make running ones stop at their next progress() call, and wait
            # for them so that nothing of this run is still running once run() is over.
            cancelled.set()
            # Nothing is left to deliver after a successful run: a thread posts its progress events
            # before its completion event, and the queue keeps that order.
            executor.shutdown(wait=True, cancel_futures=True)
