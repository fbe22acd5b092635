"""``accelerator.prepare(ds.pytorch(...))`` under ``torchrun --nproc_per_node 2`` (real processes, gloo on
CPU): Accelerate's defaults (it dispatches an iterable loader's batches from process 0) and
``dispatch_batches=False``, with 0 and 2 loader workers: every sample once per epoch, each process on
exactly the batches of its own rank, and ``save_state`` / ``load_state`` mid-epoch resuming exactly."""

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

pytestmark = pytest.mark.needs("accelerate", "torchdata")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "loaders" / "accelerate_run.py"
SAMPLES = 24
BATCH = 3


def _dataset(tmp_path: Path) -> str:
    ds = lc.empty(str(tmp_path / "ds"))
    with ds:
        ds.create_tensor("idx", dtype="int64")
        ds.idx.extend(np.arange(SAMPLES))
    return ds.path


def _run(
    tmp_path: Path, path: str, phase: str, processes: int, dispatch: str, workers: int
) -> subprocess.CompletedProcess[str]:
    args = [str(SCRIPT), path, str(tmp_path), phase, dispatch, str(workers)]
    if processes > 1:
        args = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
                str(free_port()), *args]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1"}
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120 if phase == "oneworld" else 500,
        check=False,
    )


def _seen(out: Path, phase: str, rank: int) -> list[tuple[int, list[int]]]:
    return [(epoch, idx) for epoch, idx in json.loads((out / f"{phase}-rank{rank}.json").read_text())]


def _reads(out: Path, phase: str) -> list[list[int]]:
    log = out / f"{phase}-reads.txt"
    return [[int(v) for v in line.split()] for line in log.read_text().splitlines()] if log.exists() else []


def _expected(path: str, rank: int, processes: int, workers: int) -> list[tuple[int, list[int]]]:
    """What ds.pytorch(rank=r) gives rank r in epochs 0 and 1, with the script's options."""
    ds = lc.load(path, read_only=True)
    return [
        (epoch, batch["idx"].tolist())
        for epoch in (0, 1)
        for batch in ds.batches(
            BATCH,
            tensors="idx",
            shuffle=True,
            seed=5,
            num_workers=workers,
            epoch=epoch,
            rank=rank,
            world_size=processes,
        )
    ]


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    ("processes", "dispatch", "workers"),
    [(2, "default", 0), (2, "default", 2), (2, "off", 0), (2, "off", 2), (1, "default", 2)],
    ids=["2proc-dispatch-0w", "2proc-dispatch-2w", "2proc-nodispatch-0w", "2proc-nodispatch-2w", "1proc-2w"],
)
def test_prepared_loader_trains_on_every_sample_once_and_resumes_exactly(
    tmp_path: Path, processes: int, dispatch: str, workers: int
) -> None:
    """prepare() is the normal path: each process trains on its own rank's batches (those of
    ds.pytorch(rank=r)), so every sample is seen once per epoch across the processes, reshuffled each
    epoch; stopped after 2 batches (save_state) and resumed in new processes (load_state), it trains on
    exactly the rest of the uninterrupted run, and reads what it trains on (Accelerate's own read-ahead
    aside, bounded below)."""
    path = _dataset(tmp_path)
    for phase in ("full", "stop", "resume"):
        done = _run(tmp_path, path, phase, processes, dispatch, workers)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-5000:]
    for epoch in (0, 1):
        assert sorted(
            i for r in range(processes) for e, b in _seen(tmp_path, "full", r) if e == epoch for i in b
        ) == (list(range(SAMPLES)))
    for rank in range(processes):
        full = _seen(tmp_path, "full", rank)
        assert full == _expected(path, rank, processes, workers)
        assert _seen(tmp_path, "stop", rank) + _seen(tmp_path, "resume", rank) == full
    trained = sorted(tuple(b) for r in range(processes) for _, b in _seen(tmp_path, "resume", r))
    read = sorted(tuple(b) for b in _reads(tmp_path, "resume"))
    assert set(trained) <= set(read)
    # What is read beyond what is trained: with workers, the batches read ahead by the iterator Accelerate
    # makes at prepare() (load_state replaces it): at most prefetch (2) per worker; with
    # dispatch_batches=False, also the batches before the checkpoint, which torchdata reads again to skip
    # them (Accelerate's IterableDatasetShard hides the loader's state from it).
    read_ahead = 2 * workers * processes
    skipped = 2 * processes if dispatch == "off" else 0
    assert len(read) - len(trained) <= read_ahead + skipped
    if workers == 0 and dispatch == "default":
        assert read == trained  # nothing read that is not trained on


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_dispatched_loader_refuses_a_state_saved_by_another_process(tmp_path: Path) -> None:
    """Dispatching, only process 0 reads; a checkpoint whose loader state is process 1's (Accelerate's
    save_state writes every process's to one file) is refused on resume, naming the fix, instead of
    training again from the start of the epoch."""
    path = _dataset(tmp_path)
    stopped = _run(tmp_path, path, "stop", 2, "stale", 0)
    assert stopped.returncode == 0, stopped.stderr[-5000:]
    resumed = _run(tmp_path, path, "resume", 2, "stale", 0)
    assert resumed.returncode != 0
    assert "InvalidArgumentError: The loader state loaded here was saved by process 1" in resumed.stderr
    assert "torch.save(loader.state_dict(), os.path.join(checkpoint, 'dl_state_dict.bin'))" in resumed.stderr


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("dispatch", "workers"), [("default", 0), ("default", 2), ("off", 0)])
def test_a_loader_sharded_by_hand_for_one_process_refuses_on_every_process(
    tmp_path: Path, dispatch: str, workers: int
) -> None:
    """``ds.pytorch(rank=0, world_size=1)`` prepared under two processes: both processes raise the same
    InvalidArgumentError (each naming its own place) and then meet again; dispatching, process 0 used to
    refuse while process 1 waited for its batch in a collective until it was killed."""
    path = _dataset(tmp_path)
    proc = _run(tmp_path, path, "oneworld", 2, dispatch, workers)
    assert proc.returncode == 0, proc.stderr[-5000:]
    for rank in (0, 1):
        outcome = json.loads((tmp_path / f"oneworld-rank{rank}.json").read_text())
        assert outcome["error"] == "InvalidArgumentError"
        assert f"sharded for rank 0 of 1, but Accelerate runs it as process {rank} of 2" in outcome["message"]
    assert _reads(tmp_path, "oneworld") == []  # refused before anything was read
