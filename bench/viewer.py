"""The viewer (issue 42): the first page of a 100,000-image dataset is served as fast as a 100-image one's.

A page of the grid is what the browser asks for when it opens the viewer: ``/api/info``, ``/api/samples``
(48 rows with their captions) and the 48 thumbnails, rendered from the stored chunks with their boxes drawn.
Each run starts a fresh viewer (an empty thumbnail cache, a handle opened anew) on the dataset and times those
50 requests over HTTP on 127.0.0.1, one after another. The datasets are 32x32 PNG images with a class label
and a box each, built through the public API; the baseline is the same page of a 100-image dataset, so a
ratio near 1 says the first page costs the same whatever the dataset's size (the target: within 2x).

Also shown, without a target: a page deep in the large dataset (rows 50,000 on), and the sidebar's counts
of the label tensor (one pass over a column: grows with the rows).
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from bench import Row, scratch_dir, suite

SIZES = (100, 100_000)
PAGE = 48


def build(path: str, rows: int) -> Any:
    """``rows`` 32x32 PNG images (a square of the row's class on a gradient), labels and a box each."""
    import lakecompute as lc

    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["a", "b", "c"])
        ds.create_tensor("boxes", htype="bbox")
    base = np.broadcast_to(np.linspace(20, 200, 32, dtype=np.uint8)[:, None, None], (32, 32, 3))
    for start in range(0, rows, 10_000):
        n = min(10_000, rows - start)
        labels = np.arange(start, start + n) % 3
        images = np.repeat(base[None], n, axis=0).copy()
        for c in range(3):
            images[labels == c, 8:24, 8:24, c] = 255
        boxes = np.repeat(np.array([[[8, 8, 24, 24]]], np.float32), n, axis=0)
        ds.extend({"images": list(images), "labels": labels, "boxes": list(boxes)})
    return ds


def _get(conn: http.client.HTTPConnection, target: str) -> bytes:
    conn.request("GET", target)
    reply = conn.getresponse()
    body = reply.read()
    assert reply.status == 200, (target, reply.status, body[:200])
    return body


def page_ms(path: str, offset: int = 0) -> float:
    """Milliseconds a fresh viewer takes to serve one page of the grid at ``offset`` (see the docstring)."""
    from lakecompute.viewer import serve

    with serve(path, open_browser=False) as viewer:
        parts = urlsplit(viewer.url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
        t0 = time.perf_counter()
        _get(conn, "/api/info")
        rows = json.loads(_get(conn, f"/api/samples?offset={offset}&limit={PAGE}"))["rows"]
        for row in rows:
            _get(conn, row["thumb"])
        seconds = time.perf_counter() - t0
        conn.close()
    assert len(rows) == PAGE
    return seconds * 1e3


def counts_ms(path: str) -> float:
    """Milliseconds of the sidebar's counts of ``labels`` on a fresh viewer."""
    from lakecompute.viewer import serve

    with serve(path, open_browser=False) as viewer:
        parts = urlsplit(viewer.url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
        t0 = time.perf_counter()
        _get(conn, "/api/count?tensor=labels")
        seconds = time.perf_counter() - t0
        conn.close()
    return seconds * 1e3


def _median(runs: int, fn: Any) -> tuple[float, list[float]]:
    values = [fn() for _ in range(max(3, runs))]
    return statistics.median(values), values


@suite("viewer")
def viewer_suite(options: Any) -> list[Row]:
    """The viewer's first page of a 100,000-image dataset beside a 100-image one (within 2x)."""
    small_n, large_n = (SIZES[0], SIZES[1] // 10) if options.quick else SIZES
    with scratch_dir() as tmp:
        small, large = f"{tmp}/small", f"{tmp}/large"
        t0 = time.perf_counter()
        build(small, small_n)
        build(large, large_n)
        built = time.perf_counter() - t0
        at_small, _ = _median(options.runs, lambda: page_ms(small))
        at_large, spread = _median(options.runs, lambda: page_ms(large))
        deep, _ = _median(options.runs, lambda: page_ms(large, large_n // 2))
        counted = counts_ms(large)
    runs = ", ".join(f"{v:.0f}" for v in spread)
    note = f"{PAGE} thumbnails + info + samples, fresh server each run; runs {runs} ms"
    rows = [
        Row(
            f"first page, {large_n:,} images",
            at_large,
            at_small,
            "ms",
            target=">= 0.5x (within 2x of the small dataset)",
            ok=at_large <= 2 * at_small,
            baseline_name=f"the same page of {small_n:,} images",
            note=note + f"; datasets built in {built:.0f} s",
        ),
        Row(
            f"a page at row {large_n // 2:,} of {large_n:,}",
            deep,
            at_small,
            "ms",
            baseline_name=f"the first page of {small_n:,} images",
        ),
    ]
    if counted is not None:
        rows.append(
            Row(f"sidebar counts of labels, {large_n:,} rows", counted, None, "ms", note="one column pass")
        )
    return rows
