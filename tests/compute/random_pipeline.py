"""A pipeline of two random stages, shared by the randomness tests and the script they kill."""

from __future__ import annotations

import os
import time
from typing import Any

import lakecompute as lc
from tests.helpers import make_out


@lc.compute
def noisy_pair(sample_in: Any, sample_out: Any, rng: Any) -> None:
    """Two rows per input, each with its own draw (the next stage sees row 0 and row 1)."""
    delay = float(os.environ.get("LC_TEST_SLEEP", "0"))
    if delay:
        time.sleep(delay)
    for _ in range(2):
        sample_out.v.append(int(sample_in) + rng.random())


@lc.compute
def scaled(sample_in: Any, sample_out: Any, rng: Any) -> None:
    """Scale by a random factor and add an integer draw."""
    sample_out.append(
        {"v": float(sample_in.v.numpy()) * rng.uniform(1, 2), "draw": int(rng.integers(1 << 30))}
    )


PIPELINE = lc.compose([noisy_pair(), scaled()])


def pipeline_out(path: str) -> lc.Dataset:
    """An output dataset for the pipeline."""
    return make_out(path, v={"dtype": "float64"}, draw={"dtype": "int64"})
