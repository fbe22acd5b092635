"""The threaded scheduler: the conformance suite, and what only the threaded scheduler promises."""

from __future__ import annotations

import threading

import pytest

from lakecompute.errors import InvalidArgumentError
from lakecompute.schedulers import ProgressFn, ThreadedScheduler, worker_id
from lakecompute.schedulers._threaded import THREAD_NAME_PREFIX
from lakecompute.testing.schedulers import SchedulerTestError, SchedulerTests
from tests.helpers import wait_until


def _worker_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith(THREAD_NAME_PREFIX)]


class TestThreaded(SchedulerTests):
    scheduler_name = "threaded"
    abandons_stuck_tasks = True

    def assert_workers_stopped(self) -> None:
        """No worker thread of the run is alive."""
        assert _worker_threads() == []


def test_threaded_worker_ids_distinct_per_thread() -> None:
    """Each worker thread has its own id, fixed for all the tasks it runs."""
    barrier = threading.Barrier(3)

    def task_fn(task: int, progress: ProgressFn) -> tuple[int, int]:
        # All three threads wait here together, so each of them runs a task.
        if task < 3:
            barrier.wait(timeout=10)
        return worker_id(), threading.get_ident()

    pairs = {value for _, value in ThreadedScheduler(3).run(task_fn, range(12))}
    ids = {worker for worker, _ in pairs}
    assert ids == {0, 1, 2}
    assert len({ident for _, ident in pairs}) == 3
    assert len(pairs) == 3


def test_threaded_failure_stops_running_task_at_progress() -> None:
    """After a failure, a running task is stopped at its next progress() call and run waits for it."""
    running = threading.Event()
    stopped_early = threading.Event()
    finished = threading.Event()

    def task_fn(task: int, progress: ProgressFn) -> int:
        if task == 0:
            wait_until(running.is_set, what="task 1 to run")
            raise SchedulerTestError("first task failed")
        running.set()
        try:
            # progress() returns None: this polls it until it stops the task (or the wait runs out).
            wait_until(lambda: progress(1), what="progress() to stop the task")
        except AssertionError:
            finished.set()  # never stopped
            raise
        except BaseException:
            stopped_early.set()
            raise
        finished.set()
        return task

    with pytest.raises(SchedulerTestError, match="first task failed"):
        list(ThreadedScheduler(2).run(task_fn, range(2)))
    assert stopped_early.is_set()
    assert not finished.is_set()
    assert _worker_threads() == []


def test_threaded_rejects_zero_workers() -> None:
    """ThreadedScheduler(0) is refused and points at the serial scheduler."""
    with pytest.raises(InvalidArgumentError, match="Expected num_workers >= 1 for the threaded scheduler"):
        ThreadedScheduler(0)
