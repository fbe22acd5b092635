"""What the albumentations and torchvision helper tests share: the output dataset, comparing two of them,
and the kill-and-resume check (a real SIGKILL after a checkpoint, then a resume with another worker count).

A test module using `assert_kill_and_resume_equals_a_straight_run` defines, at module level, a compute
function ``slow_flip_crop_resize(pause=...)``: the killed run imports it from the module by name.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

import lakecompute as lc
from tests.helpers import wait_until

TENSORS = ("images", "boxes", "categories", "masks", "keypoints")
REPO = Path(__file__).resolve().parents[2]


def new_output(path: Path, ds: lc.Dataset) -> lc.Dataset:
    """An empty dataset for augmented rows: PNG images (lossless: compared exactly), targets like ``ds``'s."""
    out = lc.empty(str(path), overwrite=True)
    with out:
        out.create_tensor("images", htype="image", sample_compression="png")
        for name in TENSORS[1:]:
            out.create_tensor_like(name, ds.tensors[name])
    return out


def contents(ds: lc.Dataset) -> dict[str, list[np.ndarray]]:
    """Every sample of every augmented tensor, as arrays."""
    return {n: [np.asarray(a) for a in ds.tensors[n].numpy(aslist=True)] for n in TENSORS}


def assert_same(a: dict[str, list[np.ndarray]], b: dict[str, list[np.ndarray]]) -> None:
    """Two datasets' `contents` are equal, sample by sample."""
    for name in TENSORS:
        assert len(a[name]) == len(b[name])
        for x, y in zip(a[name], b[name], strict=True):
            np.testing.assert_array_equal(x, y)


_KILLED_RUN = """
import importlib, sys
import lakecompute as lc

module, src, out = sys.argv[1:4]
fn = importlib.import_module(module).slow_flip_crop_resize(pause=0.4)
print("START", flush=True)
fn.eval(lc.load(src), lc.load(out), seed=5, num_workers=2, checkpoint_interval=1, progressbar=False)
"""


def _run_until_first_checkpoint(module: str, src: str, out: Path, patience: float) -> None:
    first = lc.load(str(out)).version
    run = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, module, src, str(out)],
                           stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                           start_new_session=True)  # fmt: skip
    try:
        assert run.stdout is not None
        assert run.stdout.readline().strip() == "START"
        wait_until(lambda: lc.load(str(out)).version != first, patience, "the first checkpoint")
        os.killpg(run.pid, signal.SIGKILL)
    finally:
        run.kill()
        run.communicate(timeout=30)


def assert_kill_and_resume_equals_a_straight_run(
    module: str, coco: lc.Dataset, tmp_path: Path, patience: float = 60.0
) -> None:
    """``module``'s ``slow_flip_crop_resize`` run with 2 workers is SIGKILLed (its process group) after its
    first checkpoint; the rerun in this process (0 workers) resumes after the kept prefix and ends with
    exactly the dataset of a run that was never killed."""
    resumed = tmp_path / "resumed"
    new_output(resumed, coco)
    _run_until_first_checkpoint(module, coco.path, resumed, patience)
    kept = len(lc.load(str(resumed)))
    assert 0 < kept < len(coco)
    fn = importlib.import_module(module).slow_flip_crop_resize(pause=0.4)
    result = fn.eval(coco, lc.load(str(resumed)), seed=5, checkpoint_interval=1, progressbar=False)
    assert result.resumed_from == kept
    straight = new_output(tmp_path / "straight", coco)
    fn.eval(coco, straight, seed=5, num_workers=2, progressbar=False)
    assert len(lc.load(str(resumed))) == len(coco)
    assert_same(contents(lc.load(str(resumed))), contents(straight))
