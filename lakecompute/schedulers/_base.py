"""The scheduler interface shared by every backend, and small helpers they all use."""

from __future__ import annotations

import abc
import copy
import dataclasses
import itertools
import os
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from types import TracebackType
from typing import Any, ClassVar, Generic, TypeAlias, TypeVar

from lakecompute.errors import ForkInTaskError, InvalidArgumentError
from lakecompute.parsing import parse_count
from lakecompute.schedulers._devices import Placement

__all__ = [
    "PAUSE",
    "Job",
    "PlacedScheduler",
    "ProgressFn",
    "Results",
    "Scheduler",
    "TaskFn",
    "call_task",
    "describe_task",
    "parse_max_in_flight",
    "parse_num_workers",
    "take_next_task",
    "usable_cpus",
    "worker_device",
    "worker_id",
]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

ProgressFn = Callable[[int], None]
"""What a task calls to report progress: ``progress(n)`` adds ``n`` (e.g. samples done) to the total.

``progress(0)`` reports nothing and is a *cancellation point*: call it once per unit of work (per
sample). Every built-in scheduler makes it cost well under a microsecond. Once the run is cancelled
(another task failed, the consumer stopped, Ctrl-C), it raises an exception derived from
``BaseException`` (so ``except Exception`` in the task does not swallow it) where the task cannot be
killed from outside (threads); let it propagate. Elsewhere it does nothing: workers in other processes
are stopped from outside.
"""

TaskFn = Callable[[TaskT, ProgressFn], ResultT]
"""A task function: ``fn(task, progress) -> result``."""

Results: TypeAlias = Generator[tuple[int, ResultT], None, None]
"""What a run yields: ``(position, result)`` pairs in completion order."""


@dataclasses.dataclass(frozen=True)
class Job(Generic[TaskT, ResultT]):
    """One call of `Scheduler.run` with its arguments checked: what a backend's `_run` is handed."""

    fn: TaskFn[TaskT, ResultT]
    """The task function, called as ``fn(task, progress)``."""
    tasks: Iterator[TaskT]
    """The tasks, in order (taken once)."""
    on_progress: ProgressFn | None
    """Called in the consuming thread with the increments the tasks report; None: nobody listens."""
    limit: int
    """Most tasks outstanding at once (``max_in_flight`` resolved)."""

    def nonempty_tasks(self) -> Iterator[TaskT] | None:
        """The tasks, or None when there are none: the first is looked at (and put back) so that a
        backend can refuse to start workers for an empty input, which then costs nothing."""
        try:
            first = next(self.tasks)
        except StopIteration:
            return None
        return itertools.chain([first], self.tasks)


class _Pause:
    """The type of `PAUSE` (one instance)."""

    def __repr__(self) -> str:
        return "PAUSE"


PAUSE = _Pause()
"""What a task iterable yields to say "no task until you have taken another result".

The scheduler stops taking tasks from the iterable until it has yielded its next result, then asks
again. The transform engine uses it to run a first task alone (its result decides how the others are
built) without stopping the workers in between, so per-worker state — a model loaded once per worker —
is built once. A pause is only allowed while a task is outstanding: with nothing running it would never
end, and is an `InvalidArgumentError`.
"""


def pause_error() -> InvalidArgumentError:
    """The error for a `PAUSE` yielded while no task is outstanding."""
    return InvalidArgumentError(
        "The tasks paused (yielded PAUSE) while no task was outstanding, so no result could ever end the "
        "pause. Yield PAUSE only while an earlier task is still running."
    )


# Longest task description put into an error message; a repr() of a big task would drown the message.
_MAX_DESCRIPTION = 300


