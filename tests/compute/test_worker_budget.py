"""A worker's budget (`lakecompute.compute._budget.WorkerBudget`): derived once from the plan and the
placement, frozen, and what a real worker process holds: its peak resident memory, over an eval whose
input and output are each several times the budget, grows by no more than the budget's total."""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.compute._budget import PLACED_MAPPED_BYTES, WorkerBudget, budgets_here, derive_budget
from lakecompute.compute._options import EvalOptions
from tests.helpers import make_out

pytestmark = pytest.mark.timeout(300)

#: One input sample: 1 MiB of pixels (stored compressed, decoded whole).
SIDE = 1024
#: Samples: 1.5 GiB of input decoded and as much output, each worker's half several times its budget.
N = 1536
WORKERS = 2


def _status(field: str) -> int:
    """A figure of this process's ``/proc/self/status`` (``VmRSS``, ``VmHWM``), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/self/status has no {field}")


@lc.compute
def fill(sample_in: Any, sample_out: Any) -> None:
    """A number in, a SIDE x SIDE image of it out."""
    sample_out.x.append(np.full((SIDE, SIDE), int(sample_in) % 251, dtype=np.uint8))


@lc.compute
class Measured:
    """Copies its input, and writes beside each output how much this process's peak resident memory grew
    since the worker built it (the peak is reset then: ``/proc/self/clear_refs``), its budget's total, and
    the lakecompute threads alive with it."""

    def __init__(self) -> None:
        self.before = _status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS, from here on

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        value = sample_in.x.numpy()
        (budget,) = budgets_here()[-1:]
        threads = [t.name for t in threading.enumerate() if t.name.startswith("lakecompute-")]
        sample_out.y.append(value.copy())
        sample_out.grown.append(_status("VmHWM") - self.before)
        sample_out.limit.append(budget.total_bytes)
        sample_out.threads.append(len(threads))
        sample_out.allowed.append(budget.threads)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_workers_peak_memory_stays_within_its_budget(tmp_path: Path) -> None:
    source = make_out(tmp_path / "in", x={"dtype": "uint8"})
    fill().eval(list(range(N)), source, num_workers=0, progressbar=False)
    out = make_out(
        tmp_path / "out",
        y={"dtype": "uint8"},
        grown={"dtype": "int64"},
        limit={"dtype": "int64"},
        threads={"dtype": "int64"},
        allowed={"dtype": "int64"},
    )
    Measured().eval(source, out, scheduler="processed", num_workers=WORKERS, progressbar=False)

    back = lc.load(str(tmp_path / "out"))
    assert len(back.y) == N
    assert int(back.y[N - 1].numpy()[0, 0]) == (N - 1) % 251  # the copies were made and stored
    total = int(back.limit.numpy().max())
    assert total == int(back.limit.numpy().min())  # one budget, derived once per eval
    assert 3 * total <= N // WORKERS * SIDE * SIDE  # each worker reads several times its budget
    grown = back.grown.numpy()
    assert int(grown.max()) <= total, (int(grown.max()) >> 20, total >> 20)
    assert int(grown.max()) > 0
    assert (back.threads.numpy() <= back.allowed.numpy()).all()


def _options(**kw: Any) -> EvalOptions:
    fields = {f.name for f in dataclasses.fields(EvalOptions)}
    assert set(kw) <= fields
    return dataclasses.replace(EvalOptions(), **kw)


def test_the_budget_is_frozen() -> None:
    budget = derive_budget(_options(num_workers=2), 16, 1, 8, placed=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.readers = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("workers", "parallel", "cpus", "placed", "readers", "early", "helpers"),
    [
        (2, 16, 8, False, 4, False, 0),  # a share of the CPUs, at most MAX_READERS
        (2, 16, 2, False, 1, False, 0),  # at least one reader
        (1, 16, 2, False, 2, True, 0),  # a lone worker reads ahead into its next task
        (2, 1, 8, False, 1, False, 0),  # a sequence whose __getitem__ is the user's: one reader
        (2, 0, 8, False, 0, False, 0),  # input in memory: none
        (2, 16, 16, True, 4, True, 7),  # placed on a GPU: helpers decode, its share less one
    ],
)
def test_the_budget_is_derived_from_the_plan_and_the_placement(
    workers: int, parallel: int, cpus: int, placed: bool, readers: int, early: bool, helpers: int
) -> None:
    budget = derive_budget(_options(num_workers=workers), parallel, 3, cpus, placed)
    assert (budget.readers, budget.early_reads, budget.decode_helpers) == (readers, early, helpers)
    assert budget.pinned is placed
    # Placed, a worker's batches are not fresh mappings (faulted in beside the model's kernel launches).
    assert budget.mapped_bytes == (PLACED_MAPPED_BYTES if placed else 1 << 20)
    assert budget.input_blocks == 1 + readers * (2 if early else 1)
    pinned = budget.pinned_kept * budget.block_bytes if placed else 0
    assert budget.total_bytes == (
        2 * budget.input_blocks * budget.block_bytes
        + 3 * budget.block_bytes
        + 3 * budget.flush_bytes
        + budget.cache_bytes
        + pinned
        + budget.stream_task_bytes
    )
    assert isinstance(budget, WorkerBudget)
