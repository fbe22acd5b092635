"""A conformance suite every scheduler must pass, and the task functions it uses.

Subclass `SchedulerTests` in a test module and name the scheduler::

    from lakecompute.testing.schedulers import SchedulerTests

    class TestThreaded(SchedulerTests):
        scheduler_name = "threaded"

Task functions live at module level here so that every start method (fork, spawn, forkserver) and
every scheduler can import them in its workers. Tests count what tasks did through files in a
temporary directory, which works across threads and processes alike.
"""

from __future__ import annotations

import os
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from lakecompute.errors import (
    ForkInTaskError,
    InvalidArgumentError,
    LakeComputeWarning,
    RemoteError,
    UnpicklableTaskError,
)
from lakecompute.schedulers import PAUSE, ProgressFn, Scheduler, get_scheduler, worker_id

__all__ = [
    "CarriedTask",
    "MarkedTask",
    "SchedulerTestError",
    "SchedulerTests",
    "UnpicklableError",
    "block_until_released",
    "count_marks",
    "fail_on_index",
    "fork_then_continue",
    "fork_then_return",
    "index_of",
    "marked_task",
    "poll_progress_zero",
    "raise_unpicklable",
    "raise_with_cause",
    "report_progress",
    "report_with_zeros",
    "return_worker_id",
    "sleep_then_square",
    "square",
    "wait_for",
]

# How long the suite's tasks and tests wait for something another thread or process does (seconds).
# Never reached when things work; pytest's per-test timeout stops a scheduler that hangs.
_PATIENCE = 600.0


class SchedulerTestError(Exception):
    """Raised by the suite's task functions on purpose."""


class UnpicklableError(Exception):
    """An exception that pickles but cannot be unpickled: ``__init__`` takes other arguments than ``args``."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        super().__init__(f"task {index}: {reason}")


@dataclass(frozen=True)
class MarkedTask:
    """A task that leaves marker files, so tests can count which tasks started and finished."""

    index: int
    """The task's position."""
    directory: str
    """Where the markers go."""
    sleep: float = 0.0
    """How long the task works, in seconds."""
    fail: bool = False
    """Whether the task raises `SchedulerTestError` right after starting."""


@dataclass(frozen=True)
class CarriedTask:
    """A task carrying an object, which may be one that cannot be pickled (a generator)."""

    index: int
    """The task's position."""
    payload: object = None
    """What the task carries."""


def square(task: int, progress: ProgressFn) -> int:
    """Return ``task * task``."""
    return task * task


def sleep_then_square(task: tuple[int, float], progress: ProgressFn) -> int:
    """Sleep ``task[1]`` seconds, then return ``task[0] ** 2``."""
    index, seconds = task
    time.sleep(seconds)
    return index * index


def report_progress(task: int, progress: ProgressFn) -> int:
    """Report ``task`` increments of 1 and one of 5, then return ``task``."""
    for _ in range(task):
        progress(1)
    progress(5)
    return task


def fail_on_index(task: tuple[int, int], progress: ProgressFn) -> int:
    """Return ``task[0]``, or raise `SchedulerTestError` when it equals ``task[1]``."""
    index, failing = task
    if index == failing:
        raise SchedulerTestError(f"task {index} failed on purpose")
    return index


def raise_with_cause(task: int, progress: ProgressFn) -> int:
    """Raise `SchedulerTestError` whose ``__cause__`` is an OSError."""
    try:
        raise OSError(f"disk of task {task} is full")
    except OSError as exc:
        raise SchedulerTestError(f"task {task} could not write") from exc


def raise_unpicklable(task: int, progress: ProgressFn) -> int:
    """Raise `UnpicklableError`."""
    raise UnpicklableError(task, "cannot travel")


def return_worker_id(task: int, progress: ProgressFn) -> int:
    """Return the id of the worker running the task."""
    time.sleep(0.005)
    return worker_id()


def marked_task(task: MarkedTask, progress: ProgressFn) -> int:
    """Mark the start, maybe fail, sleep, mark the end, return the index."""
    directory = Path(task.directory)
    (directory / f"started-{task.index}").touch()
    if task.fail:
        raise SchedulerTestError(f"task {task.index} failed on purpose")
    time.sleep(task.sleep)
    (directory / f"finished-{task.index}").touch()
    return task.index


