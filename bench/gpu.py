"""``python -m bench gpu``: a ResNet-50 embedding column at GPU speed, beside hand-written loops.

The workload: 20,000 JPEG images (224x224, made here in parallel), a column of 2048-d embeddings from
ResNet-50 (torchvision's ``resnet50(weights=None)``, else the same network in plain torch, see
``_resnet``), batch 64 (256 in the GPU-bound rows), added in place with ``devices=`` on every visible GPU.
Beside each configuration (`_configs`), a hand-written loop (one thread per GPU, in a fresh process,
``bench._gpu_loops``) keeps the same model, same precision and same host↔device copies fed: from images
already decoded in memory (the floor), from the stored JPEG bytes decoded on the GPU (the rows that decode
on the device), or decoded on the CPU by a ``DataLoader`` (device decoding's second baseline).

Reported per configuration: images/s (the whole eval call, worker start-up included (the fork server they
start from is started once per process, before the timed runs, by a small untimed eval); the loop from CUDA
start-up and model build to the last embedding on the host), the ratio to the loop, and the fraction of
time the GPUs were busy (NVML's utilization, sampled every 20 ms on a thread: the share of time a kernel
ran), over the whole call and over its active span (first to last busy sample); the eval's stage
seconds (read+decode, run, write, wall), which show the overlap; and, for the eval's workers and the loop
alike, the host milliseconds per batch in the copy's call, the model's kernel launches and the wait for
its output (``per_batch_ms``: where a model call's time goes, with no synchronisation added).

Without a CUDA GPU (or torch) the suite skips, saying why. ``BENCH_GPU_JSON=path`` writes the details as
JSON (``python -m bench gpu --json path`` writes the rows); ``BENCH_GPU_IMAGES=n`` sets the number of images
(20,000 by default: start-up is then about half of each run, so each row's note also gives the rates over
the batches alone). ``BENCH_GPU_DRY=1`` runs the same code on the
CPU with 64 images and a small batch (a check of the bench itself, not a measurement).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import platform
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import Row, scratch_dir, suite
from bench._gpu_loops import run_loop

N_IMAGES = 20_000
SIZE = 224
BATCH = 64
ROOT = Path(__file__).resolve().parent.parent


# -- the model, shared by the eval and the loop -------------------------------------------------------


class Embedder:
    """ResNet-50 features on one device: uint8 images (B, H, W, 3) in, float32 (B, 2048) out, with the
    host→device copy of the images and the device→host copy of the embeddings."""

    def __init__(self, device: str, precision: str) -> None:
        import torch

        from bench._resnet import resnet50_features

        self.torch = torch
        self.device = torch.device(device)
        self.dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        model = resnet50_features().eval().to(self.device)
        self.model = model.to(memory_format=torch.channels_last)
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=self.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225], device=self.device).view(1, 3, 1, 1) * 255
        #: Host seconds per part of `embed`, summed over batches (no extra synchronisation): the copy's
        #: call (queued from pinned memory, waited for from pageable), the model's kernel launches, and
        #: the wait for the embeddings (the device's own time left after the launches).
        self.parts = {"copy": 0.0, "launch": 0.0, "wait": 0.0, "batches": 0}

    def embed(self, images: Any) -> np.ndarray:
        torch = self.torch
        t0 = time.perf_counter()
        batch = images if isinstance(images, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(images))
        with (
            torch.inference_mode(),
            torch.autocast(self.device.type, self.dtype, enabled=self.dtype != torch.float32),
        ):
            x = batch.to(self.device, non_blocking=True)
            t1 = time.perf_counter()
            x = x.permute(0, 3, 1, 2).float()
            x = ((x - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
            out = self.model(x).float()
        t2 = time.perf_counter()
        result = np.asarray(out.cpu().numpy())
        parts = self.parts
        parts["copy"] += t1 - t0
        parts["launch"] += t2 - t1
        parts["wait"] += time.perf_counter() - t2
        parts["batches"] += 1
        return result


def _lc() -> Any:
    import lakecompute as lc

    return lc


class _Compute:
    """The compute class of the column (made a compute function by `embed_column`). With ``trace`` (a
    folder) each worker process keeps a JSON file there of when it built the model and when it ran its
    first and last batch (wall clock), and the seconds spent in the model call: the eval's timeline."""

    def __init__(
        self, precision: str, trace: str | None = None, pinned: bool = True, decode: bool = False,
        tweak: str = "",
    ) -> None:  # fmt: skip
        began = time.time()
        _tweak(pinned, tweak)
        self.decode = decode
        self.embedder = Embedder(_lc().worker_device(), precision)
        self.trace = trace
        self.times: dict[str, Any] = {
            "lakecompute": _lc().__file__,
            "init": [began, time.time()],
            "first": None,
            "last": None,
            "batches": 0,
            "model": 0.0,
        }

    def __call__(self, batch: Any, sample_out: Any) -> None:
        t0 = time.time()
        # Decoded on the GPU (decode_on_device): the batch is a tensor there already.
        images = batch.images.torch() if self.decode else batch.images.numpy()
        sample_out.embedding.extend(self.embedder.embed(images))
        if self.trace:
            times = self.times
            times["first"] = times["first"] or t0
            times["last"] = time.time()
            times["batches"] += 1
            times["model"] += times["last"] - t0
            times["parts"] = self.embedder.parts
            with open(os.path.join(self.trace, f"{os.getpid()}.json"), "w") as fh:
                json.dump(times, fh)


