"""Peak memory per worker of an eval: W1's flip with 2 workers in a fresh interpreter, each worker
recording its own peak RSS (the transforms suite's memory rows).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

_MEMORY_CHILD = r"""
import json, os, resource, sys
import numpy as np
import lakecompute as lc

src, dst, rec = sys.argv[1:4]


def peak_kib():
    # VmHWM, not ru_maxrss: after fork + exec, ru_maxrss still counts the exec-ing parent's peak.
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

@lc.compute
class FlipRecordingRss:
    # flip_vertical, plus: every 256 samples, write this process's peak RSS to a file named by its pid
    # (preflight runs it once in the parent too, which writes the parent's, small, peak).
    def __init__(self, where):
        self.where = where
        self.n = 0

    def __call__(self, sample_in, sample_out):
        image = np.flip(sample_in.images.numpy(), axis=0)
        sample_out.append({"labels": sample_in.labels.numpy(), "images": image})
        self.n += 1
        if self.n % 256 == 1:
            with open(os.path.join(self.where, str(os.getpid())), "w") as fh:
                fh.write(str(peak_kib()))

ds = lc.load(src, read_only=True)
out = lc.like(dst, ds, overwrite=True)
FlipRecordingRss(where=rec).eval(ds, out, num_workers=2, scheduler="processed", progressbar=False)
print(json.dumps({"parent_kib": peak_kib()}))
"""


def worker_peak_rss(src: str, dst: str) -> tuple[float, float]:
    """Run W1's eval with 2 workers in a fresh interpreter; (max, mean) worker peak RSS in MiB."""
    with tempfile.TemporaryDirectory(prefix="lc-rss-") as rec:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        subprocess.run(
            [sys.executable, "-c", _MEMORY_CHILD, src, dst, rec], check=True, env=env, capture_output=True
        )
        peaks = []
        for name in os.listdir(rec):
            with open(os.path.join(rec, name)) as fh:
                peaks.append(int(fh.read()) / 1024)
    if not peaks:
        raise RuntimeError("no worker recorded its peak RSS")
    return max(peaks), statistics.mean(peaks)
