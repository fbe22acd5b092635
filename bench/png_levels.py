"""PNG levels (issue 29): the bytes and the encode / decode time of W2's outputs at each zlib level.

W2 writes 2,000 images of 64x64 RGB (its photos flipped and resized); the level lakecompute encodes PNG
at (``lakecompute.compression``) is chosen from this table: the fewest bytes for the least time. Each
level encodes the same images, interleaved with the others, the median of ``--runs`` passes.
"""

from __future__ import annotations

import io
import statistics
import time
from typing import Any

import numpy as np

from bench import Row, suite


def _outputs(n: int) -> list[np.ndarray]:
    """W2's outputs: its photos flipped and resized to 64x64 (bilinear), as the eval writes them."""
    from PIL import Image

    from bench.transforms import SIZE, photos

    pics, _ = photos(n)
    return [
        np.asarray(Image.fromarray(np.flip(p, axis=0)).resize(SIZE, Image.Resampling.BILINEAR)) for p in pics
    ]


def _encode(images: list[np.ndarray], level: int) -> tuple[float, list[bytes]]:
    from PIL import Image

    t0 = time.perf_counter()
    out = []
    for a in images:
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG", compress_level=level)
        out.append(buf.getvalue())
    return time.perf_counter() - t0, out


def _decode(blobs: list[bytes]) -> float:
    from PIL import Image

    t0 = time.perf_counter()
    for b in blobs:
        np.asarray(Image.open(io.BytesIO(b)))
    return time.perf_counter() - t0


@suite("png-levels")
def png_levels(opts: Any) -> list[Row]:
    """W2's 64x64 outputs encoded as PNG at every zlib level: bytes, encode and decode time."""
    from lakecompute.compression import PNG_LEVEL

    n = 300 if opts.quick else 2_000
    runs = max(1, int(opts.runs))
    images = _outputs(n)
    levels = list(range(10))
    enc: dict[int, list[float]] = {lv: [] for lv in levels}
    dec: dict[int, list[float]] = {lv: [] for lv in levels}
    size: dict[int, int] = {}
    for _ in range(runs):
        for lv in levels:
            seconds, blobs = _encode(images, lv)
            enc[lv].append(seconds)
            dec[lv].append(_decode(blobs))
            size[lv] = sum(map(len, blobs))
    raw = sum(a.nbytes for a in images)
    rows = []
    print(f"\n== png-levels: {n:,} images of 64x64 RGB ({raw / 1e6:.2f} MB raw), median of {runs} ==")
    print(f"{'level':>5}  {'bytes':>10}  {'ratio':>6}  {'encode':>10}  {'decode':>10}")
    for lv in levels:
        e, d = statistics.median(enc[lv]), statistics.median(dec[lv])
        mark = "  <- lakecompute" if lv == PNG_LEVEL else ""
        per_enc, per_dec = e * 1e6 / n, d * 1e6 / n
        ratio = raw / size[lv]
        print(f"{lv:>5}  {size[lv]:>10,}  {ratio:>5.2f}x  {per_enc:>7.1f} us  {per_dec:>7.1f} us{mark}")
        rows.append(
            Row(f"PNG level {lv}: encode per image", e * 1e6 / n, None, "us", note=f"{size[lv]:,} bytes")
        )
    return rows
