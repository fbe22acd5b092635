"""Loader workers in real processes under faults: a worker killed mid-send, a killed training process,
damaged data. Loader workers are the processed scheduler's, and keep its guarantees (the unguarded
script on S3 is in test_s3.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import multiprocess
import numpy as np
import pytest

import lakecompute as lc
from lakecompute.loaders import IndexPlan
from tests.procs import wait_blocked_writing_pipe, wait_session_empty

REPO_ROOT = Path(__file__).resolve().parents[2]

# A batch of 4 of these is 1 MiB: far more than a pipe holds, so a worker sends it in pieces.
SIDE = 512
BATCH = 4


@pytest.fixture
def big_images(tmp_path: Path) -> lc.Dataset:
    """12 images of 512x512 uint8 (256 KiB each), the image's index in every pixel."""
    ds = lc.empty(str(tmp_path / "big"))
    with ds:
        ds.create_tensor("img", htype="image")
        ds.img.extend(np.stack([np.full((SIDE, SIDE), i, dtype=np.uint8) for i in range(12)]))
    return ds


def _with_pid(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch and the reading worker's pid; batches after the first take a while, so that the
    consumer has the first and stopped reading before they are ready. The images are a list of arrays:
    a list travels through the worker's pipe (arrays go through shared memory), which is what this
    test kills a worker in the middle of."""
    if batch["img"][0, 0, 0] != 0:
        time.sleep(0.5)
    return {**batch, "img": list(batch["img"]), "pid": os.getpid()}


def _first_blocked_writing(pids: list[int], timeout: float) -> int:
    """The first of ``pids`` seen waiting in a write to a full pipe."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in pids:
            if wait_blocked_writing_pipe(pid, timeout=0.1):
                return pid
    pytest.fail(f"No worker of {pids} was seen writing to a full pipe within {timeout} s.")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_loader_worker_killed_while_sending_a_batch_raises_worker_died(big_images: lc.Dataset) -> None:
    """SIGKILL a loader worker blocked halfway through sending a 1 MiB batch: WorkerDiedError within 5 s."""
    batches = big_images.batches(BATCH, transform=_with_pid, num_workers=2, prefetch=1)
    try:
        first = next(batches)
        assert sum(a.nbytes for a in first["img"]) == BATCH * SIDE * SIDE == 1 << 20
        # The consumer holds the first batch and reads no more: the workers read the next steps (at
        # most two ahead) and wait, in the middle of writing a batch to a full pipe.
        workers = [p.pid for p in multiprocess.active_children()]
        assert len(workers) == 2
        killed = _first_blocked_writing(workers, timeout=60)
        os.kill(killed, signal.SIGKILL)
        started = time.monotonic()
        taken: list[int] = []
        with pytest.raises(lc.WorkerDiedError) as info:
            # A batch the other worker had finished may come first; then the death.
            taken.extend(int(batch["pid"]) for batch in batches)
        waited = time.monotonic() - started
    finally:
        batches.close()
    assert waited < 5.0  # the bound: the error arrives, the loop never hangs
    assert killed not in taken
    assert len(taken) <= 1
    assert info.value.exitcode == -signal.SIGKILL
    step = info.value.task.step
    assert step in (1, 2)
    assert f"died with signal SIGKILL while running task loader step {step} " in str(info.value)
    assert multiprocess.active_children() == []


_TRAINING_SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import multiprocess

    import lakecompute as lc

    ds = lc.load(sys.argv[1], read_only=True)
    for step, batch in enumerate(ds.batches(10, num_workers=2)):
        if step == 0:
            print("READY", *[p.pid for p in multiprocess.active_children()], flush=True)
        time.sleep(600)  # a long training step: the workers read ahead, then wait
    """
)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_loader_workers_end_with_a_killed_training_process(numbered: lc.Dataset, signum: int) -> None:
    """A training process killed with SIGKILL or SIGTERM leaves no loader worker alive 15 s later."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _TRAINING_SCRIPT, numbered.path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Its own session, so that every process it starts can be found (and cleaned up) by session id.
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if not line or line[0] != "READY":
            proc.kill()
            pytest.fail(f"The training script did not start its workers:\n{proc.communicate(timeout=20)[1]}")
        assert len(line) == 3  # two loader workers
        os.kill(proc.pid, signum)
        assert proc.wait(timeout=20) == -signum
        assert wait_session_empty(proc.pid, timeout=15) == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate(timeout=20)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_damaged_data_is_dataset_corrupt_error_at_its_step(tmp_path: Path, num_workers: int) -> None:
    """A missing chunk read by a loader worker raises DatasetCorruptError naming tensor and key, after
    the batches before it."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", dtype="int32", chunk_compression=None)
    ds.x.extend(np.arange(6000 * 256, dtype=np.int32).reshape(6000, 256))
    chunks = sorted((tmp_path / "ds" / "segments").glob("*/data/c/*"), key=lambda p: int(p.name))
    # A chunk near the end, not the last: the reader checks each fragment's last chunk when it first
    # touches the fragment, so removing that one fails the very first batch.
    os.remove(chunks[-2])  # late samples: the steps that read them come late
    taken: list[int] = []
    batches = lc.load(str(tmp_path / "ds")).batches(100, num_workers=num_workers)
    with pytest.raises(lc.DatasetCorruptError) as info:
        taken.extend(int(batch["x"][0, 0]) // 256 for batch in batches)
    assert info.value.tensor == "x"
    assert info.value.reason == "the chunk is missing"
    assert info.value.file is not None
    assert info.value.file.endswith(f"data/c/{chunks[-2].name}")
    # Every batch before the first damaged step arrived first, in step order.
    plan = IndexPlan(6000, 100, num_workers=num_workers)
    assert len(taken) >= 10
    assert taken == [int(plan.step_indices(s)[0]) for s in range(len(taken))]
