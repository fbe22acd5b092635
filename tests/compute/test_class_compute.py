"""Class-based compute: ``__init__`` runs once per worker (a model loads once), ``__call__`` per sample."""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

import numpy as np

import lakecompute as lc
from lakecompute.schedulers import worker_id
from tests.compute.compute_helpers import Sched, read_lines
from tests.helpers import make_out


def _where() -> str:
    """Which worker runs this: worker id, process id and thread id."""
    return f"{worker_id()} {os.getpid()} {threading.get_ident()}"


def _log(path: Path, line: str) -> None:
    # One short write per line with O_APPEND: lines from concurrent workers never interleave.
    with open(path, "a") as f:
        f.write(line + "\n")


@lc.compute
class Scale:
    """Stands in for a model: expensive to build, cheap to call."""

    def __init__(self, log_dir: str, factor: int) -> None:
        self.log_dir = Path(log_dir)
        self.factor = factor
        _log(self.log_dir / "inits", _where())

    def __call__(self, sample_in, sample_out):
        _log(self.log_dir / "calls", _where())
        _log(self.log_dir / "inputs", str(sample_in))
        sample_out.y.append(int(sample_in) * self.factor)


@lc.compute
def add_one(sample_in, sample_out):
    sample_out.y.append(int(sample_in.y.numpy()) + 1)


def test_class_compute_init_once_per_worker(scheduler: Sched, tmp_path: Path) -> None:
    """Every worker that ran tasks built the instance exactly once; the caller never does when there are
    workers (the first-sample check runs in a worker too)."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    Scale(log_dir=str(tmp_path), factor=3).eval(list(range(200)), out, **scheduler.kw)
    assert out.y.numpy().tolist() == [3 * i for i in range(200)]

    inits = Counter(read_lines(tmp_path / "inits"))
    calls = Counter(read_lines(tmp_path / "calls"))
    here = f"0 {os.getpid()} {threading.get_ident()}"
    # The preflight runs sample 0 where the tasks run and writes its output: one call per input.
    runs_tasks_here = scheduler.name == "serial"
    assert inits[here] == (1 if runs_tasks_here else 0)
    assert calls[here] == (200 if runs_tasks_here else 0)
    workers = {key: n for key, n in inits.items() if key != here}
    assert all(n == 1 for n in workers.values()), inits
    # Workers build their instance when they get their first task (a warm-up while the first worker
    # runs the preflight): each one that ran samples built it.
    assert set(workers) >= set(calls) - {here}
    assert sum(calls.values()) == 200
    assert sorted(int(x) for x in read_lines(tmp_path / "inputs")) == list(range(200))
    if not runs_tasks_here:
        assert 1 <= len(workers) <= scheduler.num_workers
        assert len({key.split()[0] for key in workers}) == len(workers)  # distinct worker ids
    if scheduler.name == "processed":
        assert all(key.split()[1] != str(os.getpid()) for key in workers)


def test_class_compute_in_a_pipeline(scheduler: Sched, tmp_path: Path) -> None:
    """A class-based step composes with a function step; its bound arguments reach ``__init__``."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    pipeline = lc.compose([Scale(log_dir=str(tmp_path), factor=5), add_one()])
    pipeline.eval(np.arange(50), out, **scheduler.kw)
    assert out.y.numpy().tolist() == [5 * i + 1 for i in range(50)]
    assert repr(pipeline) == f"Pipeline([Scale(log_dir={str(tmp_path)!r}, factor=5), add_one()])"


def test_class_compute_new_instances_per_eval(tmp_path: Path) -> None:
    """Each eval builds fresh instances: state from one run never leaks into the next."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    fn = Scale(log_dir=str(tmp_path), factor=2)
    fn.eval(list(range(10)), out, num_workers=2, scheduler="threaded", progressbar=False)
    first = len(read_lines(tmp_path / "inits"))
    fn.eval(list(range(10)), out, num_workers=2, scheduler="threaded", progressbar=False, rerun=True)
    assert len(read_lines(tmp_path / "inits")) > first
    assert out.y.numpy().tolist() == [2 * i for i in range(10)] * 2
