"""Bounded memory for streamed input (issue 10): the caller holds a few tasks' items, not the stream.

A generator yields 500 MiB of 1 MiB uint8 arrays; an eval with 2 worker processes writes each array's sum
to a dataset. The caller's peak RSS (VmHWM) above its RSS just before the eval is measured in a fresh
interpreter, so nothing of the bench itself is counted. Streamed tasks are sized in bytes (8 MiB of items),
and at most ``2 * num_workers`` tasks are outstanding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from bench import Row, scratch_dir, suite

_CHILD = r"""
import json, sys
import numpy as np
import lakecompute as lc

def rss(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0

@lc.compute
def total(sample_in, sample_out):
    sample_out.s.append(int(sample_in.sum()))

def stream(n_mib):
    rng = np.random.default_rng(0)
    for _ in range(n_mib):
        yield rng.integers(0, 256, size=1 << 20, dtype=np.uint8)

out = lc.empty(sys.argv[1], overwrite=True)
out.create_tensor("s", dtype="int64")
n_mib = int(sys.argv[2])
baseline = rss("VmRSS")
total().eval(stream(n_mib), out, num_workers=2, scheduler="processed", progressbar=False)
assert len(lc.load(sys.argv[1]).s) == n_mib
print(json.dumps({"baseline": baseline, "peak": rss("VmHWM")}))
"""


def caller_peak_above_baseline(path: str, n_mib: int) -> float:
    """MiB of peak RSS the caller gained while streaming ``n_mib`` MiB through an eval."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, path, str(n_mib)], check=True, env=env, capture_output=True, text=True
    )
    numbers = json.loads(done.stdout.strip().splitlines()[-1])
    return float(numbers["peak"] - numbers["baseline"])


@suite("streams")
def streams(opts: Any) -> list[Row]:
    """Caller memory while a 500 MiB stream goes through an eval with 2 workers."""
    n_mib = 100 if getattr(opts, "quick", False) else 500
    with scratch_dir("lc-bench-streams-") as tmp:
        gained = caller_peak_above_baseline(f"{tmp}/out", n_mib)
    return [
        Row(f"stream {n_mib} MiB: caller peak RSS above baseline", gained, float(n_mib), "MiB",
            "< 200 MiB", gained < 200, "the stream's size", "1 MiB items, 2 processed workers")
    ]  # fmt: skip
