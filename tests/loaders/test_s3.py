"""Loaders on s3:// (a local moto server): workers open their own clients and read their share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.loaders import IndexPlan
from tests.loaders.conftest import N, fill_numbered
from tests.s3.conftest import bucket, moto_server, storage_options

__all__ = ["bucket", "moto_server", "storage_options"]

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3_numbered(bucket: str, storage_options: dict[str, Any]) -> lc.Dataset:
    """The numbered dataset, on S3."""
    return fill_numbered(lc.empty(f"s3://{bucket}/numbered", storage_options=storage_options))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_s3_batches_read_each_rank_share(s3_numbered: lc.Dataset, num_workers: int) -> None:
    """batches() on S3, in this process and in forkserver workers, yields the plan's samples."""
    plan = IndexPlan(N, 16, True, 3, 0, False, 1, 2, num_workers=num_workers)
    batches = list(
        s3_numbered.batches(16, shuffle=True, seed=3, rank=1, world_size=2, num_workers=num_workers)
    )
    assert [b["idx"].tolist() for b in batches] == [plan.step_indices(s).tolist() for s in range(plan.steps)]
    np.testing.assert_array_equal(batches[0]["img"][:, 0, 0], np.array(batches[0]["idx"]) % 256)
    assert batches[0]["txt"][0] == f"s{batches[0]['idx'][0]}"


def test_s3_pytorch_with_workers(s3_numbered: lc.Dataset) -> None:
    """A DataLoader with 2 workers over S3 (forkserver: the parent's client is never reused)."""
    pytest.importorskip("torch")
    batches = [b["idx"].tolist() for b in s3_numbered.pytorch(20, tensors="idx", num_workers=2)]
    plan = IndexPlan(N, 20, num_workers=2)
    assert batches == [plan.step_indices(s).tolist() for s in range(plan.steps)]
    assert sorted(i for b in batches for i in b) == list(range(N))


_UNGUARDED_SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    import lakecompute as lc

    # Top level, no main guard: a worker that ran this script again would add a line.
    with open(sys.argv[2], "a") as f:
        f.write("script ran\\n")

    ds = lc.load(sys.argv[1], storage_options=json.loads(sys.argv[3]), read_only=True)
    seen = [i for batch in ds.batches(10, tensors="idx", num_workers=2) for i in batch["idx"].tolist()]
    print("SAMPLES", *sorted(seen))
    """
)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_s3_unguarded_script_with_loader_workers_runs_once(
    tmp_path: Path, bucket: str, storage_options: dict[str, Any]
) -> None:
    """A script without a main guard iterating ds.batches(num_workers=2) on s3:// (fork-server workers)
    runs once and yields every sample."""
    options = storage_options
    url = f"s3://{bucket}/numbered"
    fill_numbered(lc.empty(url, storage_options=options))
    script = tmp_path / "train.py"
    script.write_text(_UNGUARDED_SCRIPT)
    runs = tmp_path / "runs.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.run(
        [sys.executable, str(script), url, str(runs), json.dumps(options)],
        capture_output=True,
        text=True,
        env=env,
        timeout=150,
    )
    assert run.returncode == 0, run.stderr
    assert runs.read_text() == "script ran\n"
    assert run.stdout.split() == ["SAMPLES", *map(str, range(N))]
