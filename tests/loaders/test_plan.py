"""The index plan: permutation, samples dealt to ranks then workers, the steps' order, padding, resume."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.loaders import IndexPlan
from tests.loaders.conftest import SEED_001_TABLE


def _epoch(plan: IndexPlan) -> list[list[int]]:
    order = plan.order()
    return [plan.step_indices(s, order).tolist() for s in range(plan.steps)]


def _contract(plan: IndexPlan) -> list[list[list[int]]]:
    """What API §3 says each (rank, worker) reads, written out from its words: position p of the
    order goes to rank p % world_size, then to worker (p // world_size) % num_workers; each worker keeps
    whole batches only with drop_last."""
    order = plan.order()
    n, world = max(1, plan.num_workers), plan.world_size
    share = plan.length // world if plan.drop_last else -(-plan.length // world)
    dealt: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(world)]
    for p in range(share * world):
        i = p % plan.length  # past the end, the order wraps around to its start
        dealt[p % world][(p // world) % n].append(i if order is None else int(order[i]))
    if plan.drop_last:
        dealt = [[s[: len(s) // plan.batch_size * plan.batch_size] for s in rank] for rank in dealt]
    return dealt


def _round_robin(streams: list[list[list[int]]]) -> list[list[int]]:
    """Batches taken from each stream in turn, skipping streams that ran out (torch's DataLoader)."""
    out: list[list[int]] = []
    for k in range(max((len(s) for s in streams), default=0)):
        out.extend(s[k] for s in streams if k < len(s))
    return out


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_plan_deals_positions_to_ranks_then_workers(
    world_size: int, num_workers: int, drop_last: bool
) -> None:
    """Each (rank, worker) reads exactly the contract's samples; together every index, disjoint up to
    the padding; every rank has as many steps; step s is batch s // n of worker s % n."""
    n, batch = 103, 8
    plans = [
        IndexPlan(n, batch, True, 5, 2, drop_last, r, world_size, num_workers=num_workers)
        for r in range(world_size)
    ]
    expected = _contract(plans[0])
    read: list[int] = []
    for rank, plan in enumerate(plans):
        streams = [plan.worker_indices(w).tolist() for w in range(max(1, num_workers))]
        assert streams == expected[rank]
        batches = [[s[i : i + batch] for i in range(0, len(s), batch)] for s in streams]
        assert _epoch(plan) == _round_robin(batches)
        read.extend(i for s in streams for i in s)
    assert len({p.steps for p in plans}) == 1  # equal batch counts on every rank
    if drop_last:
        assert plans[0].padding == 0
        assert len(read) == len(set(read)) == n - plans[0].dropped
        assert all(len(b) == batch for p in plans for b in _epoch(p))
    else:
        assert set(read) == set(range(n))
        assert len(read) - n == plans[0].padding < world_size


def test_plan_steps_interleave_the_workers_until_each_runs_out() -> None:
    """20 samples, 3 workers, batch 3: workers read 7, 7 and 6 samples; the last round has no worker 2."""
    plan = IndexPlan(20, 3, num_workers=3)
    assert [plan.worker_indices(w).tolist() for w in range(3)] == [
        [0, 3, 6, 9, 12, 15, 18],
        [1, 4, 7, 10, 13, 16, 19],
        [2, 5, 8, 11, 14, 17],
    ]
    assert _epoch(plan) == [
        [0, 3, 6],
        [1, 4, 7],
        [2, 5, 8],
        [9, 12, 15],
        [10, 13, 16],
        [11, 14, 17],
        [18],
        [19],
    ]
    dropped = IndexPlan(20, 3, num_workers=3, drop_last=True)
    assert _epoch(dropped) == _epoch(plan)[:6]  # each worker leaves out its own short batch
    assert dropped.dropped == 2


def test_plan_seed_001_table_for_two_ranks_and_four_workers() -> None:
    """world_size 2 x 4 loader workers reads seed 001's table verbatim."""
    table = SEED_001_TABLE
    for (rank, worker), row in table.items():
        plan = IndexPlan(1000, 2, rank=rank, world_size=2, num_workers=4)
        assert plan.worker_indices(worker).tolist()[:4] == row
    rank0 = IndexPlan(1000, 2, rank=0, world_size=2, num_workers=4)
    assert [i for s in range(rank0.steps) for i in rank0.step_indices(s)][:6] == [0, 8, 2, 10, 4, 12]


def test_plan_worked_example_of_the_docs() -> None:
    """21 samples, batch 2, two ranks, four workers: the batches, the wrap-around and the step order."""
    rank0 = IndexPlan(21, 2, world_size=2, rank=0, num_workers=4)
    rank1 = IndexPlan(21, 2, world_size=2, rank=1, num_workers=4)
    assert [rank1.worker_indices(w).tolist() for w in range(4)] == [
        [1, 9, 17],
        [3, 11, 19],
        [5, 13, 0],
        [7, 15],
    ]
    assert _epoch(rank0) == [[0, 8], [2, 10], [4, 12], [6, 14], [16], [18], [20]]
    assert _epoch(rank1) == [[1, 9], [3, 11], [5, 13], [7, 15], [17], [19], [0]]
    assert rank1.padding == 1
    assert _epoch(IndexPlan(21, 2, world_size=2, rank=1)) == [
        [1, 3],
        [5, 7],
        [9, 11],
        [13, 15],
        [17, 19],
        [0],
    ]


def test_plan_batches_depend_on_num_workers_and_zero_is_one() -> None:
    """num_workers=0 is one stream, as 1 worker; 2 workers make other batches from the same samples."""
    zero, one, two = (IndexPlan(103, 8, True, 1, num_workers=n) for n in (0, 1, 2))
    assert _epoch(zero) == _epoch(one)
    assert _epoch(zero) != _epoch(two)
    assert sorted(i for b in _epoch(two) for i in b) == list(range(103))
    assert (zero.steps, two.steps) == (13, 14)  # 52 and 51 samples: 7 batches each


def test_plan_permutation_depends_on_seed_and_epoch_only() -> None:
    """The order is the same for every rank, worker count and run, and differs between epochs and seeds."""
    a = IndexPlan(1000, 10, shuffle=True, seed=1, epoch=0, rank=0, world_size=4).order()
    b = IndexPlan(1000, 7, shuffle=True, seed=1, epoch=0, rank=3, world_size=4, num_workers=3).order()
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
def test_plan_workers_of_a_resumed_run_continue_the_streams_in_turn(num_workers: int) -> None:
    """Resumed at step 3, worker i reads steps 3 + i, 3 + i + n, ...: the rest of worker (3 + i) % n."""
    n = max(1, num_workers)
    full = IndexPlan(50, 4, num_workers=num_workers)
    resumed = IndexPlan(50, 4, start_from_step=3, num_workers=num_workers)
    owned = [list(resumed.worker_steps(i)) for i in range(n)]
    assert sorted(s for steps in owned for s in steps) == list(range(3, resumed.steps))
    for i, steps in enumerate(owned):
        assert steps == [s for s in full.worker_steps((3 + i) % n) if s >= 3]


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("start", [0, 1, 4, 5])
def test_plan_resume_is_the_tail_of_the_epoch(num_workers: int, start: int) -> None:
    """Workers of a run from start_from_step=k, taken in turn, give the uninterrupted epoch's steps from k."""
    full = IndexPlan(103, 8, True, 3, 1, False, 1, 3, num_workers=num_workers)
    resumed = IndexPlan(103, 8, True, 3, 1, False, 1, 3, start_from_step=start, num_workers=num_workers)
    assert len(full) == full.steps == (6 if num_workers == 2 else 5)  # 2 workers: 18 + 17 samples
    assert len(resumed) == full.steps - start
    workers = [
        [resumed.step_indices(s).tolist() for s in resumed.worker_steps(w)]
        for w in range(max(1, num_workers))
    ]
    assert _round_robin(workers) == _epoch(full)[start:]
    assert len(IndexPlan(103, 8, start_from_step=13)) == 0  # the end of the epoch is a valid start


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"batch_size": 0}, lc.InvalidArgumentError, "Expected batch_size >= 1. Got 0."),
        ({"batch_size": 2.5}, lc.InvalidTypeError, "Expected batch_size to be an int. Got float: 2.5."),
        ({"rank": 2, "world_size": 2}, lc.InvalidArgumentError, "Got rank=2, world_size=2"),
        ({"seed": -1}, lc.InvalidArgumentError, "Expected seed >= 0. Got -1."),
        ({"epoch": True}, lc.InvalidTypeError, "Expected epoch to be an int. Got bool: True."),
        ({"num_workers": -1}, lc.InvalidArgumentError, "Expected num_workers >= 0. Got -1."),
        (
            {"start_from_step": 14},
            lc.InvalidArgumentError,
            "which has 13 steps per rank with num_workers=0. To go on after an epoch, pass epoch=1 and "
            "start_from_step=0.",
        ),
        (
            {"start_from_step": 15, "num_workers": 2},
            lc.InvalidArgumentError,
            "has 14 steps per rank with num",
        ),
    ],
)
def test_plan_refuses_bad_arguments(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    """Bad options raise a typed error saying what was expected, what was given, and what to do."""
    options: dict[str, object] = {"length": 103, "batch_size": 8, **kwargs}
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        IndexPlan(**options)  # type: ignore[arg-type]


def test_plan_refuses_a_worker_it_does_not_have() -> None:
    """Asking for worker 2 of a 2-worker plan is an error naming the range."""
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Expected 0 <= worker < 2 \(num_workers=2\)\. Got 2\."
    ):
        IndexPlan(103, 8, num_workers=2).worker_steps(2)


