"""Loader workers hand batches over through shared memory: the same batches as read in-process, arrays the
caller's own, and no file left behind, whether the pass ends, is closed early or a worker dies."""

from __future__ import annotations

import glob
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.sharedmem import MIN_SHARED_BYTES, SHM_DIR, SharedBatch, remove_leftovers, share_batch

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="no /dev/shm here: batches use the pipe")

N = 2_000


def _leftovers() -> list[str]:
    return glob.glob(os.path.join(SHM_DIR, "lakecompute-*"))


def _dataset(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("img", dtype="uint8")
    ds.create_tensor("label", dtype="int64")
    ds.create_tensor("txt", htype="text")
    ds.img.extend((np.arange(N * 1024) % 253).astype(np.uint8).reshape(N, 32, 32))
    ds.label.extend(np.arange(N))
    ds.txt.extend([f"t{i}" for i in range(N)])
    return ds


def test_share_batch_round_trip() -> None:
    """Large arrays travel in a file (removed when opened), small ones and lists in the message itself."""
    batch = {"a": np.arange(MIN_SHARED_BYTES, dtype=np.float32).reshape(-1, 8), "b": np.arange(3), "c": ["x"]}
    shared = share_batch(batch, "testtoken")
    assert isinstance(shared, SharedBatch)
    assert [name for name, *_ in shared.layout] == ["a"]
    assert os.path.exists(shared.path)
    back = pickle.loads(pickle.dumps(shared)).open()
    assert not os.path.exists(shared.path)
    assert list(back) == ["a", "b", "c"]
    np.testing.assert_array_equal(back["a"], batch["a"])
    assert back["a"].dtype == np.float32
    assert back["a"].flags.writeable
    back["a"][:] = 0  # the caller's own memory
    assert batch["a"][1, 1] == 9
    assert not isinstance(share_batch({"b": np.arange(3)}, "testtoken"), SharedBatch)


def test_worker_batches_match_in_process(tmp_path: Path) -> None:
    """A 2-worker pass yields the batches of its plan, as read in this process, and leaves no file."""
    ds = _dataset(tmp_path / "ds")
    loader = ds.batches(128, shuffle=True, seed=2, num_workers=2)
    plan = loader.plan
    batches = list(loader)
    assert _leftovers() == []
    for step, batch in enumerate(batches):
        idx = plan.step_indices(step)
        np.testing.assert_array_equal(batch["img"], ds.img.numpy()[idx])
        np.testing.assert_array_equal(batch["label"], idx)
        assert batch["txt"] == [f"t{i}" for i in idx]
    batches[0]["img"][:] = 0  # the caller's own: the next pass reads the stored values
    again = next(iter(ds.batches(128, shuffle=True, seed=2, num_workers=2)))
    np.testing.assert_array_equal(again["img"], ds.img.numpy()[plan.step_indices(0)])


def test_no_file_left_when_closed_early(tmp_path: Path) -> None:
    """Closing a pass after one batch (others read ahead, never taken) removes their files."""
    ds = _dataset(tmp_path / "ds")
    loader = ds.batches(64, num_workers=2, prefetch=4)
    first: dict[str, Any] = next(loader)
    loader.close()
    assert _leftovers() == []
    assert first["img"].shape == (64, 32, 32)


def test_remove_leftovers_removes_only_its_run() -> None:
    """remove_leftovers removes the files of its run's token and no other."""
    big = {"a": np.zeros(MIN_SHARED_BYTES, np.uint8)}
    mine, other = share_batch(big, "runmine"), share_batch(big, "runother")
    assert isinstance(mine, SharedBatch)
    assert isinstance(other, SharedBatch)
    remove_leftovers("runmine")
    assert not os.path.exists(mine.path)
    assert os.path.exists(other.path)
    remove_leftovers("runother")
    assert not os.path.exists(other.path)


# A loader left mid-pass in a global when the script ends, with batches read ahead in /dev/shm. It
# prints its run's token (shared-memory files are named lakecompute-<token>-<pid>-<n>) once one is there.
_LEFT_AT_EXIT = """
import atexit, os, sys
import numpy as np
import lakecompute as lc
from lakecompute.loaders import _loader
from lakecompute.sharedmem import SHM_DIR
from tests.helpers import wait_until

where, how = sys.argv[1], sys.argv[2]
if how == "without the exit hook":  # the teardown path itself: a run collected after modules are cleared
    atexit.unregister(getattr(_loader, "_close_live", print))
ds = lc.empty(where, overwrite=True)
with ds:
    ds.create_tensor("x", dtype="float32")
ds.x.extend(np.zeros((64, 64, 64), np.float32))
loader = ds.batches(4, num_workers=2)
if how == "next":
    next(loader)
else:
    for batch in loader:
        break
token = loader._it.gi_frame.f_locals["token"]
print(token, flush=True)
wait_until(lambda: [n for n in os.listdir(SHM_DIR) if n.startswith(f"lakecompute-{token}-")])
print("read ahead", flush=True)
"""


def _files_of(token: str) -> list[str]:
    return glob.glob(os.path.join(SHM_DIR, f"lakecompute-{token}-*"))


@pytest.mark.parametrize(
    ("where", "how"),
    [("ds", "next"), ("mem://left-at-exit", "break"), ("mem://left-at-exit", "without the exit hook")],
)
def test_a_loader_left_mid_pass_at_exit_leaves_no_file(tmp_path: Path, where: str, how: str) -> None:
    """A script ending with a worker loader mid-pass (in a global) exits cleanly, and the batches read
    ahead and never taken leave no file in /dev/shm; without the exit hook that closes such loaders, the
    run collected at teardown still says nothing (whether its workers' last files are gone is then a
    race with them, so only the clean exit is checked)."""
    target = str(tmp_path / where) if "://" not in where else where
    run = subprocess.run(
        [sys.executable, "-c", _LEFT_AT_EXIT, target, how],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    token = run.stdout.split()[0] if run.stdout else "none"
    left = _files_of(token)
    for path in left:  # this run's files only: other tests may be sharing /dev/shm right now
        os.unlink(path)
    assert run.stdout.split()[1:] == ["read", "ahead"], run.stderr[-3000:]
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Exception ignored" not in run.stderr, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    if how != "without the exit hook":
        assert left == []
