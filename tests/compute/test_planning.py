"""How eval splits its input into tasks: full coverage, checkpoint boundaries, guided sizes."""

from __future__ import annotations

import itertools

import pytest

from lakecompute.compute._plan import MAX_TASK
from lakecompute.compute._plan import plan_ranges as _plan_ranges
from lakecompute.compute._plan import task_size as _task_size


def _plan(
    length: int, num_workers: int, checkpoint: int = 0, batch: int | None = None, start: int = 0
) -> list[tuple[int, int]]:
    return _plan_ranges(
        length, _task_size(length, num_workers, checkpoint, batch), num_workers, checkpoint, batch, start
    )


@pytest.mark.parametrize("length", [1, 7, 100, 2_000, 20_000, 60_000, 100_003])
@pytest.mark.parametrize("num_workers", [0, 1, 2, 8])
def test_plan_covers_the_input_once_in_order(length: int, num_workers: int) -> None:
    """Tasks are contiguous, non-empty, in order, at most MAX_TASK long with workers (one task without),
    and cover every input once."""
    ranges = _plan(length, num_workers)
    assert ranges[0][0] == 0
    assert ranges[-1][1] == length
    assert all(a < b <= a + MAX_TASK for a, b in ranges) if num_workers else ranges == [(0, length)]
    assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(ranges))


def test_plan_shrinks_tasks_towards_the_end_with_workers() -> None:
    """With several workers the last tasks are smaller than the first, so workers finish together."""
    sizes = [b - a for a, b in _plan(20_000, 2)]
    assert sizes[0] == 2_500
    assert sizes[-2] < sizes[0] / 3
    assert sizes == sorted(sizes, reverse=True)
    assert len(sizes) > 8  # more tasks than the 4 per worker of equal sizes


def test_plan_without_workers_is_one_task() -> None:
    """In the calling process there is nothing to balance, and a task's first read and last write
    overlap nothing: the input is one task, unless checkpoints bound it."""
    assert _plan(20_000, 0) == [(0, 20_000)]
    assert _plan(20_000, 0, checkpoint=8_000) == [(0, 8_000), (8_000, 16_000), (16_000, 20_000)]


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_plan_never_crosses_a_checkpoint_boundary(num_workers: int) -> None:
    """Every multiple of checkpoint_interval is a task boundary, also when resuming from one."""
    for start in (0, 30):
        ranges = _plan(1_000, num_workers, checkpoint=30, start=start)
        assert ranges[0][0] == start
        assert ranges[-1][1] == 1_000
        for a, b in ranges:
            assert a // 30 == (b - 1) // 30


def test_plan_keeps_whole_batches() -> None:
    """With batch_size, every task but the last holds whole batches."""
    ranges = _plan(10_000, 2, batch=64)
    assert all((b - a) % 64 == 0 for a, b in ranges[:-1])
    assert ranges[-1][1] == 10_000


def test_task_floor_keeps_tail_chunks_a_small_part_of_each_task() -> None:
    """A task of small outputs into many tensors is made large enough that its padded tail chunks
    (one per tensor) stay a small part of what it writes; never beyond two tasks per worker, and
    never for outputs large enough already, nor without workers."""
    from lakecompute.compute._plan import task_floor

    # 13 tensors, ~28 KB stored per input (a COCO image with its annotations): two tasks per worker.
    floor = task_floor(1_500, 2, 13, 28_000)
    assert floor == 375
    sizes = [
        b - a for a, b in _plan_ranges(1_500, _task_size(1_500, 2, 0, None, floor), 2, 0, None, 1, floor)
    ]
    assert sizes == [375, 375, 375, 374]
    # Large outputs (8 MiB an input): the guided sizes stay as they are.
    assert task_floor(20_000, 2, 3, 8 << 20) == 2
    assert [b - a for a, b in _plan_ranges(20_000, _task_size(20_000, 2, 0, None, 2), 2, 0, None, 0, 2)] == [
        b - a for a, b in _plan(20_000, 2)
    ]
    assert task_floor(1_500, 0, 13, 28_000) == 1
    assert task_floor(1_500, 1, 13, 28_000) == 1


def test_task_floor_keeps_checkpoint_boundaries_and_batches() -> None:
    ranges = _plan_ranges(1_000, _task_size(1_000, 2, 30, None, 250), 2, 30, None, 0, 250)
    assert ranges[-1][1] == 1_000
    assert all(a // 30 == (b - 1) // 30 for a, b in ranges)
    batched = _plan_ranges(10_000, _task_size(10_000, 2, 0, 64, 2_500), 2, 0, 64, 0, 2_500)
    assert all((b - a) % 64 == 0 for a, b in batched[:-1])
    assert batched[-1][1] == 10_000
