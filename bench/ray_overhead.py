"""Ray's cost on one machine (issue 19): W1 and W2 with ``scheduler="ray"`` next to ``"processed"``, the
overhead per task of each scheduler, and Ray's start-up cost, each measured separately.

* W1: 60,000 28x28 uint8 images + labels, vertical flip; W2: 2,000 PNG images of 200-320 px, flip ->
  resize 64x64 -> PNG (``bench.transforms``'s workloads), local disk -> local disk, 2 workers.
* Overhead per task: 400 tasks that do nothing, through ``Scheduler.run`` (so nothing but the
  scheduler is timed), divided by the task count.
* Start-up: ``ray.init`` of a local Ray with 2 CPUs, and the first eval after it (Ray starts its worker
  processes and imports lakecompute in them), both timed once.

Runs are interleaved; medians of ``--runs``. Creating ``data_out`` is not timed.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench import Row, rate, scratch_dir, suite
from bench.transforms import N1, N2, SIZE, _image_dataset, _Png, _png, functions, photos

REPO_ROOT = Path(__file__).resolve().parents[1]
TASKS = 400


def _noop(task: int, progress: Any) -> int:
    return task


def _per_task_ms(scheduler: Any) -> float:
    t0 = time.perf_counter()
    for _ in scheduler.run(_noop, range(TASKS)):
        pass
    return (time.perf_counter() - t0) / TASKS * 1000


def _timed(pipeline: Any, ds: Any, out_url: str, scheduler: str) -> float:
    import lakecompute as lc

    out = lc.like(out_url, ds, overwrite=True)
    t0 = time.perf_counter()
    pipeline.eval(ds, out, num_workers=2, scheduler=scheduler, progressbar=False)
    return time.perf_counter() - t0


def _start_ray() -> float:
    import ray

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 * 1024,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})  # fmt: skip
    return time.perf_counter() - t0


def _inputs(tmp: str, quick: bool) -> dict[str, tuple[Any, Any, int]]:
    from bench._data import mnist_like

    fns = functions()
    n1, n2 = (6_000, 200) if quick else (N1, N2)
    images, labels = mnist_like(n1)
    w1 = _image_dataset(f"{tmp}/w1", images, labels)
    pics, pic_labels = photos(n2)
    w2 = _image_dataset(f"{tmp}/w2", [_Png(_png(p)) for p in pics], pic_labels, sample_compression="png")
    return {
        "W1": (fns["flip"](), w1, n1),
        "W2": (fns["compose"]([fns["flip"](), fns["resize"](new_size=SIZE)]), w2, n2),
    }


@suite("ray")
def ray_overhead(opts: Any) -> list[Row]:
    """W1, W2 and per-task overhead with Ray next to processed (one machine, 2 workers); Ray's start-up."""
    import ray

    from lakecompute.schedulers import get_scheduler

    if ray.is_initialized():
        ray.shutdown()
    runs = max(1, int(getattr(opts, "runs", 3)))
    start = _start_ray()
    try:
        with scratch_dir("lc-bench-ray-") as tmp:
            work = _inputs(tmp, bool(getattr(opts, "quick", False)))
            pipeline, ds, _ = work["W1"]
            first = _timed(pipeline, ds, f"{tmp}/first", "ray")  # Ray starts its workers here
            times: dict[tuple[str, str], list[float]] = {}
            per_task: dict[str, list[float]] = {"processed": [], "ray": []}
            for _ in range(runs):
                for name in ("processed", "ray"):
                    per_task[name].append(_per_task_ms(get_scheduler(name, 2)))
                    for wl, (pipeline, ds, _) in work.items():
                        times.setdefault((wl, name), []).append(_timed(pipeline, ds, f"{tmp}/o", name))
    finally:
        ray.shutdown()
    return _rows(work, times, per_task, start, first, runs)


def _rows(
    work: dict[str, tuple[Any, Any, int]],
    times: dict[tuple[str, str], list[float]],
    per_task: dict[str, list[float]],
    start: float,
    first: float,
    runs: int,
) -> list[Row]:
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = []
    print(f"\nRay next to processed, 2 workers, local disk (median of {runs}):")
    for wl, (_, _, n) in work.items():
        for name in ("processed", "ray"):
            print(f"  {wl} {name:<10} {med[(wl, name)]:7.3f} s  {rate(n, med[(wl, name)]):9.0f} samples/s")
        rows.append(Row(f"{wl}, ray vs processed, 2 workers", rate(n, med[(wl, "ray")]),
                        rate(n, med[(wl, "processed")]), "samples/s", baseline_name="processed",
                        note=f"{n:,} samples; ray runs: " + ", ".join(f"{x:.2f}" for x in times[(wl, "ray")])
                        + " s"))  # fmt: skip
    task_ms = {k: statistics.median(v) for k, v in per_task.items()}
    print(f"  overhead per task: processed {task_ms['processed']:.2f} ms, ray {task_ms['ray']:.2f} ms")
    print(f"  start-up: ray.init {start:.1f} s; first W1 eval on a fresh Ray {first:.1f} s")
    note = f"{TASKS} tasks through Scheduler.run, 2 workers"
    rows.append(Row("overhead per empty task, ray vs processed", task_ms["ray"], task_ms["processed"], "ms",
                    baseline_name="processed", note=note))  # fmt: skip
    rows.append(Row("ray.init (local, 2 CPUs)", start, None, "s", note="once, not in the rows above"))
    rows.append(
        Row("first W1 eval on a fresh Ray", first, None, "s", note="Ray starts and warms its workers")
    )
    return rows
