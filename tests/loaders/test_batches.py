"""ds.batches(): values, views, sharding, shuffling, resume, workers, transforms and errors."""

from __future__ import annotations

import importlib
import os
import signal
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.loaders import IndexPlan
from tests.helpers import wait_until
from tests.loaders.conftest import fails_on_30

# The package, not the decorator of the same name that `lakecompute.compute` means.
COMPUTE = importlib.import_module("lakecompute.compute")

N = 103


def _idx(batches: Any) -> list[list[int]]:
    return [b["idx"].tolist() for b in batches]


def test_batches_yield_dicts_of_numpy_arrays_and_lists(numbered: lc.Dataset) -> None:
    """Each batch maps tensor names to stacked arrays, or lists for ragged and text tensors."""
    batches = numbered.batches(10)
    assert len(batches) == 11
    first = next(batches)
    assert first["idx"].tolist() == list(range(10))
    assert first["idx"].dtype == np.int64
    assert first["img"].shape == (10, 4, 4)
    assert first["img"].dtype == np.uint8
    assert [a.tolist() for a in first["rag"][:3]] == [[0], [1, 1], [2, 2, 2]]
    assert first["txt"][:2] == ["s0", "s1"]
    rest = list(batches)
    assert len(rest) == 10
    assert rest[-1]["idx"].tolist() == [100, 101, 102]


def test_batches_of_views_index_the_view(numbered: lc.Dataset) -> None:
    """ds[10:50] and ds[[3, 1, 7]] give their own samples, in the view's order."""
    assert _idx(numbered[10:50].batches(16)) == [
        list(range(10, 26)),
        list(range(26, 42)),
        list(range(42, 50)),
    ]
    assert _idx(numbered[[3, 1, 7]].batches(2, tensors="idx")) == [[3, 1], [7]]
    shuffled = sorted(i for b in _idx(numbered[::2].batches(8, shuffle=True)) for i in b)
    assert shuffled == list(range(0, N, 2))


