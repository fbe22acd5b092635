"""Run one eval of ``double`` in this process, for the tests that kill or signal it.

Usage: ``eval_script.py PATH N NUM_WORKERS CHECKPOINT_INTERVAL [in-place]``. Without ``in-place`` it
evaluates ``range(N)`` into the dataset at PATH; with it, it doubles PATH's tensor ``x`` in place.
Prints ``START`` just before the eval and ``DONE inputs resumed_from version`` after it. With
``LC_TEST_GO=FILE`` it waits after ``START`` until FILE exists.
"""

from __future__ import annotations

import os
import sys

import lakecompute as lc
from tests.helpers import wait_for_file
from tests.reliability.reliability_helpers import double


def main(argv: list[str]) -> None:
    """Parse the arguments, run the eval, report."""
    path, n, workers, interval = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    in_place = argv[4:] == ["in-place"]
    ds = lc.load(path)
    kw = {
        "num_workers": workers,
        "scheduler": "processed" if workers else "serial",
        "checkpoint_interval": interval,
        "progressbar": False,
    }
    print("START", flush=True)
    go = os.environ.get("LC_TEST_GO")
    if go:
        wait_for_file(go, timeout=600)  # a start line shared with another writer, for the concurrency tests
    result = double().eval(ds, **kw) if in_place else double().eval(list(range(n)), ds, **kw)
    print(f"DONE {result.inputs} {result.resumed_from} {result.version}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
