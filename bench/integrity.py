"""What verified reads cost (the ``integrity`` suite): a scan and W1 with crc32c checksums and
missing-chunk checks, on against off, interleaved in one process.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from bench import Row, Timer, rate, scratch_dir, suite
from bench.storage import N, mnist_like_cached, new_ds


@contextlib.contextmanager
def unverified() -> Iterator[None]:
    """Write and read as before integrity checks: no crc32c codec in new chunk chains, and missing
    chunks read as fill values. For measuring what the checks cost, side by side; never for real use.

    The patches are on module and class attributes, so worker processes forked inside inherit them.
    """
    from zarr.codecs import ZstdCodec

    from lakecompute.storage._checked import CheckedStore
    from lakecompute.versioned import _segments

    saved = (_segments.segment_codecs, _segments.checked_codecs, CheckedStore.get)

    async def get(self: Any, key: str, prototype: Any, byte_range: Any = None) -> Any:
        return await self._store.get(key, prototype, byte_range)

    _segments.segment_codecs = lambda c: tuple(c) or (ZstdCodec(level=_segments.PADDING_CODEC_LEVEL),)
    _segments.checked_codecs = lambda c: tuple(c)
    CheckedStore.get = get  # type: ignore[method-assign]
    try:
        yield
    finally:
        _segments.segment_codecs, _segments.checked_codecs, CheckedStore.get = saved  # type: ignore[method-assign]


def _checked(verify: bool) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext() if verify else unverified()


def _interleaved(fn: Callable[[bool], float], runs: int) -> tuple[list[float], list[float]]:
    """``fn(True)`` and ``fn(False)`` timed ``runs`` times each, after a warm-up: the times, on and off."""
    fn(True)  # warm up (imports, page cache, the pool's first start)
    on: list[float] = []
    off: list[float] = []
    for i in range(runs):
        # Interleaved, first one then the other first, so that noise and order hit both alike.
        for verify in (True, False) if i % 2 == 0 else (False, True):
            (on if verify else off).append(fn(verify))
    return on, off


def _integrity_row(name: str, n: int, runs: int, on: list[float], off: list[float]) -> Row:
    """The row of one integrity measurement: checks on against checks off."""
    # The best of several interleaved runs: what the checks cost, with as little of the shared
    # machine's noise as one can get (the medians' ratio is in the note).
    med_on, med_off = min(on), min(off)
    note = (
        f"{n:,} 28x28; best of {runs}, on/off interleaved, alternating which goes first; "
        f"medians: {statistics.median(off) / statistics.median(on):.2f}x"
    )
    if name == "scan":
        r = Row(
            "integrity cost: scan sample by sample",
            rate(n, med_on),
            rate(n, med_off),
            "samples/s",
            ">= 0.95x baseline",
            baseline_name="same scan, checks off (no crc32c, no missing-chunk check)",
            note=note,
        )
    else:
        r = Row(
            f"integrity cost: {name} (flip)",
            med_on * 1e3,
            med_off * 1e3,
            "ms",
            ">= 0.95x baseline",
            baseline_name="same eval, checks off",
            note=note,
        )
    r.ok = (r.ratio or 0) >= 0.95
    return r


@suite("integrity")
def integrity(opts: Any) -> list[Row]:
    """What verified reads cost: scan and W1 with checksums and missing-chunk checks, on vs off."""
    import lakecompute as lc

    runs = max(6, int(opts.runs))
    n = 10_000 if opts.quick else N
    images, labels = mnist_like_cached(n)

    @lc.compute
    def flip(sample_in: Any, sample_out: Any) -> None:
        sample_out.append(
            {"labels": sample_in.labels.numpy(), "images": np.flip(sample_in.images.numpy(), axis=0)}
        )

    rows: list[Row] = []
    with scratch_dir("lc-bench-integrity-") as tmp:
        for verify in (True, False):
            with _checked(verify):
                ds = new_ds(f"{tmp}/src-{verify}", labels=True)
                ds.extend({"images": images, "labels": labels})

        def scan(verify: bool) -> float:
            with _checked(verify):
                ds = lc.load(f"{tmp}/src-{verify}", read_only=True)
                with Timer() as t:
                    for v in ds.images:
                        v.numpy()
            return t.seconds

        def w1(verify: bool, workers: int) -> float:
            with _checked(verify):
                src = lc.load(f"{tmp}/src-{verify}", read_only=True)
                out = lc.like(f"{tmp}/out-{verify}", src, overwrite=True)
                with Timer() as t:
                    flip().eval(src, out, num_workers=workers, progressbar=False)
            return t.seconds

        timed: dict[str, Any] = {
            "scan": scan,
            "W1 eval, 0 workers": lambda v: w1(v, 0),
            "W1 eval, 2 workers": lambda v: w1(v, 2),
        }
        for name, fn in timed.items():
            rows.append(_integrity_row(name, n, runs, *_interleaved(fn, runs)))
    return rows
