"""``python -m bench decode-scaling``: how reading JPEG batches through lakecompute scales over threads of
one process and over processes.

The workload of ``bench gpu`` without the GPU: 224x224 photo-like JPEGs (made by ``bench.gpu``'s own
generator), read in batches of 64 (``ds.images[i:i + 64].numpy()``: read, verify, decode, stack). Each
row is images/s for one layout of the same work, beside one thread in one process. Threads of one
process share its GIL (Pillow's header parsing and the copies out of it hold it, the decode itself does
not), so they stop scaling where processes go on: why a worker decodes on at most four reader threads
(``compute/_overlap.py`` ``MAX_READERS``) and why a decode-bound model column wants several workers.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import multiprocess

from bench import Row, scratch_dir, suite

BATCH = 64


def _read(path: str, starts: list[int], threads: int) -> None:
    """Read the batches at ``starts`` on ``threads`` threads of this process."""
    import lakecompute as lc

    images = lc.load(path, read_only=True).images
    parts = [starts[k::threads] for k in range(threads)]

    def work(part: list[int]) -> None:
        for start in part:
            images[start : start + BATCH].numpy()

    workers = [threading.Thread(target=work, args=(part,)) for part in parts]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def _in_processes(args: tuple[str, list[int], int]) -> None:
    _read(*args)


def _rate(path: str, n: int, processes: int, threads: int) -> float:
    starts = list(range(0, n - BATCH + 1, BATCH))
    if processes == 1:
        _read(path, starts[:2], 1)  # opened and warm, as a worker is
        t0 = time.perf_counter()
        _read(path, starts, threads)
        return len(starts) * BATCH / (time.perf_counter() - t0)
    with multiprocess.get_context("fork").Pool(processes) as pool:
        pool.map(_in_processes, [(path, starts[:1], 1)] * processes)  # the pool started and warm
        t0 = time.perf_counter()
        pool.map(_in_processes, [(path, starts[k::processes], threads) for k in range(processes)])
        return len(starts) * BATCH / (time.perf_counter() - t0)


@suite("decode-scaling")
def run(opts: Any) -> list[Row]:
    """224x224 JPEG batches read on 1-16 threads of one process and on processes, beside one thread."""
    from bench.gpu import _make_images

    cpus = len(os.sched_getaffinity(0))
    n = 1024 if opts.quick else 4096
    layouts = [(1, t) for t in (1, 2, 4, 8, 16)]
    layouts += [(p, max(1, cpus // p)) for p in (2, 4, 8, 16) if p <= cpus]
    rows: list[Row] = []
    with scratch_dir("lc-bench-decode-") as tmp:
        path = os.path.join(tmp, "images")
        _make_images(path, n)
        one = _rate(path, n, 1, 1)
        for processes, threads in layouts:
            rate = one if (processes, threads) == (1, 1) else _rate(path, n, processes, threads)
            rows.append(
                Row(
                    f"{processes} process{'es' if processes > 1 else ''} x {threads} thread(s)",
                    rate,
                    one,
                    "/s",
                    baseline_name="1 process, 1 thread",
                    note=f"{n} JPEG 224x224 in batches of {BATCH}, {cpus} CPUs",
                )
            )
    return rows