def embed_column(
    precision: str, trace: str | None = None, pinned: bool = True, decode: bool = False, tweak: str = ""
) -> Any:
    """The compute function: ``Embedder`` built once per worker on ``lc.worker_device()``."""
    return _lc().compute(_Compute)(precision, trace, pinned, decode, tweak)


def _tweak(pinned: bool, tweak: str) -> None:
    """In this worker only, the A/B rows' other halves (by module name: ``lakecompute.compute`` is also
    lc.compute, the decorator), through its budget (`lakecompute.compute._budget`): batches in plain
    memory (``pinned=False``: its readers stack into plain arrays); ``tweak="switch"``: the
    interpreter's switch interval left at 5 ms while tasks run (the model's thread then gives its GIL to
    readers and the writer less often); ``tweak="readers2"``: 2 reader threads per task instead of 4
    (with decoding helpers, fewer threads to take turns on the GIL)."""
    budgets = importlib.import_module("lakecompute.compute._budget")
    derive = budgets.derive_budget

    def tweaked(*args: Any) -> Any:
        budget = derive(*args)
        if not pinned:
            budget = dataclasses.replace(budget, pinned=False)
        if tweak == "readers2":
            budget = dataclasses.replace(budget, readers=min(2, budget.readers))
        return budget

    budgets.derive_budget = tweaked
    if tweak == "switch":
        importlib.import_module("lakecompute.compute._overlap").SWITCH_INTERVAL = 0.005


def _timeline(trace: str, t0: float, t1: float) -> dict[str, Any]:
    """From the workers' trace files: seconds after the eval's start at which the first worker began
    building its model, the last finished building, the first batch ran, the last batch ended; and the
    seconds from the last batch to the eval's return (the commit)."""
    times = [json.loads(Path(trace, f).read_text()) for f in os.listdir(trace)]
    ran = [t for t in times if t["first"]]
    if not ran:
        return {}
    return {
        "workers": len(times),
        "build_start": min(t["init"][0] for t in times) - t0,
        "build_end": max(t["init"][1] for t in times) - t0,
        "first_batch": min(t["first"] for t in ran) - t0,
        "last_batch": max(t["last"] for t in ran) - t0,
        "after_last": t1 - max(t["last"] for t in ran),
        "model_s": sum(t["model"] for t in ran),
        "per_batch_ms": per_batch([t["parts"] for t in ran if "parts" in t]),
        "lakecompute": sorted({t["lakecompute"] for t in times}),
    }


