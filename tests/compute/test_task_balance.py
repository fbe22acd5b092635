"""Tasks sized by the preflight's floor split the input evenly between the workers: as many tasks for
every worker, of one size, so that no worker runs a last task while the others wait."""

from __future__ import annotations

import itertools

import pytest

from lakecompute.compute._plan import MAX_TASK, plan_ranges, task_floor, task_size


def _sizes(length: int, workers: int, tensors: int, stored_per_input: float) -> list[int]:
    floor = task_floor(length, workers, tensors, stored_per_input)
    ranges = plan_ranges(length, task_size(length, workers, 0, None, floor), workers, 0, None, 1, floor)
    assert ranges[0][0] == 1
    assert ranges[-1][1] == length
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(ranges))
    return [b - a for a, b in ranges]


@pytest.mark.parametrize(
    ("length", "workers", "tensors", "stored", "expected"),
    [
        (
            20_000,
            2,
            1,
            1_028.0,
            [5_000, 5_000, 5_000, 4_999],
        ),  # W3: float32[256], 4 tasks of 5,000 (not 5 of 4,096)
        (60_000, 2, 2, 200.0, [7_500] * 7 + [7_499]),  # W1: at most MAX_TASK each, 4 per worker (not 7 + 1)
        (1_500, 2, 13, 28_000.0, [375, 375, 375, 374]),  # the COCO ingest: two per worker, as before
    ],
)
def test_floored_tasks_are_even_per_worker(
    length: int, workers: int, tensors: int, stored: float, expected: list[int]
) -> None:
    """When the tail-chunk floor decides the size, every worker gets the same number of equal tasks."""
    sizes = _sizes(length, workers, tensors, stored)
    assert sizes == expected
    assert len(sizes) % workers == 0
    assert max(sizes) <= MAX_TASK


def test_small_floors_keep_guided_sizes() -> None:
    """A floor below the guided sizes changes nothing: tasks still shrink towards the end."""
    sizes = _sizes(20_000, 2, 3, float(8 << 20))
    assert sizes[0] > sizes[-1]
    assert task_floor(20_000, 2, 3, float(8 << 20)) == 2