class Scheduler(abc.ABC):
    """Runs a function over tasks and yields results as they complete.

    A scheduler knows nothing of datasets: it only calls ``fn(task, progress)`` for every task, somewhere
    (in the caller, in threads, in processes), and hands back the results.

    Subclasses implement `_run` (the generator behind `run`). They may override
    `close` to release resources kept across runs (the built-in schedulers keep none: each
    `run` starts and stops its own workers). A backend:

    - calls each task through `call_task`, where the task runs (a child forked by the task
      never runs the backend's code);
    - makes ``progress(0)`` cheap (well under a microsecond) and, if it cannot stop a running task
      from outside, a cancellation point (see `ProgressFn`);
    - never hangs on a task it cannot hand to a worker (one that cannot be pickled is an
      `lakecompute.errors.UnpicklableTaskError`), and returns soon after a cancel even if a
      task is stuck;
    - says what it can do through `shares_memory`, `needs_fork_safe_storage`, `spans_machines`
      and `without_fork`, so callers never check its name.

    `lakecompute.testing.schedulers.SchedulerTests` checks all of this.

    Example:
        >>> from lakecompute.schedulers import get_scheduler
        >>> sched = get_scheduler("threaded", num_workers=2)
        >>> sorted(sched.run(lambda task, progress: task * 2, [1, 2, 3]))
        [(0, 2), (1, 4), (2, 6)]
    """

    name: ClassVar[str]
    """The name the scheduler is registered under (``"serial"``, ``"threaded"``, ...)."""

    shares_memory: ClassVar[bool] = False
    """Whether tasks run in the calling process, seeing its memory: in-memory (``mem://``) datasets and
    objects the caller changes later. False unless a backend says otherwise."""

    def __init__(self, num_workers: int = 1) -> None:
        """Create the scheduler.

        Args:
            num_workers: how many tasks may run at the same time.
        """
        self._num_workers = parse_num_workers(num_workers)

    @property
    def num_workers(self) -> int:
        """How many tasks may run at the same time."""
        return self._num_workers

    @property
    def needs_fork_safe_storage(self) -> bool:
        """Whether workers are forked from the calling process, so that storage clients the caller has
        already used must keep working in a forked child (local files do; S3 clients do not).

        When they would not, use `without_fork`. False unless a backend says otherwise.
        """
        return False

    @property
    def spans_machines(self) -> bool:
        """Whether tasks may run on other machines, which do not see this machine's local disk.

        Callers refuse local dataset paths when it is True. False unless a backend says otherwise.
        """
        return False

    @property
    def placement(self) -> Placement | None:
        """The devices this scheduler's workers are placed on (see `with_devices`); None: none."""
        return None

    def with_devices(self, placement: Placement) -> Scheduler:
        """A scheduler like this one whose worker ``k`` runs on device ``k % len(placement)``.

        Inside a task, `worker_device` then names the worker's device. Backends that can place workers
        override this; by default it is refused.

        Raises:
            InvalidArgumentError: this scheduler cannot place its workers on devices.
        """
        devices = list(placement.local)
        raise InvalidArgumentError(
            f"The {self.name!r} scheduler cannot place its workers on devices (devices={devices!r}). Use "
            "scheduler='processed' (one process per worker, each shown its own GPU) or 'threaded' with "
            "devices=; on Ray, ask for GPUs per task with scheduler=lc.schedulers.Ray(num_gpus=1)."
        )

    def without_fork(self) -> Scheduler:
        """A scheduler like this one whose workers are not forked from the calling process.

        The processed scheduler with ``start_method="fork"`` returns a copy that starts its workers
        from a fork server instead; every other scheduler returns itself.
        """
        return self

    def run(
        self,
        fn: TaskFn[TaskT, ResultT],
        tasks: Iterable[TaskT],
        *,
        on_progress: ProgressFn | None = None,
        max_in_flight: int | None = None,
    ) -> Generator[tuple[int, ResultT], None, None]:
        """Run ``fn(task, progress)`` for every task and yield ``(position, result)`` as tasks complete.

        Results come in completion order; ``position`` is the task's index in ``tasks``. ``tasks`` may
        be a lazy iterable without a length: at most ``max_in_flight`` tasks are taken from it and
        outstanding at once.

        If a task raises, outstanding work is cancelled, the workers are stopped, and the exception is
        raised from this generator. Closing the generator early (``close()``, an exception or
        ``KeyboardInterrupt`` in the consumer) also cancels everything and stops the workers; wrap the
        generator in `contextlib.closing` so that this happens at once rather than when the
        generator is garbage-collected.

        Args:
            fn: the task function, called as ``fn(task, progress)``.
            tasks: the tasks, in order; it may yield `PAUSE` to hold back further tasks until the next
                result has been taken.
            on_progress: called in the thread iterating this generator with the increments the tasks
                report through ``progress``; never called concurrently.
            max_in_flight: most tasks outstanding at once; default ``2 * num_workers`` (at least 1).

        Yields:
            ``(position, result)`` pairs, one per task, in completion order.
        """
        # Arguments are checked here, at the call, not at the generator's first next(): mistakes
        # surface where they are made.
        limit = parse_max_in_flight(max_in_flight, self.num_workers)
        return self._run(Job(fn, iter(tasks), on_progress, limit))

    @abc.abstractmethod
    def _run(self, job: Job[TaskT, ResultT]) -> Results[ResultT]:
        """The generator behind `run`, with ``max_in_flight`` checked and resolved to ``job.limit``."""

    def close(self) -> None:  # noqa: B027 (an optional hook: doing nothing is the right default)
        """Release resources the scheduler keeps across runs. Does nothing unless a backend needs it."""

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_workers={self.num_workers})"


