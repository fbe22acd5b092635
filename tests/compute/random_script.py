"""``random_script.py PATH N SEED|none``: run the random pipeline into PATH with 2 workers, checkpointing
every 10 inputs (for the test that kills it: the pipeline is imported, so its identity matches the test's)."""

from __future__ import annotations

import sys

import lakecompute as lc
from tests.compute.random_pipeline import PIPELINE

if __name__ == "__main__":
    seed = None if sys.argv[3] == "none" else int(sys.argv[3])
    PIPELINE.eval(
        list(range(int(sys.argv[2]))),
        lc.load(sys.argv[1]),
        num_workers=2,
        checkpoint_interval=10,
        seed=seed,
        progressbar=False,
    )
