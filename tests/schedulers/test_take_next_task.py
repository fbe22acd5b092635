"""`take_next_task`: a running task takes its worker's next task early (the eval reads its first blocks then),
and the worker runs it next, exactly once, whatever the running one does; elsewhere there is none to take."""

from __future__ import annotations

import os
from typing import Any

import pytest

from lakecompute.schedulers import ProcessedScheduler, SerialScheduler, ThreadedScheduler, take_next_task
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)


def _peek(task: int, progress: Any) -> tuple[int, int, Any]:
    """Task ``task``: its worker's pid and the next task it took early (waiting for the queue to hold one,
    except for the last task, which finds none or the stop signal)."""
    if task < 5:
        taken = wait_until(take_next_task, what="the next task in the queue")
        assert take_next_task() == taken  # asked again: the same one
    else:
        taken = take_next_task()
    return task, os.getpid(), taken


def test_a_task_takes_the_next_one_and_the_worker_runs_it_next() -> None:
    """One worker, six tasks: each task but the last takes the next one early; every task runs once, in
    order, on the one worker, and the run ends (the stop signal taken early ends it after its task)."""
    results = dict(ProcessedScheduler(1).run(_peek, range(6)))
    assert sorted(results) == list(range(6))
    assert [results[k][0] for k in range(6)] == list(range(6))
    assert len({pid for _, pid, _ in results.values()}) == 1
    assert [results[k][2] for k in range(5)] == [1, 2, 3, 4, 5]
    assert results[5][2] is None


def _raise_after_taking(task: int, progress: Any) -> int:
    if task == 0:
        wait_until(take_next_task, what="the next task in the queue")
        raise ValueError("task 0 failed after taking task 1")
    return task


def test_a_task_that_fails_after_taking_the_next_still_reports_its_error() -> None:
    """The running task's failure is the run's error, as without the early take."""
    with pytest.raises(ValueError, match="task 0 failed after taking task 1"):
        dict(ProcessedScheduler(1).run(_raise_after_taking, range(3)))


def _none(task: int, progress: Any) -> Any:
    return take_next_task()


@pytest.mark.parametrize("scheduler", [SerialScheduler(), ThreadedScheduler(2)], ids=["serial", "threaded"])
def test_no_next_task_to_take_outside_a_worker_process(scheduler: Any) -> None:
    """Serial and threaded tasks run in the caller: there is no worker queue to take from."""
    assert dict(scheduler.run(_none, range(3))) == {0: None, 1: None, 2: None}
