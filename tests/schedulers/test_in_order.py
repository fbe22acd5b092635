"""The reorder buffer (InOrder) the eval engine and the parallel loader share, and Scheduler.run's Job."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lakecompute.schedulers import InOrder, ThreadedScheduler


@given(st.permutations(range(40)))
def test_items_come_back_in_position_order_whatever_the_arrival_order(order: list[int]) -> None:
    """Whatever order positions arrive in, every item comes out once, in position order, none held back."""
    buffer = InOrder[str]()
    out: list[str] = []
    for position in order:
        out.extend(buffer.put(position, f"item {position}"))
    assert out == [f"item {p}" for p in range(40)]
    assert (buffer.next, buffer.waiting) == (40, 0)


def test_an_item_waits_for_every_earlier_position() -> None:
    """An item is held while an earlier position is missing, and handed on the moment it comes."""
    buffer = InOrder[int](first=5)
    assert list(buffer.put(7, 70)) == []
    assert list(buffer.put(6, 60)) == []
    assert buffer.waiting == 2
    assert list(buffer.put(5, 50)) == [50, 60, 70]
    assert buffer.next == 8


def test_results_of_a_parallel_run_put_in_order() -> None:
    """Completion-ordered results of a threaded run come out of the buffer in task order."""
    buffer = InOrder[int]()
    results = ThreadedScheduler(3).run(lambda task, progress: task * task, range(25))
    ordered = [value for position, value in results for value in buffer.put(position, value)]
    assert ordered == [t * t for t in range(25)]


def test_a_run_over_no_tasks_yields_nothing() -> None:
    """An empty task list gives an empty run (Job.nonempty_tasks sees no first task)."""
    assert list(ThreadedScheduler(2).run(lambda task, progress: task, [])) == []


def test_an_item_is_taken_even_when_nothing_is_read_back() -> None:
    """put() keeps its item at once; what is ready is handed on when next asked for."""
    buffer = InOrder[int]()
    buffer.put(1, 10)  # nothing ready: the result is not read
    ready = buffer.put(0, 0)
    assert buffer.waiting == 2
    assert list(ready) == [0, 10]
