"""The hand-written loops ``bench gpu`` compares the eval with, each run in a fresh process (`run_loop`).

Every loop feeds the same model (`bench.gpu.Embedder`: ResNet-50 features, the same precision, the same
host↔device copies) on one thread per GPU, in batches, cycling through the first `POOL` images:

- ``memory``: images decoded beforehand and kept in pinned memory (the floor: no decode at all);
- ``device``: the images' stored JPEG bytes in memory, decoded on the GPU per batch by nvJPEG
  (``torchvision.io.decode_jpeg(list, device="cuda")``), as a hand-written loop with device decoding does;
- ``cpu``: the stored JPEG bytes decoded on the CPU by a torch ``DataLoader`` (one worker process per CPU
  but one, Pillow, ``pin_memory=True``), the usual way a PyTorch loop decodes.

A loop prints one line of JSON: seconds from its start (CUDA's and the model's start-up included) to its
last embedding on the host, the seconds from its first batch, and the host milliseconds per batch in each
part of the model call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

POOL = 1024  # images each loop cycles through
ROOT = Path(__file__).resolve().parent.parent
KINDS = ("memory", "device", "cpu")


def loop_main(path: str, n: int, batch: int, precision: str, devices: list[str], kind: str) -> None:
    """Embed ``n`` images in batches of ``batch`` on each of ``devices`` (a thread each); print JSON."""
    import torch

    import lakecompute as lc
    from bench.gpu import Embedder, per_batch

    ds = lc.load(path)
    feeds = [_feed(kind, ds, batch, devices[k], k) for k in range(len(devices))]
    per_device = [n // len(devices) + (1 if k < n % len(devices) else 0) for k in range(len(devices))]
    seconds = [0.0] * len(devices)
    steady = [0.0] * len(devices)
    parts: list[dict[str, float]] = []

    def run(k: int) -> None:
        t0 = time.perf_counter()
        if devices[k].startswith("cuda"):
            torch.cuda.set_device(torch.device(devices[k]))
        embedder = Embedder(devices[k], precision)
        done, first = 0, None
        for images in feeds[k](per_device[k]):
            embedder.embed(images)
            done += len(images)
            first = first or time.perf_counter()
        seconds[k] = time.perf_counter() - t0
        steady[k] = time.perf_counter() - (first or t0)
        parts.append(embedder.parts)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(devices))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(
        json.dumps({"seconds": max(seconds), "steady_seconds": max(steady), "per_batch_ms": per_batch(parts)})
    )


def _feed(kind: str, ds: Any, batch: int, device: str, k: int) -> Any:
    """A function of a count giving that many images in batches: what loop ``k`` embeds."""
    import torch

    if kind == "memory":
        pool = torch.from_numpy(ds.images[0:POOL].numpy())
        if device.startswith("cuda"):
            pool = pool.pin_memory()
        return lambda count: _cycle(pool, batch, count, k)
    blobs = [np.frombuffer(ds.images[i].tobytes(), dtype=np.uint8) for i in range(min(POOL, len(ds.images)))]
    if kind == "device":
        return lambda count: _decoded_on_device(blobs, batch, count, device)
    return lambda count: _decoded_on_cpu(blobs, batch, count, device.startswith("cuda"))


def _cycle(pool: Any, batch: int, count: int, k: int) -> Any:
    done = 0
    while done < count:
        take = min(batch, count - done)
        start = (done * 7 + k * 97) % (len(pool) - take + 1)
        yield pool[start : start + take]
        done += take


def _decoded_on_device(blobs: list[np.ndarray], batch: int, count: int, device: str) -> Any:
    import torch
    import torchvision.io

    tensors = [torch.from_numpy(b.copy()) for b in blobs]
    done = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision 0.29 deprecates its decoders (one thread here)
        while done < count:
            take = min(batch, count - done)
            start = (done * 7) % (len(tensors) - take + 1)
            images = torchvision.io.decode_jpeg(tensors[start : start + take], device=device)
            yield torch.stack(images).permute(0, 2, 3, 1)
            done += take


class _Blobs:
    """The stored JPEG bytes as a map-style dataset of images a DataLoader decodes (with Pillow)."""

    def __init__(self, blobs: list[np.ndarray], count: int) -> None:
        self.blobs, self.count = blobs, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> np.ndarray:
        from lakecompute.compression import decode_image

        return decode_image(self.blobs[(i * 7) % len(self.blobs)].tobytes())


def _decoded_on_cpu(blobs: list[np.ndarray], batch: int, count: int, pin: bool) -> Any:
    import torch.utils.data

    workers = max(1, (os.cpu_count() or 2) - 1)
    loader = torch.utils.data.DataLoader(
        _Blobs(blobs, count), batch_size=batch, num_workers=workers, pin_memory=pin, persistent_workers=False,
        prefetch_factor=4, multiprocessing_context="fork",
    )  # fmt: skip
    yield from loader


def run_loop(path: str, n: int, batch: int, precision: str, devices: list[str], kind: str) -> dict[str, Any]:
    """Run a loop in a fresh process; its JSON, with the process's own wall seconds added.

    Raises:
        RuntimeError: the loop failed (its stderr's tail).
    """
    code = "import sys, json; from bench._gpu_loops import loop_main; loop_main(*json.loads(sys.argv[1]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = json.dumps([path, n, batch, precision, devices, kind])
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, args], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the {kind} loop failed:\n{proc.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**out, "process_seconds": wall, "images_per_s": n / out["seconds"]}
