"""``python -m bench models``: a torch image-embedding column on the CPU, beside the peers and a plain loop.

The workload (issue 28): 512 photo-like 224x224 JPEG images (quality 90), 512-d embeddings from
torchvision's ``resnet18(weights=None)`` (classifier dropped), batch 64, two workers, each on one CPU
thread (``torch.set_num_threads(1)``: two workers, two cores). The same JPEG bytes and the same model for
every contestant, in one process, in interleaved rounds (``--runs``, the median reported; ``--quick``: 128
images, one round):

* **ours**: ``Embed().eval(ds, num_workers=2, batch_size=64, skip_ok=True)``, the column added in place to
  a dataset holding the JPEGs (written as zarr chunks, committed). The row's note gives the eval's stage
  seconds (``EvalResult.stages``): decoding overlaps the model, so the tasks' wall time is below the sum.
* **Hugging Face datasets**: ``map(embed, batched=True, batch_size=64, num_proc=2, with_rank=True)`` over
  a dataset saved to disk with an ``Image`` column (decoded by ``datasets``), the model built once per
  process (a global keyed by rank), the embeddings written to its Arrow cache.
* **Ray Data**: ``map_batches(Embed, batch_size=64, compute=ActorPoolStrategy(size=2))``, an actor pool
  of 2 (the model built once per actor), over the JPEG bytes, materialized (the output stays in Ray's
  object store: less work than ours). Ray itself is started before the timing.
* **loop**: the floor, in this process: decode each JPEG with Pillow, embed in batches of 64 with torch on
  two threads, into a preallocated array (no storage).
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import Row, scratch_dir, suite

N = 512
SIZE = 224
BATCH = 64
DIM = 512
ROOT = str(Path(__file__).resolve().parent.parent)  # Ray's workers import this module from there


def _model() -> Any:
    import torch
    from torchvision.models import resnet18

    torch.manual_seed(0)  # the same weights in every process
    model = resnet18(weights=None)
    model.fc = torch.nn.Identity()
    return model.eval()


def _embed(model: Any, images: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255
        return np.asarray(model(x).numpy(), dtype=np.float32)


def _decode(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


# -- ours ---------------------------------------------------------------------------------------------


class _Ours:
    def __init__(self) -> None:
        import torch

        torch.set_num_threads(1)
        self.model = _model()

    def __call__(self, batch: Any, sample_out: Any) -> None:
        sample_out.embedding.extend(_embed(self.model, batch.images.numpy()))


def _our_dataset(path: str, images: np.ndarray) -> Any:
    import lakecompute as lc

    ds = lc.empty(path, overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="jpeg")
    ds.images.extend(images)
    return ds


def _ours(ds: Any) -> tuple[float, dict[str, float]]:
    import lakecompute as lc

    if "embedding" in ds.tensors:
        ds.delete_tensor("embedding")
    ds.create_tensor("embedding", htype="embedding", dtype="float32")
    t0 = time.perf_counter()
    result = lc.compute(_Ours)().eval(ds, num_workers=2, batch_size=BATCH, skip_ok=True, progressbar=False)
    seconds = time.perf_counter() - t0
    assert ds.embedding.numpy().shape == (len(ds), DIM)
    return seconds, result.stages


# -- Hugging Face datasets ------------------------------------------------------------------------------

_HF_MODELS: dict[int, Any] = {}


def _hf_embed(batch: dict[str, Any], rank: int | None) -> dict[str, Any]:
    model = _HF_MODELS.get(rank or 0)
    if model is None:
        import torch

        torch.set_num_threads(1)
        model = _HF_MODELS[rank or 0] = _model()
    images = np.stack([np.asarray(image.convert("RGB")) for image in batch["image"]])
    return {"embedding": list(_embed(model, images))}


def _hf_dataset(folder: str, jpegs: list[bytes]) -> str | None:
    try:
        import datasets
    except ImportError:
        return None
    datasets.disable_progress_bars()
    features = datasets.Features({"image": datasets.Image()})
    source = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in jpegs]}, features)
    path = os.path.join(folder, "hf")
    source.save_to_disk(path)
    return path


def _hf(path: str, n: int) -> float:
    import datasets

    on_disk = datasets.load_from_disk(path)
    t0 = time.perf_counter()
    out = on_disk.map(
        _hf_embed, batched=True, batch_size=BATCH, num_proc=2, with_rank=True, load_from_cache_file=False
    )
    seconds = time.perf_counter() - t0
    assert len(out) == n
    assert len(out[0]["embedding"]) == DIM
    return seconds


# -- Ray Data -----------------------------------------------------------------------------------------


class _RayEmbed:
    def __init__(self) -> None:
        import torch

        torch.set_num_threads(1)
        self.model = _model()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        images = np.stack([_decode(bytes(b)) for b in batch["image"]])
        return {"embedding": _embed(self.model, images)}


def _start_ray() -> Any:
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": ROOT}})  # fmt: skip
    ray.data.DataContext.get_current().enable_progress_bars = False
    return ray


def _ray(ray: Any, jpegs: list[bytes]) -> float:
    items = ray.data.from_items([{"image": b} for b in jpegs])
    t0 = time.perf_counter()
    pool = ray.data.ActorPoolStrategy(size=2)
    embedded = items.map_batches(_RayEmbed, batch_size=BATCH, compute=pool, batch_format="numpy")
    out = embedded.materialize()
    seconds = time.perf_counter() - t0
    assert out.count() == len(jpegs)
    return seconds


# -- the loop -----------------------------------------------------------------------------------------


def _loop(jpegs: list[bytes]) -> float:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        t0 = time.perf_counter()
        model = _model()
        out = np.empty((len(jpegs), DIM), dtype=np.float32)
        for lo in range(0, len(jpegs), BATCH):
            images = np.stack([_decode(b) for b in jpegs[lo : lo + BATCH]])
            out[lo : lo + BATCH] = _embed(model, images)
        return time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)


# -- the suite ----------------------------------------------------------------------------------------


def _images(n: int) -> tuple[np.ndarray, list[bytes]]:
    """The images, and their JPEG bytes as the dataset stores them (Pillow, quality 90)."""
    from PIL import Image

    from bench.gpu import _synth

    class _Out:
        def __init__(self) -> None:
            self.values: list[np.ndarray] = []
            self.images = self

        def append(self, value: np.ndarray) -> None:
            self.values.append(value)

    out = _Out()
    for seed in range(n):
        _synth(seed, out)
    jpegs = []
    for image in out.values:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=90)
        jpegs.append(buffer.getvalue())
    return np.stack(out.values), jpegs


_OURS = "ours"
_HF = "HF datasets map(batched, num_proc=2, with_rank)"
_RAY = "Ray Data map_batches, actor pool of 2"
_LOOP = "plain loop, in process (2 threads)"


@suite("models")
def run(opts: Any) -> list[Row]:
    """ResNet-18 embedding column over 224x224 JPEGs, 2 workers: ours vs HF map, Ray Data and a loop."""
    try:
        import torch  # noqa: F401 (only to know it is there)
        import torchvision  # noqa: F401
    except ImportError:
        print("  models: skipped: torch and torchvision are needed")
        return []
    n = 128 if opts.quick else N
    rounds = 1 if opts.quick else max(1, opts.runs)
    images, jpegs = _images(n)
    times: dict[str, list[float]] = {}
    stages: list[dict[str, float]] = []
    ray = _start_ray()
    try:
        with scratch_dir("lc-bench-models-") as tmp:
            ds = _our_dataset(os.path.join(tmp, "ours"), images)
            hf = _hf_dataset(tmp, jpegs)
            for _ in range(rounds):  # interleaved: each round runs every contestant once
                seconds, staged = _ours(ds)
                times.setdefault(_OURS, []).append(seconds)
                stages.append(staged)
                if hf is not None:
                    times.setdefault(_HF, []).append(_hf(hf, n))
                if ray is not None:
                    times.setdefault(_RAY, []).append(_ray(ray, jpegs))
                times.setdefault(_LOOP, []).append(_loop(jpegs))
    finally:
        if ray is not None:
            ray.shutdown()
    return _rows(n, rounds, times, stages)


def _rows(n: int, rounds: int, times: dict[str, list[float]], stages: list[dict[str, float]]) -> list[Row]:
    median = {name: float(np.median(values)) for name, values in times.items()}
    ours = median.pop(_OURS)
    staged = stages[len(stages) // 2]
    work = sum(v for k, v in staged.items() if k != "wall")
    note = (
        f"{n} JPEG {SIZE}x{SIZE}, batch {BATCH}, resnet18(weights=None), 1 thread per worker, median of "
        f"{rounds} interleaved round(s); eval stages "
        + ", ".join(f"{k} {v:.1f} s" for k, v in staged.items())
    )
    rows = []
    for name in (_HF, _RAY, _LOOP):
        if name not in median:
            print(f"  models: {name} skipped (not installed)")
            continue
        target, ok = (">= 1x", ours <= median[name]) if name != _LOOP else ("", None)
        runs = f"; every round, ours {_seconds(times[_OURS])} vs {_seconds(times[name])}"
        rows.append(
            Row("resnet18 column, 2 workers", n / ours, n / median[name], "/s", target, ok, name, note + runs)
        )
    overlap = "read + run + write (no overlap)"
    rows.append(
        Row("eval: tasks' wall vs sum of stages", staged.get("wall", 0.0), work, "s", baseline_name=overlap)
    )
    return rows


def _seconds(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values) + " s"
