"""The index plan: permutation, rank and worker strides, padding, drop_last, resume, argument checks."""

from __future__ import annotations

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.loaders import IndexPlan


def _epoch(plan: IndexPlan) -> list[list[int]]:
    order = plan.order()
    return [plan.step_indices(s, order).tolist() for s in range(plan.steps)]


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_plan_ranks_share_one_permutation_without_overlap(world_size: int, drop_last: bool) -> None:
    """Interleaving the ranks' streams gives the (seed, epoch) permutation itself, padded by wrapping."""
    n, batch = 103, 8
    plans = [IndexPlan(n, batch, True, 5, 2, drop_last, r, world_size) for r in range(world_size)]
    streams = [[i for b in _epoch(p) for i in b] for p in plans]
    assert len({p.steps for p in plans}) == 1  # equal batch counts on every rank
    assert len({len(s) for s in streams}) == 1
    interleaved = [streams[r][q] for q in range(len(streams[0])) for r in range(world_size)]
    order = plans[0].order()
    assert order is not None
    used = plans[0].per_rank * world_size
    assert interleaved == [int(order[p % n]) for p in range(used)]
    if drop_last:
        assert plans[0].padding == 0
        assert plans[0].dropped == n - used
        assert len(set(interleaved)) == used
        assert all(len(b) == batch for p in plans for b in _epoch(p))
    else:
        assert plans[0].padding == used - n < world_size
        assert set(interleaved) == set(range(n))


def test_plan_worked_example_of_the_docs() -> None:
    """10 samples, batch 2, two ranks: rank 1 reads [1, 3], [5, 7], [9]; rank 0 [0, 2], [4, 6], [8]."""
    assert _epoch(IndexPlan(10, 2, world_size=2, rank=0)) == [[0, 2], [4, 6], [8]]
    assert _epoch(IndexPlan(10, 2, world_size=2, rank=1)) == [[1, 3], [5, 7], [9]]
    padded = IndexPlan(11, 2, world_size=2, rank=1)
    assert _epoch(padded) == [[1, 3], [5, 7], [9, 0]]  # position 11 wraps to the first sample
    assert padded.padding == 1
    assert _epoch(IndexPlan(11, 2, world_size=2, rank=1, drop_last=True)) == [[1, 3], [5, 7]]


def test_plan_permutation_depends_on_seed_and_epoch_only() -> None:
    """The order is the same for every rank and run, and differs between epochs and seeds."""
    a = IndexPlan(1000, 10, shuffle=True, seed=1, epoch=0, rank=0, world_size=4).order()
    b = IndexPlan(1000, 7, shuffle=True, seed=1, epoch=0, rank=3, world_size=4).order()
    c = IndexPlan(1000, 10, shuffle=True, seed=1, epoch=1).order()
    d = IndexPlan(1000, 10, shuffle=True, seed=2, epoch=0).order()
    assert a is not None
    assert b is not None
    assert c is not None
    assert d is not None
    np.testing.assert_array_equal(a, b)
    assert sorted(a.tolist()) == list(range(1000))
    assert not np.array_equal(a, c)
    assert not np.array_equal(a, d)
    assert IndexPlan(1000, 10).order() is None  # identity without shuffle


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_plan_workers_own_every_nth_step_from_the_start(num_workers: int) -> None:
    """Worker w reads steps start + w, start + w + n, ...: together exactly the run's steps."""
    plan = IndexPlan(50, 4, start_from_step=3)
    owned = [list(plan.worker_steps(w, num_workers)) for w in range(max(1, num_workers))]
    assert sorted(s for steps in owned for s in steps) == list(range(3, plan.steps))
    for w, steps in enumerate(owned):
        assert all((s - 3) % max(1, num_workers) == w for s in steps)


def test_plan_resume_is_the_tail_of_the_epoch() -> None:
    """Steps from start_from_step=k are the uninterrupted epoch's steps from k; len() counts them."""
    full = IndexPlan(103, 8, True, 3, 1, False, 1, 3)
    resumed = IndexPlan(103, 8, True, 3, 1, False, 1, 3, start_from_step=2)
    assert len(full) == full.steps == 5
    assert len(resumed) == 3
    assert [resumed.step_indices(s).tolist() for s in resumed.worker_steps(0, 0)] == _epoch(full)[2:]
    assert len(IndexPlan(103, 8, start_from_step=13)) == 0  # the end of the epoch is a valid start


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"batch_size": 0}, lc.InvalidArgumentError, "Expected batch_size >= 1. Got 0."),
        ({"batch_size": 2.5}, lc.InvalidTypeError, "Expected batch_size to be an int. Got float: 2.5."),
        ({"rank": 2, "world_size": 2}, lc.InvalidArgumentError, "Got rank=2, world_size=2"),
        ({"seed": -1}, lc.InvalidArgumentError, "Expected seed >= 0. Got -1."),
        ({"epoch": True}, lc.InvalidTypeError, "Expected epoch to be an int. Got bool: True."),
        ({"start_from_step": 14}, lc.InvalidArgumentError, "pass epoch=1 and start_from_step=0"),
    ],
)
def test_plan_refuses_bad_arguments(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    """Bad options raise a typed error saying what was expected, what was given, and what to do."""
    options: dict[str, object] = {"length": 103, "batch_size": 8, **kwargs}
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        IndexPlan(**options)  # type: ignore[arg-type]