def per_batch(parts: list[dict[str, float]]) -> dict[str, float]:
    """Milliseconds per batch in each part of `Embedder.embed`, over every worker's batches."""
    batches = sum(p["batches"] for p in parts)
    if not batches:
        return {}
    return {k: round(1000 * sum(p[k] for p in parts) / batches, 2) for k in ("copy", "launch", "wait")}


def _synth(seed: Any, sample_out: Any) -> None:
    """A 224x224 photo-like image: smooth colour fields (a 14x14 pattern scaled up) and fine grain."""
    from PIL import Image

    rng = np.random.default_rng(int(seed))
    small = Image.fromarray(rng.integers(0, 256, (14, 14, 3), dtype=np.uint8))
    image = np.asarray(small.resize((SIZE, SIZE), Image.BICUBIC), dtype=np.int16)
    image = image + rng.integers(-6, 7, image.shape, dtype=np.int16)
    sample_out.images.append(np.clip(image, 0, 255).astype(np.uint8))


# -- GPU busy -----------------------------------------------------------------------------------------


class Busy:
    """Samples NVML's GPU utilization of some GPUs every 20 ms on a thread, while in the ``with`` block."""

    def __init__(self, indices: list[int]) -> None:
        self.samples: list[float] = []
        self.error = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in _nvml_indices(pynvml, indices)]
        except Exception as exc:
            self._handles = []
            self.error = f"NVML unavailable: {type(exc).__name__}: {exc}"
        self._stop = threading.Event()

    def __enter__(self) -> Busy:
        if self._handles:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
            self.samples.append(sum(rates) / len(rates) / 100)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._handles:
            self._thread.join()

    def fractions(self) -> tuple[float | None, float | None]:
        """Busy over the whole block, and over its active span (first to last busy sample)."""
        s = self.samples
        if not s:
            return None, None
        busy = [k for k, v in enumerate(s) if v > 0]
        active = s[busy[0] : busy[-1] + 1] if busy else s
        return float(np.mean(s)), float(np.mean(active))


