"""Crash safety: a writer killed with SIGKILL at random moments leaves exactly a committed prefix."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from typing import Any

import numpy as np

import lakecompute as lc

_FORK = multiprocessing.get_context("fork")
BLOCK = 3  # samples per ``with ds:`` block: a committed prefix is always a multiple of this
KILLS = 24


def counter_row(i: int) -> dict[str, Any]:
    """Return sample ``i``: every tensor's value is derived from the running counter ``i``."""
    return {
        "x": np.array([i, -i], dtype=np.int64),
        "r": np.arange(i % 4 + 1, dtype=np.int32) + i,
        "t": f"sample {i}",
        "img": np.full((3, 4), i % 256, dtype=np.uint8),
    }


def create_counter_dataset(path: str) -> None:
    """Create the dataset the crash and reader tests append counter rows to."""
    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("r", dtype="int32")
        ds.create_tensor("t", htype="text")
        ds.create_tensor("img", htype="image", sample_compression="png")


def check_counter_prefix(ds: lc.Dataset, block: int) -> int:
    """Assert that ``ds`` holds exactly counter rows 0..n-1 with n a multiple of ``block``; return n."""
    lengths = {name: len(t) for name, t in ds.tensors.items()}
    n = lengths["x"]
    assert set(lengths.values()) == {n}, f"tensors of unequal length: {lengths}"
    assert n % block == 0, f"{n} samples is not a whole number of {block}-sample commits"
    if n == 0:
        return 0
    idx = np.arange(n)
    np.testing.assert_array_equal(ds.x.numpy(), np.stack([idx, -idx], axis=1))
    ragged = ds.r.numpy(aslist=True)
    assert all(np.array_equal(a, np.arange(i % 4 + 1) + i) for i, a in enumerate(ragged))
    assert ds.t.text() == [f"sample {i}" for i in range(n)]
    np.testing.assert_array_equal(ds.img.numpy()[:, 0, 0], idx % 256)
    return n


def _appender(path: str, started: Any, after_first_commit: bool) -> None:
    ds = lc.load(path)
    n = len(ds)
    if not after_first_commit:
        started.set()
    while True:
        with ds:
            for j in range(BLOCK):
                ds.append(counter_row(n + j))
                if j == 1:
                    _ = ds.r[-1].numpy()  # push part of the block to storage before its commit
        n += BLOCK
        started.set()


def test_crash_sigkill_leaves_committed_prefix(tmp_path: Any) -> None:
    """After each SIGKILL at a random moment the dataset loads and holds exactly a committed prefix."""
    path = str(tmp_path / "crash")
    create_counter_dataset(path)
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    lengths = []
    for kill in range(KILLS):
        started = _FORK.Event()
        # Every other writer is killed only after its first commit, so that the dataset grows even on a
        # slow machine; the others may die anywhere, from opening the dataset on.
        proc = _FORK.Process(target=_appender, args=(path, started, kill % 2 == 1))
        proc.start()
        assert started.wait(60), "the writer did not start"
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL, f"kill {kill}: the writer was not killed (seed {seed})"
        n = check_counter_prefix(lc.load(path), BLOCK)
        assert not lengths or n >= lengths[-1], f"kill {kill}: committed data went missing (seed {seed})"
        lengths.append(n)
    assert len(set(lengths)) >= KILLS // 2, f"writers made too little progress to test anything: {lengths}"
    ds = lc.load(path)
    ds.vacuum(grace_seconds=0)
    assert check_counter_prefix(lc.load(path), BLOCK) == lengths[-1]