class PlacedScheduler(Scheduler):
    """A scheduler that places its workers on devices in this process: it keeps the `Placement`, and
    `with_devices` is a copy of it with another one."""

    _placement: Placement | None = None

    @property
    def placement(self) -> Placement | None:
        return self._placement

    def with_devices(self, placement: Placement) -> Scheduler:
        """This scheduler with worker ``k`` on device ``k % len(placement)``."""
        placed = copy.copy(self)
        placed._placement = placement
        return placed


def call_task(fn: TaskFn[TaskT, ResultT], task: TaskT, progress: ProgressFn, cancels: bool = True) -> ResultT:
    """Call ``fn(task, progress)`` where a scheduler runs a task, guarding against forks in the task.

    ``cancels=False`` says that ``progress(0)`` does nothing (a scheduler that cannot cancel a task):
    the task's per-sample ``progress(0)`` then costs one call, the fork guard's, not two.

    A process forked inside the task (``os.fork()`` in user code) that returns from ``fn`` would go on
    running the scheduler's code: report the task's result a second time, take more tasks, or carry
    on the caller's program. Here such a child ends (``os._exit``) at its first ``progress`` call or
    when it returns from ``fn``, whichever comes first, so with the engine's per-sample
    ``progress(0)`` it never writes a task's output; if it ended before the task returned, the process
    that ran the task raises `ForkInTaskError` instead of returning the result. Children that end
    on their own (``subprocess``, ``multiprocessing``) are not affected.

    Costs about a microsecond per task, and a few tens of nanoseconds per ``progress`` call, when the
    task does not fork.
    """
    guard = _ForkGuard()
    previous = getattr(_current, "guard", None)
    _current.guard = guard
    try:
        try:
            value = fn(task, guard.watch(progress, cancels))
        finally:
            guard.end_if_child()
            _current.guard = previous
        guard.check(task)
    finally:
        guard.close()
    return value


class _ForkGuard:
    """Notices a child forked by a task that returns into the scheduler's code."""

    __slots__ = ("_pid", "_read", "_write", "forked")

    def __init__(self) -> None:
        self._pid = os.getpid()
        self.forked = False
        """Set in a child forked while the task ran (see _after_fork_in_child); False in the parent."""
        # The pipe the child tells its parent through, made only when the task forks (see
        # _before_fork): a pipe per task would cost more than the rest of this guard.
        self._read = -1
        self._write = -1

    def before_fork(self) -> None:
        """In the task's thread, just before it forks: make the pipe the child will inherit."""
        if self._read < 0:
            self._read, self._write = os.pipe()
            os.set_blocking(self._read, False)

    def watch(self, progress: ProgressFn, cancels: bool = True) -> ProgressFn:
        """``progress`` for the task: in a forked child, the first call ends the child instead
        (``cancels=False``: ``progress(0)`` does nothing, and is not called)."""

        def guarded(increment: int) -> None:
            if self.forked:
                self.end_if_child()
            if increment or cancels:
                progress(increment)

        return guarded

    def end_if_child(self) -> None:
        """In a forked child: tell the parent, then end this process without running anything else."""
        if os.getpid() == self._pid:
            return
        try:
            if self._write >= 0:
                os.write(self._write, os.getpid().to_bytes(8, "little"))
        finally:
            # Not sys.exit(): no exit hooks, no flushing of buffers the parent also holds.
            os._exit(1)

    def check(self, task: object) -> None:
        """In the task's process: raise ForkInTaskError if a child of the task carried on and was ended."""
        if self._read < 0:
            return
        try:
            data = os.read(self._read, 8)
        except BlockingIOError:
            return
        pid = int.from_bytes(data, "little")
        raise ForkInTaskError(
            f"Task {describe_task(task)} forked its process (os.fork() in code the task ran, such as a "
            f"compute function), and the child process (pid {pid}) carried on with the task instead of "
            "ending. The child was stopped and the task's result dropped. End a forked child with "
            "os._exit(); to run another program use subprocess, and to work in parallel use more workers.",
            task=task,
            pid=pid,
        )

    def close(self) -> None:
        if self._read >= 0:
            os.close(self._read)
            os.close(self._write)


# The guard of the task the current thread runs, if any.
_current = threading.local()


def _before_fork() -> None:
    """Called by Python in the forking thread before every ``os.fork()``."""
    guard: _ForkGuard | None = getattr(_current, "guard", None)
    if guard is not None:
        guard.before_fork()


def _after_fork_in_child() -> None:
    """Called by Python in the child of every ``os.fork()``, in the thread that forked."""
    guard: _ForkGuard | None = getattr(_current, "guard", None)
    if guard is not None:
        guard.forked = True


