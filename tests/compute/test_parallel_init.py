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
from tests.compute.compute_helpers import Sched, out_like


@lc.compute
class SlowModel:
    """Stands in for a model whose load takes 2 s; logs its load's start and end, and a file per call."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = Path(log_dir)
        began = time.time()
        time.sleep(2)
        where = f"{os.getpid()}-{threading.get_ident()}"
        (self.log_dir / "inits" / where).write_text(f"{began} {time.time()}")

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        (self.log_dir / "calls" / f"{sample_in}.{uuid.uuid4().hex}").touch()
        sample_out.y.append(int(sample_in) * 2)


def _run(scheduler: Sched, tmp_path: Path, n: int) -> tuple[list[tuple[float, float]], Counter[int]]:
    for sub in ("inits", "calls"):
        (tmp_path / sub).mkdir()
    out = out_like(tmp_path / "out", y={"dtype": "int64"})
    SlowModel(log_dir=str(tmp_path)).eval(list(range(n)), out, **scheduler.kw)
    assert out.y.numpy().tolist() == [2 * i for i in range(n)]
    inits = [tuple(map(float, p.read_text().split())) for p in (tmp_path / "inits").iterdir()]
    calls = Counter(int(p.name.split(".")[0]) for p in (tmp_path / "calls").iterdir())
    return sorted(inits), calls  # type: ignore[return-value]  # pairs of floats


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
    (_, first_end), (second_start, _) = inits
    assert second_start < first_end, "the second worker started loading only after the first finished"