def index_of(task: CarriedTask, progress: ProgressFn) -> int:
    """Return the task's index."""
    return task.index


def report_with_zeros(task: int, progress: ProgressFn) -> int:
    """Call ``progress(0)`` 1,000 times around one ``progress(task)``, then return ``task``."""
    for _ in range(500):
        progress(0)
    progress(task)
    for _ in range(500):
        progress(0)
    return task


def poll_progress_zero(task: MarkedTask, progress: ProgressFn) -> int:
    """Mark the start. A failing task waits (a little) for another to start, then raises; the others
    call ``progress(0)`` every 5 ms for ``task.sleep`` seconds, then mark the end."""
    directory = Path(task.directory)
    (directory / f"started-{task.index}").touch()
    if task.fail:
        wait_for(lambda: count_marks(directory, "started") > 1, timeout=2.0)
        raise SchedulerTestError(f"task {task.index} failed on purpose")
    deadline = time.monotonic() + task.sleep
    while time.monotonic() < deadline:
        progress(0)
        time.sleep(0.005)
    (directory / f"finished-{task.index}").touch()
    return task.index


def block_until_released(task: MarkedTask, progress: ProgressFn) -> int:
    """Mark the start; with ``task.sleep``, block without ever calling ``progress`` until a file named
    ``release`` appears (or ``task.sleep`` seconds pass); mark the end."""
    directory = Path(task.directory)
    (directory / f"started-{task.index}").touch()
    if task.sleep:
        wait_for((directory / "release").exists, timeout=task.sleep)
    (directory / f"finished-{task.index}").touch()
    return task.index


def fork_then_return(task: int, progress: ProgressFn) -> int:
    """Fork. The child returns from the task at once; the parent waits for the child to end, then
    returns ``task``."""
    with warnings.catch_warnings():
        # Python 3.12+ warns about forking a process that has threads; that is what this tests.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        return -task  # the child returns into the scheduler's code
    os.waitpid(pid, 0)
    return task


def fork_then_continue(task: MarkedTask, progress: ProgressFn) -> int:
    """Fork. The child calls ``progress(0)`` and, if it is still running after it, leaves a marker file
    and returns; the parent waits for the child to end, then returns the index."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        progress(0)
        (Path(task.directory) / "child-continued").touch()
        return -task.index
    os.waitpid(pid, 0)
    return task.index


def wait_for(condition: Callable[[], bool], timeout: float = _PATIENCE) -> bool:
    """Poll ``condition`` every 5 ms until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _holds(check: Callable[[], None]) -> bool:
    """Whether an assertion helper passes."""
    try:
        check()
    except AssertionError:
        return False
    return True