@settings(max_examples=300, deadline=None)
@given(
    length=st.integers(0, 60),
    batch_size=st.integers(1, 9),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    world_size=st.integers(1, 3),
    num_workers=st.integers(0, 3),
    data=st.data(),
)
def test_plan_step_span_is_the_steps_run_or_none(
    length: int,
    batch_size: int,
    shuffle: bool,
    drop_last: bool,
    world_size: int,
    num_workers: int,
    data: st.DataObject,
) -> None:
    """step_span is the run step_indices reads when the plan is one ordered stream on one rank, else None,
    and refuses a step outside the epoch as step_indices does."""
    rank = data.draw(st.integers(0, world_size - 1))
    plan = IndexPlan(length, batch_size, shuffle, 5, 0, drop_last, rank, world_size, num_workers=num_workers)
    one_run = not shuffle and num_workers <= 1 and world_size == 1
    for step in range(plan.steps):
        span = plan.step_span(step)
        if one_run:
            assert span is not None
            assert list(range(*span)) == plan.step_indices(step).tolist()
        else:
            assert span is None
    if one_run:
        for step in (-1, plan.steps, plan.steps + 1):
            with pytest.raises(
                lc.InvalidArgumentError, match=rf"Expected 0 <= step < {plan.steps}\. Got {step}\."
            ):
                plan.step_span(step)
