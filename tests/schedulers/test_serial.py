"""The serial scheduler: the conformance suite, and what only the serial scheduler promises."""

from __future__ import annotations

import traceback

import pytest

from lakecompute.schedulers import SerialScheduler, get_scheduler, worker_id
from lakecompute.testing.schedulers import SchedulerTestError, SchedulerTests, fail_on_index


class TestSerial(SchedulerTests):
    scheduler_name = "serial"
    runs_in_consumer_thread = True


def test_serial_results_in_input_order() -> None:
    """The serial scheduler completes tasks in input order."""
    results = list(SerialScheduler().run(lambda task, progress: task * 10, range(5)))
    assert results == [(0, 0), (1, 10), (2, 20), (3, 30), (4, 40)]


def test_serial_runs_in_calling_thread_with_worker_id_zero() -> None:
    """Tasks run in the caller (they see its state) with worker id 0."""
    seen: list[int] = []

    def task_fn(task: int, progress: object) -> int:
        seen.append(task)
        return worker_id()

    assert [value for _, value in get_scheduler("serial", 4).run(task_fn, [1, 2])] == [0, 0]
    assert seen == [1, 2]


def test_serial_progress_calls_on_progress_directly() -> None:
    """progress() inside a task reaches on_progress before the task returns."""
    received: list[int] = []

    def task_fn(task: int, progress: object) -> int:
        assert callable(progress)
        progress(task)
        return len(received)

    results = list(SerialScheduler().run(task_fn, [3, 4], on_progress=received.append))
    assert results == [(0, 1), (1, 2)]
    assert received == [3, 4]


def test_serial_exception_keeps_original_traceback() -> None:
    """The original exception object propagates with the task function's frame in its traceback."""
    with pytest.raises(SchedulerTestError) as info:
        list(SerialScheduler().run(fail_on_index, [(0, 1), (1, 1)]))
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "fail_on_index" in frames