if hasattr(os, "register_at_fork"):  # POSIX; where processes cannot fork, there is nothing to guard
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def parse_num_workers(num_workers: int) -> int:
    """Check a worker count (an int or numpy integer >= 0) and return it as an int.

    Raises:
        InvalidTypeError: if ``num_workers`` is not an int.
        InvalidArgumentError: if ``num_workers`` is negative.
    """
    return parse_count(
        "num_workers",
        num_workers,
        hint="Use 0 to run in the calling process, or a positive number of workers.",
    )


def parse_max_in_flight(max_in_flight: int | None, num_workers: int) -> int:
    """Check ``max_in_flight`` and resolve its default, ``2 * num_workers`` but at least 1.

    Raises:
        InvalidTypeError: if ``max_in_flight`` is not an int or None.
        InvalidArgumentError: if ``max_in_flight`` is less than 1.
    """
    limit = parse_count(
        "max_in_flight",
        max_in_flight,
        1,
        optional=True,
        hint="Pass None for the default (2 * num_workers).",
    )
    return max(1, 2 * num_workers) if limit is None else limit


def describe_task(task: object) -> str:
    """Describe a task for an error message: its ``describe()`` if it has one, else its ``repr()``."""
    describe = getattr(task, "describe", None)
    text: str | None = None
    if callable(describe):
        try:
            described = describe()
        except Exception:
            # A broken describe() must not hide the error being reported; fall back to repr().
            described = None
        if isinstance(described, str):
            text = described
    if text is None:
        try:
            text = repr(task)
        except Exception:
            text = f"<{type(task).__name__} object>"
    if len(text) > _MAX_DESCRIPTION:
        text = text[: _MAX_DESCRIPTION - 3] + "..."
    return text


# Which worker is running the current code. Threads get their own value (the threaded scheduler sets it
# per worker thread); a worker process sets the process-wide value once at start-up, which also covers
# threads that user code starts inside a worker.
_thread_state = threading.local()
_process_worker_id = 0
_process_device = "cpu"


def worker_id() -> int:
    """The id of the worker running the calling code, unique among the workers of one run.

    0 in the calling process (the serial scheduler), the thread's index for the threaded scheduler, the
    process's index for the processed scheduler. Useful to check that per-worker state is built once
    per worker.
    """
    value: int = getattr(_thread_state, "worker_id", _process_worker_id)
    return value


def _set_thread_worker_id(value: int) -> None:
    """Set the worker id of the calling thread (threaded scheduler)."""
    _thread_state.worker_id = value


def _set_process_worker_id(value: int) -> None:
    """Set the worker id of the whole process (processed scheduler, in the worker at start-up)."""
    global _process_worker_id
    _process_worker_id = value


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity on Linux, else the machine's count): what the
    shares of a worker's threads and helpers are taken from."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_device() -> str:
    """The device of the worker running the calling code, as torch names it: ``"cuda:0"`` or ``"cpu"``.

    With ``eval(..., devices="cuda")`` (or ``[0, 1, ...]``) each worker is placed on one GPU. A worker
    process sees only its own GPU (its ``CUDA_VISIBLE_DEVICES`` names it), so it is ``"cuda:0"`` there; a
    worker thread, or the calling process with ``num_workers=0``, shares the caller's GPUs and gets
    ``"cuda:<n>"`` in the caller's numbering. A Ray task given GPUs (``lc.schedulers.Ray(num_gpus=...)``)
    gets ``"cuda:0"``. Without devices it is ``"cpu"``.

    Example:
        >>> lc.worker_device()
        'cpu'
    """
    value: str = getattr(_thread_state, "device", _process_device)
    return value


def _set_thread_device(value: str | None) -> None:
    """Set (or, with None, clear) the device of the calling thread (threaded and serial schedulers)."""
    if value is None:
        _thread_state.__dict__.pop("device", None)
    else:
        _thread_state.device = value


def _set_process_device(value: str) -> None:
    """Set the device of the whole process (a worker process at start-up, a Ray task)."""
    global _process_device
    _process_device = value


#: How the running task takes this worker's next task early (set by a processed worker; None elsewhere).
_lookahead: Callable[[], Any] | None = None


def take_next_task() -> Any | None:
    """In a worker process of the processed scheduler, while a task runs: the task this worker runs next,
    taken from the queue now, so that the running task can start on it (read its first blocks); it runs
    here after the running one, whatever the running one does. None where there is none to take at once:
    nothing queued, another worker waiting for the queue (it gets the task: nothing is taken from an idle
    worker), the run ending, not a processed worker. Asked again, the same task."""
    take = _lookahead
    return None if take is None else take()


def _set_lookahead(take: Callable[[], Any] | None) -> None:
    """Set how `take_next_task` takes the next task in this process (a processed worker's loop)."""
    global _lookahead
    _lookahead = take
