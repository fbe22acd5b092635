"""A batched eval runs the other workers' first batches beside the preflight's, and keeps them when an
ordinary task would have written the same: the outputs are those of an eval without speculation — each
input written once, in order, the function called once per input, failures reported at their input."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out, touch, wait_until

PARALLEL = [Sched("threaded", 2), Sched("processed", 2)]
BATCH = 4
N = 24


def _log(log_dir: str, batch: list[int]) -> None:
    """A file per call: ``calls/<first input>.<unique>``; a file ``began/<first input>`` too."""
    touch(Path(log_dir) / "calls" / f"{batch[0]}.{uuid.uuid4().hex}")
    touch(Path(log_dir) / "began" / str(batch[0]))


def _calls(tmp_path: Path) -> Counter[int]:
    return Counter(int(p.name.split(".")[0]) for p in (tmp_path / "calls").iterdir())


@lc.compute
def waits_for_the_second_batch(batch: list[int], sample_out: Any, log_dir: str) -> None:
    """Batch 0 (the preflight's) waits until batch 1 has begun, or 30 s, and writes down whether it did."""
    _log(log_dir, batch)
    if batch[0] == 0:
        second = Path(log_dir) / "began" / str(BATCH)
        try:
            wait_until(second.exists, 30, "the second batch to begin")
        except AssertionError:
            pass  # it began only after this batch: the test fails on the file below
        (Path(log_dir) / "saw").write_text(str(second.exists()))
    sample_out.y.extend([2 * v for v in batch])


@lc.compute
def first_batch_writes_more(batch: list[int], sample_out: Any, log_dir: str) -> None:
    """Every batch writes ``y``; only the first also writes ``z`` (so the second decides otherwise)."""
    _log(log_dir, batch)
    sample_out.y.extend(batch)
    if batch[0] == 0:
        sample_out.z.extend([-v for v in batch])


@lc.compute
def first_batch_writes_nothing(batch: list[int], sample_out: Any, log_dir: str) -> None:
    """A filter that drops the whole first batch: the preflight reads on into the second to decide."""
    _log(log_dir, batch)
    if batch[0] != 0:
        sample_out.y.extend(batch)


@lc.compute
def fails_at(batch: list[int], sample_out: Any, log_dir: str, bad: int) -> None:
    """Raises on the batch that holds input ``bad``."""
    _log(log_dir, batch)
    if bad in batch:
        raise ValueError(f"input {bad} is bad")
    sample_out.y.extend(batch)


def _setup(tmp_path: Path, **tensors: dict[str, Any]) -> lc.Dataset:
    (tmp_path / "calls").mkdir()
    (tmp_path / "began").mkdir()
    return make_out(tmp_path / "out", **(tensors or {"y": {"dtype": "int64"}}))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheduler", PARALLEL, ids=str)
def test_second_batch_runs_beside_the_preflight(scheduler: Sched, tmp_path: Path) -> None:
    """The second worker's first batch begins while the preflight's batch still runs, and every batch
    runs once."""
    out = _setup(tmp_path)
    fn = waits_for_the_second_batch(log_dir=str(tmp_path))
    result = fn.eval(list(range(N)), out, batch_size=BATCH, **scheduler.kw)
    assert (tmp_path / "saw").read_text() == "True", "the second batch waited for the preflight's to end"
    assert out.y.numpy().tolist() == [2 * i for i in range(N)]
    assert result.inputs == N
    assert _calls(tmp_path) == Counter(range(0, N, BATCH))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheduler", PARALLEL, ids=str)
def test_a_batch_that_writes_fewer_tensors_stands(scheduler: Sched, tmp_path: Path) -> None:
    """The second batch writes fewer tensors than the first (so it decided otherwise): its ranks agree,
    so it is kept, and every batch runs once."""
    out = _setup(tmp_path, y={"dtype": "int64"}, z={"dtype": "int64"})
    fn = first_batch_writes_more(log_dir=str(tmp_path))
    result = fn.eval(list(range(N)), out, batch_size=BATCH, skip_ok=True, **scheduler.kw)
    assert out.y.numpy().tolist() == list(range(N))
    assert out.z.numpy().tolist() == [-i for i in range(BATCH)]
    assert result.outputs == {"y": N, "z": BATCH}
    assert _calls(tmp_path) == Counter(range(0, N, BATCH))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheduler", PARALLEL, ids=str)
def test_a_first_batch_that_writes_nothing_lets_the_next_decide(scheduler: Sched, tmp_path: Path) -> None:
    """The preflight's first batch writes nothing: the batch run beside it decides, and every batch
    runs once."""
    out = _setup(tmp_path)
    fn = first_batch_writes_nothing(log_dir=str(tmp_path))
    result = fn.eval(list(range(N)), out, batch_size=BATCH, skip_ok=True, **scheduler.kw)
    assert out.y.numpy().tolist() == list(range(BATCH, N))
    assert result.inputs == N
    assert _calls(tmp_path) == Counter(range(0, N, BATCH))


@lc.compute
def rank_changes(batch: list[int], sample_out: Any, log_dir: str) -> None:
    """The first batch writes vectors, the others scalars: a rank the first outputs did not decide."""
    _log(log_dir, batch)
    if batch[0] == 0:
        sample_out.y.extend([[v, v] for v in batch])
    else:
        sample_out.y.extend(batch)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheduler", [*PARALLEL, Sched("serial", 0)], ids=str)
def test_a_rank_that_differs_fails_at_the_second_batch(scheduler: Sched, tmp_path: Path) -> None:
    """The second batch writes another rank than the first: the eval fails at its first input with the
    error an eval without speculation gives, and nothing is written."""
    out = _setup(tmp_path)
    fn = rank_changes(log_dir=str(tmp_path))
    with pytest.raises(lc.TransformError, match="number of dimensions: expected 1, got 0") as caught:
        fn.eval(list(range(N)), out, batch_size=BATCH, **scheduler.kw)
    assert caught.value.index == BATCH
    assert len(lc.load(str(tmp_path / "out"), read_only=True).y) == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheduler", PARALLEL, ids=str)
@pytest.mark.parametrize("interval", [0, BATCH], ids=["no-checkpoints", "checkpoints"])
def test_a_failing_speculative_batch_fails_the_eval_at_its_input(
    scheduler: Sched, interval: int, tmp_path: Path
) -> None:
    """A failure in the second batch (run beside the preflight) is the eval's TransformError at that
    input, and with checkpoints the batch before it is kept, as without speculation."""
    out = _setup(tmp_path)
    fn = fails_at(log_dir=str(tmp_path), bad=BATCH + 1)
    with pytest.raises(lc.TransformError, match="input 5 is bad") as caught:
        fn.eval(list(range(N)), out, batch_size=BATCH, checkpoint_interval=interval, **scheduler.kw)
    assert caught.value.index == BATCH  # a batch fails at its first input
    kept = lc.load(str(tmp_path / "out"), read_only=True)
    assert kept.y.numpy().tolist() == (list(range(BATCH)) if interval else [])


@lc.compute
def writes_from(batch: list[int], sample_out: Any, log_dir: str, first: int, scalars_from: int) -> None:
    """Writes nothing before input ``first``, then vectors, and scalars from input ``scalars_from``."""
    _log(log_dir, batch)
    if batch[0] >= first:
        sample_out.y.extend([[v, v] for v in batch] if batch[0] < scalars_from else batch)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheduler", PARALLEL, ids=str)
def test_when_no_first_batch_writes_the_scan_goes_on(scheduler: Sched, tmp_path: Path) -> None:
    """Neither the preflight's batch nor the one beside it writes: the scan goes on as without
    speculation, so the first batch that writes decides, each batch runs once, and a later rank that
    differs fails at its input (not at the commit)."""
    out = _setup(tmp_path)
    fn = writes_from(log_dir=str(tmp_path), first=2 * BATCH, scalars_from=N)
    fn.eval(list(range(N)), out, batch_size=BATCH, skip_ok=True, **scheduler.kw)
    assert out.y.numpy().tolist() == [[v, v] for v in range(2 * BATCH, N)]
    assert _calls(tmp_path) == Counter(range(0, N, BATCH))
    (tmp_path / "again").mkdir()
    again = _setup(tmp_path / "again")
    failing = writes_from(log_dir=str(tmp_path / "again"), first=2 * BATCH, scalars_from=4 * BATCH)
    with pytest.raises(lc.TransformError, match=r"failed on data_in\[16\].*expected 1, got 0") as caught:
        failing.eval(list(range(N)), again, batch_size=BATCH, skip_ok=True, **scheduler.kw)
    assert caught.value.index == 4 * BATCH


@lc.compute
def embed(batch: list[int], sample_out: Any) -> None:
    """512 floats per input (2 KiB): the tail-chunk floor sizes the tasks."""
    sample_out.e.extend(np.repeat(np.asarray(batch, dtype=np.float32)[:, None], 512, axis=1))


def test_the_tasks_after_the_speculative_batches_split_evenly(tmp_path: Path) -> None:
    """Eight batches on two workers: after the preflight's and the speculative batch, the six left are
    tasks of one size, as many for each worker (not three tasks of two batches: one worker would run
    two of them while the other waits)."""
    out = make_out(tmp_path / "out", e={"dtype": "float32"})
    embed().eval(list(range(8 * 64)), out, batch_size=64, **Sched("processed", 2).kw)
    back = lc.load(str(tmp_path / "out"))
    assert back.e.numpy()[:, 0].tolist() == list(range(8 * 64))
    fragments = dataset_core(back).txn.head.tensors["e"].fragments
    sizes = [f.n for f in fragments]
    assert sum(sizes) == 8 * 64
    assert sizes[:2] == [64, 64]  # the preflight's batch and the one beside it
    assert len(set(sizes[2:])) == 1, sizes
    assert len(sizes[2:]) % 2 == 0, sizes
