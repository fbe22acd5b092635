"""Seeded randomness: the same numbers for any scheduler, worker count, task size and after a resume."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.compute.random_pipeline import PIPELINE, pipeline_out
from tests.helpers import make_out, wait_until
from tests.procs import wait_session_empty
from tests.reliability.reliability_helpers import kill_session, script_env

SCRIPT = Path(__file__).resolve().parent / "random_script.py"
N = 60


def _values(path: Path) -> tuple[list[float], list[int]]:
    ds = lc.load(str(path))
    return ds.v.numpy().tolist(), ds.draw.numpy().tolist()


def _reference(tmp_path: Path, seed: int) -> tuple[list[float], list[int]]:
    path = tmp_path / f"reference-{seed}"
    PIPELINE.eval(list(range(N)), pipeline_out(str(path)), num_workers=0, seed=seed, progressbar=False)
    return _values(path)


def test_rng_is_the_documented_derivation(tmp_path: Path) -> None:
    """Stage k's rng for row j of input i is Generator(PCG64(SeedSequence(seed, spawn_key=(i, k, j))))."""
    v, draw = _reference(tmp_path, seed=7)

    def gen(*key: int) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(7, spawn_key=key)))

    first = gen(3, 0, 0).random()  # input 3, stage 0: its two rows' draws, in order
    second = gen(3, 0, 0)
    second.random()
    rows = [3 + first, 3 + second.random()]
    for j, row in enumerate(rows):  # stage 1 runs once per row, with row number j
        g = gen(3, 1, j)
        assert v[6 + j] == row * g.uniform(1, 2)
        assert draw[6 + j] == int(g.integers(1 << 30))


@pytest.mark.parametrize("interval", [0, 7])
def test_rng_output_is_identical_everywhere(scheduler: Sched, tmp_path: Path, interval: int) -> None:
    """Every scheduler and worker count, with any task size, writes bit-identical values."""
    out = pipeline_out(str(tmp_path / "out"))
    result = PIPELINE.eval(list(range(N)), out, seed=11, checkpoint_interval=interval, **scheduler.kw)
    assert result.seed == 11
    assert _values(tmp_path / "out") == _reference(tmp_path, seed=11)
    draws = _values(tmp_path / "out")[1]
    assert len(set(draws)) == len(draws) == 2 * N  # no two rows share a stream


def test_seed_none_is_drawn_reported_and_reproducible(tmp_path: Path) -> None:
    """seed=None draws a seed, reports it in the result and the version's log, and it reproduces the run."""
    result = PIPELINE.eval(
        list(range(N)), pipeline_out(str(tmp_path / "a")), num_workers=0, progressbar=False
    )
    assert isinstance(result.seed, int)
    log = lc.load(str(tmp_path / "a")).log()
    entry = log[-1]["eval"]
    assert {k: entry[k] for k in ("label", "status", "done", "seed")} == {
        "label": "noisy_pair → scaled",
        "status": "done",
        "done": N,
        "seed": result.seed,
    }
    assert entry["functions"] == [
        "noisy_pair",
        "scaled",
    ]  # and its lineage (see tests/dataset/test_lineage.py)
    assert _values(tmp_path / "a") == _reference(tmp_path, seed=result.seed)
    other = PIPELINE.eval(list(range(N)), pipeline_out(str(tmp_path / "b")), num_workers=0, progressbar=False)
    assert other.seed != result.seed
    assert _values(tmp_path / "b") != _values(tmp_path / "a")


@pytest.mark.slow
@pytest.mark.parametrize("seed", ["5", "none"])
def test_rng_output_is_identical_after_kill_and_resume(tmp_path: Path, seed: str) -> None:
    """SIGKILL a 2-worker run after some checkpoints; the resumed run ends as an unbroken one, bit for bit."""
    path = tmp_path / "out"
    pipeline_out(str(path))
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(path), str(N), seed],
        env=script_env(LC_TEST_SLEEP="0.02"),
        start_new_session=True,
    )
    try:
        # Versions: create, two tensors, then checkpoints at 10 and 20 inputs.
        wait_until(
            lambda: len(lc.load(str(path)).log()) >= 5 or proc.poll() is not None, what="2 checkpoints"
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert wait_session_empty(proc.pid, timeout=10) == []
    finally:
        kill_session(proc.pid)
    resumed = PIPELINE.eval(list(range(N)), lc.load(str(path)), num_workers=0, checkpoint_interval=10,
                            seed=None if seed == "none" else int(seed), progressbar=False)  # fmt: skip
    assert 0 < resumed.resumed_from < N
    assert _values(path) == _reference(tmp_path, seed=resumed.seed)
    if seed != "none":
        assert resumed.seed == int(seed)


@lc.compute
def global_draws(sample_in: Any, sample_out: Any) -> None:
    """Code that ignores rng and draws from numpy's and Python's global generators."""
    sample_out.append({"np": float(np.random.random()), "py": random.random()})


def test_global_generators_never_repeat_across_workers(tmp_path: Path) -> None:
    """Forked workers reseed numpy's and Python's global generators: 400 draws, 400 distinct values."""
    np.random.seed(0)
    random.seed(0)
    out = make_out(tmp_path / "out", np={"dtype": "float64"}, py={"dtype": "float64"})
    global_draws().eval(list(range(400)), out, num_workers=2, scheduler="processed", progressbar=False)
    again = lc.load(str(tmp_path / "out"))
    assert len(set(again.np.numpy().tolist())) == 400
    assert len(set(again.py.numpy().tolist())) == 400
