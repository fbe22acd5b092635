"""An eval reads each stored chunk of its input once: the preflight reads only what it runs, and nothing is
read twice, on every scheduler, one sample at a time and in batches.

The reads are counted by the interpreter's audit hook in a separate process (``read_count_script.py``):
every open of a chunk file of the input, by the caller, its threads or its forked workers.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.leases import script_env

SCRIPT = Path(__file__).with_name("read_count_script.py")
N = 2_000  # 64x64 images: 4 KiB each, 256 to a 1 MiB chunk, so the images span 8 chunks


def _input(path: Path, png: bool) -> None:
    """Images (raw or PNG) and labels in two commits (two fragments each): several chunks of images."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, size=(N, 64, 64), dtype=np.uint8)
    images[:, ::2] = 0  # PNG compresses these to about half: several chunks either way
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png" if png else None)
    ds.create_tensor("labels", htype="class_label")
    for lo, hi in ((0, N // 2), (N // 2, N)):
        with ds:
            ds.images.extend(images[lo:hi])
            ds.labels.extend((np.arange(lo, hi) % 10).astype(np.uint8))


def _chunk_files(path: Path) -> set[str]:
    """Every chunk file of the dataset's segments (data and index arrays), relative to its root."""
    return {str(p.relative_to(path)) for p in (path / "segments").glob("*/*/c/**/*") if p.is_file()}


def _reads(tmp_path: Path, data: Path, scheduler: str, workers: int, batch: int) -> tuple[int, list[str]]:
    """Run the eval in a fresh process; its pid and the ``"<pid> <chunk>"`` lines of every chunk opened."""
    log = tmp_path / f"reads-{scheduler}-{workers}-{batch}.log"
    out = tmp_path / "out"
    args = [str(data), str(out), str(log), scheduler, str(workers), str(batch)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=script_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = lc.load(str(out), read_only=True)
    images = lc.load(str(data), read_only=True).images.numpy()
    np.testing.assert_array_equal(result.images.numpy(), images[:, ::-1])  # the eval did its work
    return json.loads(done.stdout.splitlines()[-1])["pid"], log.read_text().splitlines()


CASES = [("serial", 0), ("threaded", 2), ("processed", 2)]


@pytest.mark.parametrize("png", [False, True], ids=["raw", "png"])
@pytest.mark.parametrize("batch", [0, 256], ids=["samples", "batches"])
@pytest.mark.parametrize(("scheduler", "workers"), CASES, ids=[f"{s}-{w}" for s, w in CASES])
def test_each_chunk_is_read_once(tmp_path: Path, scheduler: str, workers: int, batch: int, png: bool) -> None:
    """Every chunk of the input is opened, and no process opens one twice; the caller opens none when
    workers are processes, and in one process (serial, threads) each chunk is opened exactly once."""
    data = tmp_path / "data"
    _input(data, png)
    chunks = _chunk_files(data)
    assert len([c for c in chunks if "/data/" in c]) >= 5  # the input spans many chunks
    caller, lines = _reads(tmp_path, data, scheduler, workers, batch)
    opened = collections.Counter(tuple(line.split(" ", 1)) for line in lines)
    assert {chunk for _, chunk in opened} == chunks  # each chunk read, nothing else counted
    twice = {key: n for key, n in opened.items() if n > 1}
    assert twice == {}, f"chunks opened more than once by one process: {twice}"
    by_process = collections.Counter(int(pid) for pid, _ in opened)
    if scheduler == "processed":
        assert caller not in by_process  # the caller plans and commits; its workers read
        assert 1 <= len(by_process) <= workers
    else:
        assert set(by_process) == {caller}
        assert sorted(opened.values()) == [1] * len(chunks)
