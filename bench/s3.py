"""S3 (issue 6): W2 with its data on S3 (a local moto server), next to the same run on local disk.

W2 is ``bench.transforms``'s workload: RGB images of 200-320 px stored as PNG, flip -> bilinear
resize to 64x64 (a ``compose`` of two steps), output PNG. Each variant transforms a dataset into a
new one with 2 workers:

* local disk -> local disk, processed (the reference),
* S3 -> S3, processed (workers start from a fork server: object-store clients are not fork-safe),
* S3 -> S3, ray (a local Ray with 2 CPUs, started once, not timed),
* local disk -> local disk, ray.

moto keeps objects in its own process's memory and serves them over HTTP on 127.0.0.1, so the S3
rows measure the cost of going through an object-store client and HTTP per chunk, not a network.
Runs are interleaved and the median of ``--runs`` is reported; creating data_out is not timed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import Row, rate, scratch_dir, suite
from bench.transforms import N2, SIZE, _Png, _png, functions, photos

REPO_ROOT = Path(__file__).resolve().parents[1]


def _timed_eval(
    pipeline: Any, ds: Any, out_url: str, scheduler: str, options: dict[str, Any] | None
) -> float:
    import lakecompute as lc

    out = lc.like(out_url, ds, overwrite=True, storage_options=options)
    t0 = time.perf_counter()
    pipeline.eval(ds, out, num_workers=2, scheduler=scheduler, progressbar=False)
    return time.perf_counter() - t0


def _build(url: str, blobs: list[bytes], labels: Any, options: dict[str, Any] | None) -> Any:
    import lakecompute as lc

    ds = lc.empty(url, overwrite=True, storage_options=options)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=[str(i) for i in range(10)])
        ds.images.extend([_Png(b) for b in blobs])
        ds.labels.extend(labels)
    return ds


def _start_ray() -> bool:
    """Start a local Ray of 2 CPUs unless one is running; whether this call started it."""
    import ray

    if ray.is_initialized():
        return False
    ray.init(
        address="local",  # our own instance, whatever other cluster runs on the machine
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}},
    )
    return True


def _time_runs(plan: dict[str, Callable[[], float]], runs: int) -> dict[str, list[float]]:
    """Each of ``plan``'s runs once to warm up, then ``runs`` times interleaved: the times, per key."""
    for fn in plan.values():
        fn()  # warm up: imports in workers, the fork server, Ray's worker processes
    times: dict[str, list[float]] = {k: [] for k in plan}
    for _ in range(runs):
        for key, fn in plan.items():
            times[key].append(fn())
    return times


@suite("s3")
def s3(opts: Any) -> list[Row]:
    """W2 (PNG flip + resize) on S3 (moto) with processed and ray, 2 workers, next to local disk."""
    import ray

    from tests.s3.moto_server import start_moto_server

    quick = bool(getattr(opts, "quick", False))
    runs = max(1, int(getattr(opts, "runs", 3)))
    n = 300 if quick else N2
    fns = functions()
    pipeline = fns["compose"]([fns["flip"](), fns["resize"](new_size=SIZE)])
    server = start_moto_server()
    started_ray = _start_ray()
    try:
        with scratch_dir("lc-bench-s3-") as tmp:
            bucket = server.create_bucket()
            so = server.storage_options()
            pics, labels = photos(n)
            blobs = [_png(p) for p in pics]
            del pics
            local = _build(f"{tmp}/w2", blobs, labels, None)
            remote = _build(f"s3://{bucket}/w2", blobs, labels, so)
            plan: dict[str, Callable[[], float]] = {
                "local, processed": lambda: _timed_eval(pipeline, local, f"{tmp}/out-p", "processed", None),
                "S3, processed": lambda: _timed_eval(
                    pipeline, remote, f"s3://{bucket}/out-p", "processed", so
                ),
                "S3, ray": lambda: _timed_eval(pipeline, remote, f"s3://{bucket}/out-r", "ray", so),
                "local, ray": lambda: _timed_eval(pipeline, local, f"{tmp}/out-r", "ray", None),
            }
            times = _time_runs(plan, runs)
    finally:
        if started_ray:
            ray.shutdown()
        server.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    reference = rate(n, med["local, processed"])
    rows = []
    print(f"\nW2 {n:,} PNG images, flip -> resize 64x64, 2 workers (median of {runs}):")
    for key in plan:
        print(f"  {key:<18} {med[key]:7.3f} s  {rate(n, med[key]):8.1f} images/s")
        rows.append(
            Row(
                f"W2 {key}, 2 workers",
                rate(n, med[key]),
                reference,
                "images/s",
                baseline_name="local disk, processed",
                note=f"{n:,} images; runs: " + ", ".join(f"{x:.2f}" for x in times[key]) + " s",
            )
        )
    return rows