def _alive(pid: int) -> bool:
    """Whether a process with this id exists (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def count_marks(directory: Path, kind: str) -> int:
    """Count the ``started`` or ``finished`` markers `marked_task` left in ``directory``."""
    return len(list(directory.glob(f"{kind}-*")))


class SchedulerTests:
    """Tests every scheduler must pass. Subclass it and set `scheduler_name`."""

    scheduler_name: ClassVar[str]
    """The name to pass to `get_scheduler`."""
    pickles_exceptions: ClassVar[bool] = False
    """Whether exceptions cross a process boundary (then unpicklable ones arrive as RemoteError)."""
    pickles_tasks: ClassVar[bool] = False
    """Whether tasks are pickled (then one that cannot be raises UnpicklableTaskError)."""
    runs_in_consumer_thread: ClassVar[bool] = False
    """Whether tasks run in the thread that iterates the run (then no task runs while it waits)."""
    abandons_stuck_tasks: ClassVar[bool] = False
    """Whether a task stuck past the stop grace is left running in the background, with a warning
    (threads, which cannot be killed), rather than stopped (processes)."""

    def make_scheduler(self, num_workers: int = 2) -> Scheduler:
        """Build the scheduler under test; override to pass options."""
        return get_scheduler(self.scheduler_name, num_workers)

    def assert_workers_stopped(self) -> None:
        """Assert that no worker of a finished run is left; override for schedulers with workers."""

    def test_run_returns_each_result_once(self) -> None:
        """Every task's result comes back exactly once, tagged with the task's position."""
        results = list(self.make_scheduler().run(square, range(50)))
        assert sorted(position for position, _ in results) == list(range(50))
        assert sorted(results) == [(i, i * i) for i in range(50)]
        self.assert_workers_stopped()

    def test_run_random_sleeps_complete(self) -> None:
        """200 tasks finishing in random order all come back with the right values."""
        rng = random.Random(1234)
        tasks = [(i, rng.uniform(0.0, 0.003)) for i in range(200)]
        results = dict(self.make_scheduler().run(sleep_then_square, tasks))
        assert results == {i: i * i for i in range(200)}

    @pytest.mark.parametrize("max_in_flight", [1, 3, None])
    def test_run_lazy_tasks_bounded_in_flight(self, max_in_flight: int | None) -> None:
        """A generator without len is pulled lazily: never more than max_in_flight tasks outstanding."""
        num_workers = 2
        bound = max_in_flight if max_in_flight is not None else 2 * num_workers
        pulled = 0

        def tasks() -> Iterator[tuple[int, float]]:
            nonlocal pulled
            for i in range(30):
                pulled += 1
                yield (i, 0.002)

        generator = tasks()
        assert not hasattr(generator, "__len__")
        completed = 0
        highest = 0
        sched = self.make_scheduler(num_workers)
        for position, value in sched.run(sleep_then_square, generator, max_in_flight=max_in_flight):
            completed += 1
            # Tasks taken from the input whose results have not been handed out yet.
            highest = max(highest, pulled - completed)
            assert pulled - completed <= bound
            assert value == position * position
        assert completed == 30
        assert pulled == 30
        assert highest <= bound

    def test_run_progress_totals_exact(self) -> None:
        """The sum of on_progress calls equals the sum of increments, delivered in the iterating thread."""
        received: list[int] = []
        threads: set[int] = set()

        def on_progress(increment: int) -> None:
            threads.add(threading.get_ident())
            received.append(increment)

        results = dict(self.make_scheduler().run(report_progress, range(40), on_progress=on_progress))
        assert results == {i: i for i in range(40)}
        assert sum(received) == sum(range(40)) + 5 * 40
        assert threads == {threading.get_ident()}

    def test_run_exception_propagates_type_and_message(self) -> None:
        """An exception in a task is raised from run with its own type and message."""
        tasks = [(i, 7) for i in range(20)]
        with pytest.raises(SchedulerTestError) as info:
            list(self.make_scheduler().run(fail_on_index, tasks))
        assert type(info.value) is SchedulerTestError
        assert str(info.value) == "task 7 failed on purpose"
        self.assert_workers_stopped()

    def test_run_exception_keeps_cause(self) -> None:
        """The exception's __cause__ comes along with its type and message."""
        with pytest.raises(SchedulerTestError) as info:
            list(self.make_scheduler().run(raise_with_cause, [3]))
        assert str(info.value) == "task 3 could not write"
        cause = info.value.__cause__
        assert type(cause) is OSError
        assert str(cause) == "disk of task 3 is full"

    def test_run_failure_cancels_later_tasks(self, tmp_path: Path) -> None:
        """A failure in task 0 stops the run: later tasks are not all started, and none start afterwards."""
        tasks = [MarkedTask(i, str(tmp_path), sleep=0.05, fail=i == 0) for i in range(100)]
        with pytest.raises(SchedulerTestError) as info:
            for _ in self.make_scheduler().run(marked_task, tasks):
                pass
        assert str(info.value) == "task 0 failed on purpose"
        started = count_marks(tmp_path, "started")
        self.assert_workers_stopped()
        assert (tmp_path / "started-0").exists()
        assert 1 <= started < 100
        # Were any worker still taking tasks, more would start while we wait (each takes 50 ms).
        time.sleep(0.3)
        assert count_marks(tmp_path, "started") == started

    def test_run_unpicklable_exception(self) -> None:
        """An unpicklable exception arrives as RemoteError across processes, as itself otherwise."""
        expected_type = f"{UnpicklableError.__module__}.{UnpicklableError.__qualname__}"
        with pytest.raises((UnpicklableError, RemoteError)) as info:
            list(self.make_scheduler().run(raise_unpicklable, [4]))
        error = info.value
        if self.pickles_exceptions:
            assert isinstance(error, RemoteError)
            assert error.type_name == expected_type
            assert error.message == "task 4: cannot travel"
            assert "raise_unpicklable" in error.traceback_text
        else:
            assert isinstance(error, UnpicklableError)
            assert error.index == 4
            assert str(error) == "task 4: cannot travel"
        self.assert_workers_stopped()

    def test_run_close_early_stops_everything(self, tmp_path: Path) -> None:
        """Closing the generator after the first result cancels the rest and stops the workers."""
        tasks = [MarkedTask(i, str(tmp_path), sleep=0.05) for i in range(100)]
        run = self.make_scheduler().run(marked_task, tasks)
        position, value = next(run)
        assert value == position
        run.close()
        started = count_marks(tmp_path, "started")
        self.assert_workers_stopped()
        assert 1 <= started < 100
        time.sleep(0.3)
        assert count_marks(tmp_path, "started") == started

    def test_run_consumer_exception_stops_everything(self, tmp_path: Path) -> None:
        """An exception raised by the consumer inside closing() cancels the run and stops the workers."""
        tasks = [MarkedTask(i, str(tmp_path), sleep=0.05) for i in range(100)]

        def consume() -> None:
            with closing(self.make_scheduler().run(marked_task, tasks)) as run:
                for _ in run:
                    raise KeyError("consumer gave up")

        with pytest.raises(KeyError, match="consumer gave up"):
            consume()
        started = count_marks(tmp_path, "started")
        self.assert_workers_stopped()
        assert 1 <= started < 100
        time.sleep(0.3)
        assert count_marks(tmp_path, "started") == started

    def test_run_empty_tasks_yield_nothing(self) -> None:
        """An empty list or an empty generator gives no results and no progress."""
        received: list[int] = []
        sched = self.make_scheduler()
        assert list(sched.run(square, [], on_progress=received.append)) == []
        assert list(sched.run(square, iter(()), on_progress=received.append)) == []
        assert received == []
        self.assert_workers_stopped()

    def test_run_worker_id_in_range(self) -> None:
        """Tasks see a worker id between 0 and num_workers - 1."""
        num_workers = 2
        ids = {value for _, value in self.make_scheduler(num_workers).run(return_worker_id, range(30))}
        assert ids <= set(range(num_workers))
        assert ids

    def test_run_rejects_bad_max_in_flight(self) -> None:
        """max_in_flight below 1 is refused with InvalidArgumentError, before any task runs."""
        with pytest.raises(InvalidArgumentError, match=r"Expected max_in_flight >= 1\. Got 0\."):
            self.make_scheduler().run(square, [1, 2], max_in_flight=0)

    def test_run_scheduler_reusable(self) -> None:
        """One scheduler object runs several jobs one after the other."""
        sched = self.make_scheduler()
        assert dict(sched.run(square, range(5))) == {i: i * i for i in range(5)}
        assert dict(sched.run(square, range(7))) == {i: i * i for i in range(7)}
        sched.close()

    def test_run_progress_zero_reports_nothing(self) -> None:
        """progress(0), the per-sample cancellation point, never reaches on_progress; totals stay exact."""
        received: list[int] = []
        results = dict(self.make_scheduler().run(report_with_zeros, range(1, 9), on_progress=received.append))
        assert results == {i: i + 1 for i in range(8)}
        assert 0 not in received
        assert sum(received) == sum(range(1, 9))

    @pytest.mark.timeout(120)
    def test_run_failure_stops_task_at_progress_zero(self, tmp_path: Path) -> None:
        """After a failure, a task that only calls progress(0) is stopped there: it never finishes its
        10 minutes, and no warning about a stuck task is raised."""
        if self.runs_in_consumer_thread:
            pytest.skip("Tasks run one at a time in the consumer's thread: none runs when another fails.")
        tasks = [MarkedTask(0, str(tmp_path), sleep=_PATIENCE), MarkedTask(1, str(tmp_path), fail=True)]
        with pytest.raises(SchedulerTestError, match="task 1 failed on purpose"):
            list(self.make_scheduler().run(poll_progress_zero, tasks))
        self.assert_workers_stopped()
        assert count_marks(tmp_path, "finished") == 0

    @pytest.mark.timeout(120)
    def test_run_close_with_stuck_task_returns(self, tmp_path: Path) -> None:
        """Closing a run while a task is blocked in code that never calls progress() returns anyway;
        a thread left behind is reported with a LakeComputeWarning, a process is stopped."""
        if self.runs_in_consumer_thread:
            pytest.skip("Tasks run in the consumer's thread: it cannot close the run while one is stuck.")
        tasks = [MarkedTask(0, str(tmp_path)), MarkedTask(1, str(tmp_path), sleep=_PATIENCE)]
        run = self.make_scheduler().run(block_until_released, tasks)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert next(run) == (0, 0)
                assert wait_for((tmp_path / "started-1").exists)
                run.close()
        finally:
            (tmp_path / "release").touch()
        stuck = [w for w in caught if issubclass(w.category, LakeComputeWarning)]
        if self.abandons_stuck_tasks:
            assert len(stuck) == 1
            assert str(stuck[0].message).startswith("1 worker thread(s) of the threaded scheduler")
            # Released, the abandoned task ends, and so does its thread.
            assert wait_for(lambda: _holds(self.assert_workers_stopped))
        else:
            assert stuck == []
            self.assert_workers_stopped()

    @pytest.mark.timeout(120)
    def test_run_unpicklable_task(self) -> None:
        """A task that cannot be pickled stops the run at once with UnpicklableTaskError naming it, where
        tasks are pickled; elsewhere it runs like any other."""
        tasks = [CarriedTask(i, (j for j in range(3)) if i == 3 else None) for i in range(8)]
        sched = self.make_scheduler()
        if not self.pickles_tasks:
            assert dict(sched.run(index_of, tasks)) == {i: i for i in range(8)}
            return
        with pytest.raises(UnpicklableTaskError) as info:
            list(sched.run(index_of, tasks))
        error = info.value
        assert error.position == 3
        assert error.task is tasks[3]
        assert isinstance(error, InvalidArgumentError)
        assert str(error).startswith(f"Task {tasks[3]!r} cannot be sent to a worker process: pickling it")
        assert "scheduler='threaded' or num_workers=0" in str(error)
        assert isinstance(error.__cause__, Exception)
        self.assert_workers_stopped()

    @pytest.mark.timeout(120)
    def test_run_task_that_forks_raises(self) -> None:
        """A task whose forked child returns into the scheduler raises ForkInTaskError naming the task
        and the child, which has ended; its result is not reported twice."""
        with pytest.raises(ForkInTaskError) as info:
            list(self.make_scheduler().run(fork_then_return, [7]))
        error = info.value
        assert error.task == 7
        assert str(error).startswith(
            "Task 7 forked its process (os.fork() in code the task ran, such as a compute function), "
            f"and the child process (pid {error.pid}) carried on with the task instead of ending."
        )
        assert not _alive(error.pid)
        self.assert_workers_stopped()

    @pytest.mark.timeout(120)
    def test_run_forked_child_ends_at_progress(self, tmp_path: Path) -> None:
        """A child forked by a task ends at its first progress call, before it does anything else, and
        the task raises ForkInTaskError."""
        with pytest.raises(ForkInTaskError) as info:
            list(self.make_scheduler().run(fork_then_continue, [MarkedTask(4, str(tmp_path))]))
        assert info.value.task == MarkedTask(4, str(tmp_path))
        assert not (tmp_path / "child-continued").exists()
        assert not _alive(info.value.pid)
        self.assert_workers_stopped()

    def test_run_pause_waits_for_a_result(self) -> None:
        """After PAUSE no task is taken until a result was yielded; then the rest run, positions intact."""
        taken: list[int] = []
        first_result_seen: list[bool] = []

        def tasks() -> Iterator[Any]:  # ints, and PAUSE
            yield 0
            while not taken:
                yield PAUSE  # the first task decides how the rest are made
            first_result_seen.append(True)
            yield from range(1, 20)

        for _, value in self.make_scheduler().run(square, tasks()):
            taken.append(value)
        assert sorted(taken) == [i * i for i in range(20)]
        assert taken[0] == 0  # nothing else ran before the first task's result was taken
        assert first_result_seen == [True]
        self.assert_workers_stopped()

    def test_run_pause_with_nothing_outstanding_is_an_error(self) -> None:
        """A pause that no result could end is refused at once, not waited on forever."""

        def tasks() -> Iterator[Any]:  # ints, and PAUSE
            yield PAUSE

        with pytest.raises(InvalidArgumentError, match="while no task was outstanding"):
            list(self.make_scheduler().run(square, tasks()))
        self.assert_workers_stopped()
