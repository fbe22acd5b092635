"""A class compute is built in every worker at once, and a successful eval calls it once per input."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out, touch, wait_until


@lc.compute
class SlowModel:
    """Stands in for a model whose load takes a while: a load is under way until every load the eval is
    expected to start (``loads``) has begun, or 30 s have passed. Logs each load's start, its end and how
    many loads had begun by then, and a file per call."""

    def __init__(self, log_dir: str, loads: int) -> None:
        self.log_dir = Path(log_dir)
        where = f"{os.getpid()}-{threading.get_ident()}"
        began = time.time()
        touch(self.log_dir / "began" / where)
        try:
            wait_until(lambda: len(list((self.log_dir / "began").iterdir())) >= loads, 30, f"{loads} loads")
        except AssertionError:
            pass  # the loads ran one after another: the log says so, and the test fails on it
        seen = len(list((self.log_dir / "began").iterdir()))
        (self.log_dir / "inits" / where).write_text(f"{began} {time.time()} {seen}")

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        (self.log_dir / "calls" / f"{sample_in}.{uuid.uuid4().hex}").touch()
        sample_out.y.append(int(sample_in) * 2)


def _run(scheduler: Sched, tmp_path: Path, n: int) -> tuple[list[tuple[float, float, float]], Counter[int]]:
    for sub in ("began", "inits", "calls"):
        (tmp_path / sub).mkdir()
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    loads = 1 if scheduler.name == "serial" else 2
    SlowModel(log_dir=str(tmp_path), loads=loads).eval(list(range(n)), out, **scheduler.kw)
    assert out.y.numpy().tolist() == [2 * i for i in range(n)]
    inits = [tuple(map(float, p.read_text().split())) for p in (tmp_path / "inits").iterdir()]
    calls = Counter(int(p.name.split(".")[0]) for p in (tmp_path / "calls").iterdir())
    return sorted(inits), calls  # type: ignore[return-value]  # triples of floats


@pytest.mark.timeout(120)
def test_models_load_at_once_and_each_input_runs_once(scheduler: Sched, tmp_path: Path) -> None:
    """With 2 workers both loads overlap (the second starts before the first ends); every input is
    computed exactly once, the first-sample check included."""
    inits, calls = _run(scheduler, tmp_path, 200)
    assert calls == Counter(range(200))
    if scheduler.name == "serial":
        assert len(inits) == 1  # everything runs in the caller: one instance
        return
    assert len(inits) == 2, inits
    (_, first_end, first_saw), (second_start, _, second_saw) = inits
    assert (first_saw, second_saw) == (2, 2), "a load ended before the other began: they ran one at a time"
    assert second_start < first_end, "the second worker started loading only after the first finished"
