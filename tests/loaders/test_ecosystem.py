"""Loaders in the training ecosystem, each in real processes: Lightning DDP (2 CPU ranks on gloo) and
Accelerate (one process, and two under torchrun) (issue 18)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = 24


def _dataset(tmp_path: Path) -> str:
    ds = lc.empty(str(tmp_path / "ds"))
    with ds:
        ds.create_tensor("idx", dtype="int64")
        ds.idx.extend(np.arange(SAMPLES))
    return ds.path


def _run(args: list[str], cwd: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MASTER_PORT": str(free_port()),
        "MASTER_ADDR": "127.0.0.1",
    }
    run = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=500, check=False
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]


def _seen(out: Path, phase: str, rank: int) -> list[tuple[int, list[int]]]:
    return [(epoch, idx) for epoch, idx in json.loads((out / f"{phase}-rank{rank}.json").read_text())]


def _epochs(seen: list[tuple[int, list[int]]]) -> dict[int, list[int]]:
    by_epoch: dict[int, list[int]] = {}
    for epoch, idx in seen:
        by_epoch.setdefault(epoch, []).extend(idx)
    return by_epoch


@pytest.mark.slow
@pytest.mark.needs("pytorch_lightning")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("where", ["module", "before"])
def test_lightning_ddp_shards_reshuffles_and_resumes_exactly(tmp_path: Path, where: str) -> None:
    """Lightning 2-rank DDP, the loader built in train_dataloader() or before fit() (before the process
    group exists): every epoch the ranks' shares are disjoint, equal and cover the dataset; the order
    changes between epochs; a mid-epoch checkpoint resumed in new processes trains exactly on what the
    uninterrupted run trained on from there."""
    path = _dataset(tmp_path)
    script = str(ROOT / "tests" / "loaders" / "lightning_run.py")
    for phase in ("full", "stop", "resume"):
        _run([script, path, str(tmp_path), phase, where], tmp_path)
    full = [_seen(tmp_path, "full", rank) for rank in range(2)]
    for epoch in (0, 1):
        shares = [_epochs(full[rank])[epoch] for rank in range(2)]
        assert len(shares[0]) == len(shares[1]) == SAMPLES // 2
        assert sorted(shares[0] + shares[1]) == list(range(SAMPLES))
    assert _epochs(full[0])[0] != _epochs(full[0])[1]
    for rank in range(2):
        stopped, resumed = _seen(tmp_path, "stop", rank), _seen(tmp_path, "resume", rank)
        assert len(stopped) == 2
        assert stopped + resumed == full[rank]


def _accelerate(tmp_path: Path, path: str, phase: str, processes: int, *extra: str) -> None:
    script = str(ROOT / "tests" / "loaders" / "accelerate_run.py")
    args = [script, path, str(tmp_path), phase, *extra]
    if processes > 1:
        args = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
                str(free_port()), *args]  # fmt: skip
    _run(args, tmp_path)


def _accelerated(out: Path, phase: str, processes: int) -> list[dict[int, list[int]]]:
    return [_epochs(_seen(out, phase, rank)) for rank in range(processes)]


@pytest.mark.slow
@pytest.mark.needs("accelerate")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("processes", [1, 2])
def test_accelerate_sees_every_sample_once_per_epoch_and_resumes_exactly(
    tmp_path: Path, processes: int
) -> None:
    """Accelerate, one process (prepare() in stateful mode) and two under torchrun (prepare() refused
    naming the recipe; the loader iterated directly and registered for checkpointing): every sample once
    per epoch across the processes, a new order every epoch (set_epoch), and save_state/load_state
    mid-epoch resumes exactly."""
    path = _dataset(tmp_path)
    for phase in ("full", "stop", "resume"):
        _accelerate(tmp_path, path, phase, processes)
    full = _accelerated(tmp_path, "full", processes)
    for epoch in (0, 1):
        assert sorted(i for rank in full for i in rank[epoch]) == list(range(SAMPLES))
    assert full[0][0] != full[0][1]
    for rank in range(processes):
        stopped = _seen(tmp_path, "stop", rank)
        resumed = _seen(tmp_path, "resume", rank)
        assert stopped + resumed == _seen(tmp_path, "full", rank)
