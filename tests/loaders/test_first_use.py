"""The call that sets torch or Ray up lets go of its dataset handle like any other: ``ds.pytorch()`` when it
is what imports torch, ``ds.to_ray()`` when its Ray Data starts a local Ray. Both set-ups leave a garbage
cycle that holds the frames on the stack at the time, the caller's among them; before, the handle (its
decoded chunks, its lease) lived on until Python's cyclic collector ran.

Each case runs in a new process (the test process has imported torch and started Ray long before), with
the cyclic collector off, so that only reference counts free the handle.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = """
import gc, sys, weakref
import numpy as np
import lakecompute as lc

path, verb = sys.argv[1], sys.argv[2]
ds = lc.empty(path)
ds.create_tensor("a")
with ds:
    ds.a.extend(np.arange(100))
del ds
assert "torch" not in sys.modules and "ray" not in sys.modules
gc.collect()
gc.disable()

def use():
    ds = lc.load(path)
    if verb == "pytorch":
        rows = sum(len(batch["a"]) for batch in ds.pytorch(batch_size=10))
    else:
        rows = len(ds.to_ray(rows_per_block=25).take_all())
    return weakref.ref(ds), rows

handle, rows = use()
print("rows", rows, "freed", handle() is None, "torch" in sys.modules, "ray" in sys.modules)
"""


def _run(tmp_path: Path, verb: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # a Ray of its own
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "ds"), verb],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_pytorch_that_imports_torch_frees_the_handle_with_its_last_reference(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    assert _run(tmp_path, "pytorch") == "rows 100 freed True True False"


@pytest.mark.slow
def test_to_ray_that_starts_ray_frees_the_handle_with_its_last_reference(tmp_path: Path) -> None:
    pytest.importorskip("ray.data")
    assert _run(tmp_path, "to_ray") == "rows 100 freed True False True"
