"""Benchmarks: ``python -m bench`` runs every registered suite, ``python -m bench NAME …`` some.

A suite is a function registered with :func:`suite` in a module of this package (``bench/storage.py``,
``bench/transforms.py``, …); ``python -m bench`` imports every module here, so a new file that
registers a suite is picked up without touching anything else. A suite returns :class:`Row` s, and
each row is printed next to its baseline (plain zarr, Pillow, … doing the same work), with the
ratio and, when the row has a target, PASS or MISS.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SUITES", "Row", "Suite", "Timer", "median_of", "rate", "scratch_dir", "suite"]


@dataclass
class Row:
    """One measured workload next to its baseline.

    Attributes:
        name: what was measured (short).
        ours: our measurement, in ``unit``.
        baseline: the baseline's measurement in the same unit, or None if there is none.
        unit: ``"…/s"`` rates and ``"x"`` factors (higher is better), or ``"ms"``/``"s"`` times and
            ``"MiB"``/``"MB"`` sizes (lower is better).
        target: a human-readable target such as ``">= 0.5x baseline"`` or ``">= 200/s"`` ("" if none).
        ok: whether the target is met (None when there is no target).
        baseline_name: what the baseline is.
        note: anything the reader needs to interpret the row (sample counts, runs, spread).
    """

    name: str
    ours: float
    baseline: float | None
    unit: str
    target: str = ""
    ok: bool | None = None
    baseline_name: str = ""
    note: str = ""

    @property
    def lower_is_better(self) -> bool:
        return self.unit in ("ms", "s", "us", "MiB", "MB", "GiB", "GB", "bytes")

    @property
    def ratio(self) -> float | None:
        """How many times faster than the baseline we are (> 1: faster), whatever the unit."""
        if self.baseline is None or self.baseline == 0 or self.ours == 0:
            return None
        return self.baseline / self.ours if self.lower_is_better else self.ours / self.baseline

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


@dataclass
class Suite:
    name: str
    run: Callable[[Any], list[Row]]
    doc: str = ""
    rows: list[Row] = field(default_factory=list)


SUITES: dict[str, Suite] = {}


def suite(name: str) -> Callable[[Callable[[Any], list[Row]]], Callable[[Any], list[Row]]]:
    """Register ``fn(options) -> list[Row]`` as the suite ``name``."""

    def deco(fn: Callable[[Any], list[Row]]) -> Callable[[Any], list[Row]]:
        SUITES[name] = Suite(name, fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
        return fn

    return deco


class Timer:
    """``with Timer() as t: …`` then ``t.seconds``."""

    def __enter__(self) -> Timer:
        self._t0 = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0


def median_of(runs: int, fn: Callable[[], float]) -> tuple[float, list[float]]:
    """Call ``fn`` (returning seconds) ``runs`` times; the median and all values."""
    values = [fn() for _ in range(max(1, runs))]
    return statistics.median(values), values


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


@contextlib.contextmanager
def scratch_dir(prefix: str = "lc-bench-") -> Iterator[str]:
    """A temporary directory, removed afterwards (also on errors)."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