def _nvml_indices(pynvml: Any, torch_indices: list[int]) -> list[int]:
    """NVML's index of each CUDA device (they differ under CUDA_VISIBLE_DEVICES): matched by UUID when the
    environment restricts the devices, else the same indices."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return torch_indices
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    out = []
    for i in torch_indices:
        entry = entries[i]
        if entry.isdigit():
            out.append(int(entry))
            continue
        for k in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(k))
            if (uuid.decode() if isinstance(uuid, bytes) else uuid).startswith(entry):
                out.append(k)
    return out


# -- the suite ----------------------------------------------------------------------------------------


def _probe() -> tuple[list[int], dict[str, Any]] | str:
    """The CUDA GPUs to use and what they are, or why the suite skips."""
    if os.environ.get("BENCH_GPU_DRY"):
        return [], {"dry_run": True}
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    # device_count() does not initialise CUDA through torch (get_device_name would): this process stays
    # as a user's would, and its first fork-server run (the warm-up) preloads torch for the workers.
    count = torch.cuda.device_count()
    if not count:
        return f"no CUDA GPU visible (torch {torch.__version__}, CUDA build {torch.version.cuda})"
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": _gpu_names(list(range(count)))}
    try:
        import torchvision

        info["model"] = f"torchvision {torchvision.__version__} resnet50(weights=None)"
    except ImportError:
        info["model"] = "plain-torch ResNet-50 (bench/_resnet.py)"
    return list(range(count)), info


def _gpu_names(indices: list[int]) -> list[str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in _nvml_indices(pynvml, indices)]
        return [str(pynvml.nvmlDeviceGetName(h)) for h in handles]
    except Exception as exc:
        return [f"unknown ({type(exc).__name__})"] * len(indices)


def _where(x: Any, sample_out: Any) -> None:
    sample_out.x.append(np.int64(x))


def _warm_up(tmp: str, gpus: list[int]) -> None:
    """An eval with devices over a few inputs, untimed: starts this process's fork server (once per
    process, torch preloaded), which every later eval with devices forks its workers from."""
    if not gpus:
        return
    lc = _lc()
    out = lc.empty(os.path.join(tmp, "warm"), overwrite=True)
    out.create_tensor("x", dtype="int64")
    t0 = time.perf_counter()
    lc.compute(_where)().eval(list(range(8)), out, num_workers=len(gpus), devices="cuda", progressbar=False)
    print(
        f"  fork server started in {time.perf_counter() - t0:.1f} s (once per process; not timed)", flush=True
    )


def _make_images(path: str, n: int) -> Any:
    lc = _lc()
    ds = lc.empty(path, overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="jpeg")
    t0 = time.perf_counter()
    lc.compute(_synth)().eval(list(range(n)), ds, num_workers=max(2, os.cpu_count() or 2), progressbar=False)
    print(f"  made {n} JPEG images {SIZE}x{SIZE} in {time.perf_counter() - t0:.1f} s", flush=True)
    return ds


def _eval(ds: Any, n: int, config: Config, gpus: list[int]) -> dict[str, Any]:
    if "embedding" in ds.tensors:
        ds.delete_tensor("embedding")
    ds.create_tensor("embedding", htype="embedding", dtype="float32")
    trace = os.path.join(os.path.dirname(ds.path), f"trace-{time.time_ns()}")
    os.makedirs(trace)
    workers = config.per_gpu * max(1, len(gpus))
    devices = "cuda" if gpus else None
    with Busy(gpus) as busy:
        wall0, t0 = time.time(), time.perf_counter()
        result = embed_column(config.precision, trace, config.pinned, config.decode, config.tweak).eval(
            ds, num_workers=workers, devices=devices, batch_size=config.batch, skip_ok=True,
            progressbar=False, decode_on_device=config.decode,
        )  # fmt: skip
        seconds = time.perf_counter() - t0
    timeline = _timeline(trace, wall0, wall0 + seconds)
    assert result.outputs["embedding"] == n, result
    emb = ds.embedding[0:4].numpy()
    assert emb.shape == (4, 2048)
    assert np.isfinite(emb).all()
    whole, active = busy.fractions()
    return {"seconds": seconds, "images_per_s": n / seconds, "busy": whole, "busy_active": active,
            "stages": result.stages, "workers": workers, "devices": devices,
            "timeline": timeline}  # fmt: skip


def _loop(ds: Any, n: int, batch: int, precision: str, kind: str, gpus: list[int]) -> dict[str, Any]:
    """A loop of ``kind`` (`bench._gpu_loops`) in a fresh process, with the GPUs' busy fraction."""
    devices = [f"cuda:{g}" for g in gpus] or ["cpu"]
    with Busy(gpus) as busy:
        out = run_loop(ds.path, n, batch, precision, devices, kind)
    whole, active = busy.fractions()
    return {**out, "busy": whole, "busy_active": active}


@dataclass(frozen=True)
class Config:
    """One row's eval and the loop beside it.

    Attributes:
        name: the row's name.
        precision: ``"fp32"`` or ``"bf16"``.
        per_gpu: workers per GPU.
        batch: the batch size (the loop's too).
        pinned: batches in page-locked memory (the default; False is the A/B's other half).
        decode: ours decodes the JPEGs on the GPU (``decode_on_device=True``).
        loop: the loop beside it (`bench._gpu_loops`: ``memory``, ``device`` or ``cpu``).
        bound: the GPU-bound configuration: the loop and ours both >= 80% busy.
        versus_cpu: also a row against the CPU-decoding loop (device decoding >= 1.5x it).
        tweak: ``"switch"`` or ``"readers2"``: an A/B of a worker's host time per model call (`_tweak`).
    """

    name: str
    precision: str
    per_gpu: int
    batch: int = BATCH
    pinned: bool = True
    decode: bool = False
    loop: str = "memory"
    bound: bool = False
    versus_cpu: bool = False
    tweak: str = ""