def test_batches_read_only_the_tensors_asked_for(numbered: lc.Dataset) -> None:
    """tensors= limits the batch to those tensors; an unknown name is an error listing the known ones."""
    assert set(next(numbered.batches(4, tensors=["idx", "txt"]))) == {"idx", "txt"}
    with pytest.raises(lc.TensorDoesNotExistError, match="nope"):
        numbered.batches(4, tensors=["nope"])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_shuffle_is_shared_by_ranks_and_new_each_epoch(
    numbered: lc.Dataset, num_workers: int
) -> None:
    """Ranks read the plan's batches of one shared permutation, every index once but the wrapped-around
    first one; another epoch has another order."""

    options: dict[str, Any] = {"shuffle": True, "seed": 4, "world_size": 2, "num_workers": num_workers}

    def epoch_of(epoch: int) -> list[list[list[int]]]:
        ranks = [_idx(numbered.batches(8, **options, epoch=epoch, rank=r)) for r in range(2)]
        for rank, batches in enumerate(ranks):
            plan = IndexPlan(N, 8, True, 4, epoch, False, rank, 2, num_workers=num_workers)
            assert batches == [plan.step_indices(s).tolist() for s in range(plan.steps)]
        return ranks

    e0, e1 = epoch_of(0), epoch_of(1)
    read = sorted(i for rank in e0 for b in rank for i in b)
    order = IndexPlan(N, 8, True, 4, 0).order()
    assert order is not None
    assert read == sorted([*range(N), int(order[0])])  # the padding wraps around to the start of the order
    assert len(e0[0]) == len(e0[1])
    assert e0 != e1
    assert {i for rank in e1 for b in rank for i in b} == set(range(N))
    assert epoch_of(0) == e0


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("start", [4, 5])
def test_batches_resume_equals_the_tail_of_an_uninterrupted_run(
    numbered: lc.Dataset, num_workers: int, start: int
) -> None:
    """start_from_step=k yields the uninterrupted run's batches from k, with the same num_workers."""
    options: dict[str, Any] = {
        "shuffle": True, "seed": 9, "epoch": 3, "rank": 1, "world_size": 3, "num_workers": num_workers,
    }  # fmt: skip
    full = [b["img"] for b in numbered.batches(5, **options)]
    tail = [b["img"] for b in numbered.batches(5, start_from_step=start, **options)]
    assert len(tail) == len(full) - start
    for a, b in zip(full[start:], tail, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_resume_never_reads_skipped_samples(
    numbered: lc.Dataset, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, num_workers: int
) -> None:
    """Resuming reads only the indices of the steps it yields, in this process or in the (forked) workers."""
    from lakecompute.datasets import RowReader

    log = tmp_path / "reads.txt"
    original = RowReader.read_rows

    def spy(self: Any, positions: np.ndarray) -> dict[str, Any]:
        # Every loader reads its samples through a RowReader; over a whole dataset the positions are
        # the epoch's indices.
        with log.open("a") as f:  # a file: forked workers inherit the spy, not the test's memory
            f.write(f"{os.getpid()} {' '.join(map(str, np.asarray(positions).tolist()))}\n")
        return original(self, positions)

    monkeypatch.setattr(RowReader, "read_rows", spy)
    plan = IndexPlan(N, 10, shuffle=True, seed=1, start_from_step=7, num_workers=num_workers)
    batches = _idx(numbered.batches(10, shuffle=True, seed=1, start_from_step=7, num_workers=num_workers))
    assert batches == [plan.step_indices(s).tolist() for s in range(7, plan.steps)]
    reads: dict[str, list[list[int]]] = {}
    for line in log.read_text().splitlines():
        pid, *indices = line.split(" ")
        reads.setdefault(pid, []).append([int(i) for i in indices])
    assert 1 <= len(reads) <= max(1, num_workers)
    # Every yielded step's samples were read once, by one reader, and nothing else: a worker reads
    # whichever step it is handed next (a step's samples do not depend on who reads it).
    assert sorted(r for per_reader in reads.values() for r in per_reader) == sorted(batches)
    # Each reader took its steps in order.
    for per_reader in reads.values():
        steps = [batches.index(r) for r in per_reader]
        assert steps == sorted(steps)
    assert sum(len(b) for b in batches) == N - 70  # steps 0-6 are 7 full batches of 10 with 0 or 2 workers


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_batches_with_workers_follow_the_plan(numbered: lc.Dataset, num_workers: int) -> None:
    """Worker processes yield the plan's batches for their count, in order, with every tensor's values."""
    plan = IndexPlan(N, 7, True, 2, drop_last=True, num_workers=num_workers)
    batches = list(numbered.batches(7, shuffle=True, seed=2, drop_last=True, num_workers=num_workers))
    # Each worker leaves out its own short batch: 3 workers keep 5 + 4 + 4 of 35, 34 and 34 samples.
    assert len(batches) == plan.steps == (13 if num_workers == 3 else 14)
    for step, batch in enumerate(batches):
        idx = plan.step_indices(step).tolist()
        assert batch["idx"].tolist() == idx
        np.testing.assert_array_equal(batch["img"][:, 0, 0], np.array(idx) % 256)
        assert batch["txt"] == [f"s{i}" for i in idx]
        assert [x.tolist() for x in batch["rag"]] == [[i] * (i % 3 + 1) for i in idx]


def test_batches_with_no_workers_equal_one_worker(numbered: lc.Dataset) -> None:
    """num_workers=0 reads in this process the batches one worker process reads."""
    options: dict[str, Any] = {"shuffle": True, "seed": 6, "world_size": 2, "rank": 1}
    assert _idx(numbered.batches(9, **options)) == _idx(numbered.batches(9, num_workers=1, **options))


def _draw_global(batch: dict[str, Any]) -> dict[str, Any]:
    return {**batch, "draw": np.random.random(len(batch["idx"]))}


def test_batches_workers_never_repeat_numpy_global_draws(numbered: lc.Dataset) -> None:
    """Code drawing from np.random in a transform gets different values in every worker."""
    draws = np.concatenate([b["draw"] for b in numbered.batches(4, transform=_draw_global, num_workers=2)])
    assert len(draws) == N
    assert len(set(draws.tolist())) == N


def _double(batch: dict[str, Any]) -> dict[str, Any]:
    return {"idx": batch["idx"] * 2}


def test_batches_apply_a_callable_transform_to_each_batch(numbered: lc.Dataset) -> None:
    """A plain callable gets the batch dict and returns the new one, in workers too."""
    doubled = _idx(numbered.batches(50, transform=_double, num_workers=2))
    assert doubled[2:] == [[200, 204], [202]]  # worker 0's second batch, then worker 1's
    assert sorted(i for b in doubled for i in b) == list(range(0, 2 * N, 2))
    with pytest.raises(lc.InvalidTypeError, match=r"must return the batch as a dict\. Got list"):
        next(numbered.batches(5, transform=lambda b: [b]))
    with pytest.raises(lc.InvalidTypeError, match="Expected transform= to be a compute function"):
        numbered.batches(5, transform=3)


class _FakeRunner:
    """Stands in for the engine's SampleRunner: records how it is called, returns one row per sample."""

    built: ClassVar[list[int]] = []

    def __init__(self, transform: Any, seed: int) -> None:
        self.seed = seed
        _FakeRunner.built.append(os.getpid())

    def run(
        self, values: dict[str, Any], index: int, key: tuple[int, ...], meta: tuple[Any, ...] = ()
    ) -> list[dict[str, Any]]:
        assert [m.name for m in meta] == list(values)  # the tensors read, whose htype and info rows answer
        rng = np.random.default_rng([self.seed, index, *key])
        rows = [{"idx": values["idx"], "noise": rng.random(), "pid": os.getpid()}]
        return rows * (2 if values["idx"] == 5 else 1) if values["idx"] != 6 else []


@lc.compute
def _noop(sample_in: Any, sample_out: Any) -> None:
    sample_out.append({"idx": sample_in.idx.numpy()})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_run_compute_transforms_per_sample_with_the_seed_index_and_epoch(
    numbered: lc.Dataset, monkeypatch: pytest.MonkeyPatch, num_workers: int
) -> None:
    """A compute transform runs through one SampleRunner per worker, once per sample with its index
    and key (epoch,); 0, 1 or 2 rows per sample make the batch."""
    monkeypatch.setattr(COMPUTE, "SampleRunner", _FakeRunner, raising=False)
    batches = list(numbered[:12].batches(4, seed=3, epoch=2, transform=_noop(), num_workers=num_workers))
    expected_idx = {
        0: [[0, 1, 2, 3], [4, 5, 5, 7], [8, 9, 10, 11]],
        2: [[0, 2, 4], [1, 3, 5, 5, 7], [8, 10], [9, 11]],  # worker 0: 0, 2, 4, 6, ...; worker 1: 1, 3, ...
    }[num_workers]
    assert [b["idx"].tolist() for b in batches] == expected_idx
    with_five = next(b for b in batches if 5 in b["idx"].tolist())
    expected = [np.random.default_rng([3, i, 2]).random() for i in with_five["idx"].tolist()]
    assert with_five["noise"].tolist() == expected
    pids = {p for b in batches for p in b["pid"].tolist()}
    assert 1 <= len(pids) <= max(1, num_workers)  # any worker may read any step
    if num_workers == 0:
        assert _FakeRunner.built.count(os.getpid()) == 1  # built once, lazily, for the whole run


def test_batches_compute_transform_draws_are_the_same_for_any_workers(numbered: lc.Dataset) -> None:
    """A random compute transform gives identical batches for 0 and 2 workers, new draws each epoch."""

    @lc.compute
    def jitter(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
        sample_out.append({"idx": sample_in.idx.numpy(), "noise": rng.random()})

    def draws(**options: Any) -> dict[int, float]:
        batches = list(numbered.batches(8, shuffle=True, transform=jitter(), **options))
        return {i: x for b in batches for i, x in zip(b["idx"].tolist(), b["noise"].tolist(), strict=True)}

    a, b, c = draws(num_workers=0), draws(num_workers=2), draws(epoch=1)
    assert len(a) == N
    assert a == b  # batches differ with the worker count; each sample's draw does not
    assert set(a.values()).isdisjoint(c.values())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_compute_transform_failure_names_the_sample(numbered: lc.Dataset, num_workers: int) -> None:
    """A compute transform failing in a worker raises TransformError with the sample's index and cause."""
    with pytest.raises(lc.TransformError, match=r"'fails_on_30' failed on data_in\[30\]") as info:
        list(numbered.batches(8, tensors="idx", transform=fails_on_30(), num_workers=num_workers))
    assert info.value.index == 30
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "no 30"


def _raise_on_30(batch: dict[str, Any]) -> dict[str, Any]:
    if 30 in batch["idx"].tolist():
        raise KeyError("boom at 30")
    return batch


def test_batches_raise_a_worker_error_as_itself(numbered: lc.Dataset) -> None:
    """An exception in a worker reaches the caller with its type, message and the worker's traceback."""
    batches = numbered.batches(10, transform=_raise_on_30, num_workers=2)
    assert len([next(batches) for _ in range(2)]) == 2
    with pytest.raises(KeyError, match="boom at 30") as info:
        next(batches)  # step 2: samples 20, 22, ..., 38
    notes = [note for note in info.value.__notes__ if note.startswith("Traceback in the worker process:")]
    assert len(notes) == 1
    assert "_raise_on_30" in notes[0]


def _die_on_step_two(batch: dict[str, Any]) -> dict[str, Any]:
    if 20 in batch["idx"].tolist():
        os.kill(os.getpid(), signal.SIGKILL)
    return batch


def test_batches_report_a_dead_worker(numbered: lc.Dataset) -> None:
    """A worker killed while reading is a WorkerDiedError within moments, never a hang."""
    batches = numbered.batches(10, transform=_die_on_step_two, num_workers=2)
    with pytest.raises(
        lc.WorkerDiedError, match=r"died with signal SIGKILL while running task loader step 2 "
    ) as info:
        list(batches)
    assert info.value.exitcode == -signal.SIGKILL
    assert info.value.task.step == 2


def test_batches_close_stops_the_workers(numbered: lc.Dataset) -> None:
    """Leaving a `with` block early stops the worker processes and ends the pass: the next one is the
    following epoch, from its start."""
    import multiprocess

    with numbered.batches(2, num_workers=2) as batches:
        next(batches)
        assert len(multiprocess.active_children()) == 2
    assert multiprocess.active_children() == []
    assert (batches.state_dict()["epoch"], batches.state_dict()["step"]) == (1, 0)


def test_batches_garbage_collected_stops_the_workers(numbered: lc.Dataset) -> None:
    """A batch iterator dropped before its end stops its worker processes when it is collected."""
    import gc

    import multiprocess

    batches = numbered.batches(2, num_workers=2)
    next(batches)
    assert len(multiprocess.active_children()) == 2
    del batches
    gc.collect()
    assert multiprocess.active_children() == []


def _log_step(log: str) -> Any:
    def log_step(batch: dict[str, Any]) -> dict[str, Any]:
        with open(log, "a") as f:  # a file: the workers' memory is their own
            f.write(f"{os.getpid()} {batch['idx'][0]}\n")
        return batch

    return log_step


@pytest.mark.parametrize(("num_workers", "prefetch"), [(1, 1), (2, 2)])
def test_batches_read_at_most_num_workers_times_prefetch_ahead(
    numbered: lc.Dataset, tmp_path: Path, num_workers: int, prefetch: int
) -> None:
    """While the consumer holds its first batch the workers read num_workers * prefetch batches ahead,
    and never more than that ahead of the batches taken (memory stays bounded whatever the size)."""
    log = tmp_path / "steps.txt"
    ahead = num_workers * prefetch

    def read() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    with numbered.batches(5, transform=_log_step(str(log)), num_workers=num_workers, prefetch=prefetch) as it:
        steps = len(it)
        next(it)
        wait_until(lambda: read() >= 1 + ahead, what=f"{ahead} batches read ahead")
        time.sleep(0.5)  # time for a read past the bound to show; none may
        assert read() == 1 + ahead
        # Nothing is handed to the workers while the consumer holds a batch: the bound holds exactly.
        for taken, _ in enumerate(it, start=2):
            assert read() <= taken + ahead
    assert read() == steps  # every step read once


def test_batches_workers_open_the_source_once(
    numbered: lc.Dataset, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each loader worker opens the source once for the whole run, not once per batch."""
    from lakecompute.loaders import RowSource

    log = tmp_path / "opens.txt"
    original = RowSource.open

    def spy(self: Any) -> Any:
        with log.open("a") as f:  # a file: forked workers inherit the spy, not the test's memory
            f.write(f"{os.getpid()}\n")
        return original(self)

    monkeypatch.setattr(RowSource, "open", spy)
    assert len(_idx(numbered.batches(5, num_workers=2))) == 22  # 52 and 51 samples: 11 batches each
    opens = log.read_text().splitlines()
    assert 1 <= len(opens) <= 2
    assert len(set(opens)) == len(opens)
    assert str(os.getpid()) not in opens


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_workers": -1}, lc.InvalidArgumentError, "Expected num_workers >= 0. Got -1."),
        ({"prefetch": 0}, lc.InvalidArgumentError, "Expected prefetch >= 1. Got 0."),
        ({"rank": 3}, lc.InvalidArgumentError, "Expected 0 <= rank < world_size. Got rank=3, world_size=1."),
        ({"tensors": []}, lc.InvalidArgumentError, "tensors= is empty"),
    ],
)
def test_batches_refuse_bad_options_at_the_call(
    numbered: lc.Dataset, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Bad options fail when batches() is called, not at the first batch."""
    with pytest.raises(error, match=message):
        numbered.batches(4, **kwargs)
