"""``python -m bench._task_starts N MODEL_S DIR``: one GPU worker's task starts, measured on the CPU.

A stand-in for one worker on a GPU: 1 worker placed on a declared GPU (``CUDA_VISIBLE_DEVICES=0``: its read
path is a GPU worker's, with decoding helpers), batches of 64 224x224 JPEGs (made once in DIR), and a model
that waits MODEL_S seconds per batch with the GIL released (a GPU's forward). Prints JSON: the eval's wall
time and the seconds the model waited between consecutive calls (the device's idle time inside the eval),
their largest, and how many exceeded 30 ms. Run it in two trees alternately (``PYTHONPATH=TREE``) for a
before/after (docs/performance.md, issue 45: 1024 images, 0.4 s a batch).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

import lakecompute as lc

BATCH = 64


def synth(seed: Any, sample_out: Any) -> None:
    """A photo-like 224x224 image (as bench gpu's)."""
    from PIL import Image

    rng = np.random.default_rng(int(seed))
    small = Image.fromarray(rng.integers(0, 256, (14, 14, 3), dtype=np.uint8))
    image = np.asarray(small.resize((224, 224), Image.BICUBIC), dtype=np.int16)
    image = image + rng.integers(-6, 7, image.shape, dtype=np.int16)
    sample_out.images.append(np.clip(image, 0, 255).astype(np.uint8))


class Model:
    """Waits ``seconds`` per batch, the GIL released; logs when each call began and ended."""

    def __init__(self, log: str, seconds: float) -> None:
        self.log, self.seconds = log, seconds

    def __call__(self, batch: Any, sample_out: Any) -> None:
        t0 = time.time()
        x = batch.images.numpy()
        time.sleep(self.seconds)
        sample_out.score.extend(x.reshape(len(x), -1)[:, :4].astype(np.float32).mean(axis=1))
        with open(self.log, "a") as fh:
            fh.write(f"{t0} {time.time()}\n")


def main(n: int, seconds: float, tmp: str) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # a declared GPU: the worker reads as a GPU worker does
    path = os.path.join(tmp, "images")
    if not os.path.exists(path):
        ds = lc.empty(path)
        ds.create_tensor("images", htype="image", sample_compression="jpeg")
        lc.compute(synth)().eval(list(range(n)), ds, num_workers=2, progressbar=False)
    ds = lc.load(path)
    if "score" in ds.tensors:
        ds.delete_tensor("score")
    ds.create_tensor("score", dtype="float32")
    log = os.path.join(tmp, f"log-{time.time_ns()}")
    t0 = time.perf_counter()
    model = lc.compute(Model)(log, seconds)
    model.eval(ds, num_workers=1, devices="cuda", batch_size=BATCH, skip_ok=True, progressbar=False)
    wall = time.perf_counter() - t0
    calls = np.loadtxt(log)
    gaps = calls[1:, 0] - calls[:-1, 1]
    out = {
        "wall": round(wall, 3),
        "gaps": round(float(gaps.sum()), 3),
        "max_gap": round(float(gaps.max()), 3),
    }
    print(json.dumps({**out, "gaps_over_30ms": int((gaps > 0.03).sum()), "calls": len(calls)}))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