def _configs(gpus: list[int]) -> list[Config]:
    """The rows: fp32 and bf16 with 1, 2 and 4 workers per GPU at batch 64 (``BENCH_GPU_FP32`` and
    ``BENCH_GPU_BF16`` list the counts); one worker per GPU with unpinned batches, the A/B of page-locked
    memory (``BENCH_GPU_UNPINNED``); one bf16 worker with a 5 ms switch interval and with 2 readers, A/Bs
    of the host time per model call (``BENCH_GPU_TWEAKS``, see `_tweak`); the GPU-bound configuration, bf16
    at batch 256 (``BENCH_GPU_BOUND``, 0 to leave out), decoded on the CPU and on the GPU; device decoding,
    bf16 at batch 64, against a loop that decodes on the device and, at one worker, one that decodes on the
    CPU (``BENCH_GPU_DECODE``).
    ``devices="cuda"`` with ``num_workers`` a multiple of the GPUs places that many on each (round robin).
    The dry run (no GPU) runs the plumbing on the CPU: a worker, unpinned, the memory and CPU loops."""
    if not gpus:
        return [Config("cpu, 1 worker", "fp32", 1, 16),
                Config("cpu, 1 worker, unpinned", "fp32", 1, 16, pinned=False),
                Config("cpu, 1 worker (CPU-decoding loop)", "fp32", 1, 16, loop="cpu")]  # fmt: skip
    out = []
    for precision in ("fp32", "bf16"):
        for k in _counts(os.environ.get(f"BENCH_GPU_{precision.upper()}", "1,2,4")):
            out.append(Config(f"{precision}, {_workers(k)}/GPU", precision, k))
        for k in _counts(os.environ.get("BENCH_GPU_UNPINNED", "1")):
            out.append(Config(f"{precision}, {_workers(k)}/GPU, unpinned", precision, k, pinned=False))
    for tweak in os.environ.get("BENCH_GPU_TWEAKS", "switch,readers2").split(","):
        if tweak.strip():
            out.append(Config(f"bf16, 1 worker/GPU, {tweak.strip()}", "bf16", 1, tweak=tweak.strip()))
    bound = int(os.environ.get("BENCH_GPU_BOUND", "256") or 0)
    if bound:
        name = f"bf16, batch {bound}, 1 worker/GPU (GPU-bound)"
        out.append(Config(name, "bf16", 1, bound, bound=True))
        out.append(
            Config(name.replace("(", "decoded on the GPU ("), "bf16", 1, bound, decode=True, bound=True)
        )
    for k in _counts(os.environ.get("BENCH_GPU_DECODE", "1")):
        name = f"bf16, {_workers(k)}/GPU, decoded on the GPU"
        out.append(Config(name, "bf16", k, decode=True, loop="device", versus_cpu=k == 1))
    return out


def _workers(k: int) -> str:
    return f"{k} worker{'s' if k > 1 else ''}"


def _counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


