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

import random
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from lakecompute.errors import InvalidArgumentError, RemoteError
from lakecompute.schedulers import ProgressFn, Scheduler, get_scheduler, worker_id

__all__ = [
    "MarkedTask",
    "SchedulerTestError",
    "SchedulerTests",
    "UnpicklableError",
    "count_marks",
    "fail_on_index",
    "marked_task",
    "raise_unpicklable",
    "raise_with_cause",
    "report_progress",
    "return_worker_id",
    "sleep_then_square",
    "square",
]


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


def count_marks(directory: Path, kind: str) -> int:
    """Count the ``started`` or ``finished`` markers `marked_task` left in ``directory``."""
    return len(list(directory.glob(f"{kind}-*")))


class SchedulerTests:
    """Tests every scheduler must pass. Subclass it and set `scheduler_name`."""

    scheduler_name: ClassVar[str]
    """The name to pass to `get_scheduler`."""
    pickles_exceptions: ClassVar[bool] = False
    """Whether exceptions cross a process boundary (then unpicklable ones arrive as RemoteError)."""

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