@suite("gpu")
def run(opts: Any) -> list[Row]:
    """ResNet-50 embedding column over 20,000 JPEGs on every GPU vs hand-written loops (or skips)."""
    probe = _probe()
    details: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    if isinstance(probe, str):
        print(f"  gpu: skipped: {probe}")
        _write({**details, "skipped": probe})
        return []
    gpus, info = probe
    details.update(info)
    n = 64 if not gpus else (2_000 if opts.quick else int(os.environ.get("BENCH_GPU_IMAGES", N_IMAGES)))
    rows: list[Row] = []
    with scratch_dir("lc-bench-gpu-") as tmp:
        ds = _make_images(os.path.join(tmp, "images"), n)
        _warm_up(tmp, gpus)
        loops: dict[tuple[str, int, str], dict[str, Any]] = {}

        def loop(precision: str, batch: int, kind: str) -> dict[str, Any]:
            key = (precision, batch, kind)
            if key not in loops:
                loops[key] = _loop(ds, n, batch, precision, kind, gpus)
                details[f"loop {kind} {precision} batch {batch}"] = loops[key]
                print(f"  loop {kind} {precision} batch {batch}: {_describe(loops[key])}", flush=True)
            return loops[key]

        for config in _configs(gpus):
            base = loop(config.precision, config.batch, config.loop)
            ours = _eval(ds, n, config, gpus)
            details[f"eval {config.name}"] = ours
            print(f"  eval {config.name}: {_describe(ours)}; stages {_stages(ours['stages'])}", flush=True)
            print(f"    timeline (s after the call): {_stages(ours['timeline'])}", flush=True)
            rows.append(_row(config, n, ours, base, len(gpus)))
            if config.versus_cpu:
                rows.append(
                    _row(config, n, ours, loop(config.precision, config.batch, "cpu"), len(gpus), 1.5)
                )
    _write(details)
    return rows


_LOOPS = {
    "memory": "loop fed from memory",
    "device": "loop decoding on the GPU",
    "cpu": "loop decoding on the CPU",
}


def _row(
    config: Config, n: int, ours: dict[str, Any], loop: dict[str, Any], gpus: int, at_least: float = 0.95
) -> Row:
    """Ours beside ``loop``: images/s at least ``at_least`` times the loop's, GPU busy at least the loop's
    (and, GPU-bound, both at least 80%)."""
    busy, loop_busy = ours["busy"], loop["busy"]
    fast = ours["images_per_s"] >= at_least * loop["images_per_s"]
    target = f">= {at_least}x loop, busy >= loop's" + (", both >= 80%" if config.bound else "")
    ok = None
    if busy is not None and loop_busy is not None:
        ok = fast and busy >= loop_busy and (not config.bound or min(busy, loop_busy) >= 0.8)
    kind = "cpu" if at_least != 0.95 else config.loop
    return Row(
        f"ResNet-50 column, {config.name}",
        ours["images_per_s"],
        loop["images_per_s"],
        "/s",
        target=target,
        ok=ok,
        baseline_name=_LOOPS[kind],
        note=(
            f"{n} JPEG {SIZE}x{SIZE}, batch {config.batch}, {gpus} GPU(s); "
            f"GPU busy {_pct(busy)} of the eval, "
            f"{_pct(ours['busy_active'])} of its active span (loop {_pct(loop_busy)}); "
            f"stages {_stages(ours['stages'])}{_steady(ours, loop, n)}"
        ),
    )


def _steady(ours: dict[str, Any], loop: dict[str, Any], n: int) -> str:
    """The rates over the batches alone, start-up left out (the eval from its first batch to its last,
    the loop over its steady span), for the note: with 20,000 images start-up is half of each run."""
    timeline = ours.get("timeline") or {}
    span = float(timeline.get("last_batch", 0.0)) - float(timeline.get("first_batch", 0.0))
    steady = loop.get("steady_seconds")
    if span <= 0 or not steady:
        return ""
    return f"; batches alone {n / span:,.0f}/s vs the loop's {n / steady:,.0f}/s ({steady / span:.2f}x)"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _stages(stages: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in stages.items())


def _describe(result: dict[str, Any]) -> str:
    return (
        f"{result['images_per_s']:,.0f} images/s in {result['seconds']:.1f} s, "
        f"GPU busy {_pct(result['busy'])} "
        f"({_pct(result['busy_active'])} of the active span)"
        + (f"; per batch, ms: {result['per_batch_ms']}" if result.get("per_batch_ms") else "")
    )


def _write(details: dict[str, Any]) -> None:
    path = os.environ.get("BENCH_GPU_JSON")
    if path:
        with open(path, "w") as fh:
            json.dump(details, fh, indent=2, default=str)
        print(f"  gpu: details written to {path}")
