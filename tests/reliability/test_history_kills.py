"""kill -9 at every step of a vacuum that removes the bases of versions stored as deltas (issue 39): the
versions it keeps are stored whole first, so after any kill every version still there reads its own
content, every branch takes a commit, and the next vacuum finishes the job."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

import lakecompute as lc
from tests.reliability.versions_flow import run_script

ROWS = 2_000


def _history(path: Path) -> dict[int, list[int]]:
    """A dataset whose content is over the size where versions are stored as deltas (an incompressible
    info entry), then single-row commits on main and a branch ``side``: x's values at every version that
    has x."""
    ds = lc.empty(str(path))
    with ds:
        ds.create_tensor("x", dtype="int32")
        ds.x.extend(np.arange(ROWS, dtype=np.int32))
    ds.info["pad"] = os.urandom(3000).hex()
    for i in range(8):
        ds.x[i * 7] = -i - 1
        if i == 4:
            side = lc.load(str(path), version=ds.version)
            side.checkout("side", create=True)
            side.x[1] = 11
    return {
        v: lc.load(str(path), version=v).x.numpy().tolist()
        for v in (int(f.name[:-5]) for f in (path / "versions").glob("*.json"))
        if v > 0
    }


def _stored_kinds(path: Path) -> set[str]:
    import json

    kinds = set()
    for file in (path / "versions").glob("*.json"):
        body = json.loads(file.read_bytes())
        kinds.add("delta" if "delta" in body else "whole")
    return kinds


def test_a_kill_at_any_step_of_vacuum_keeps_every_version_readable(tmp_path: Path) -> None:
    template = tmp_path / "template"
    values = _history(template)
    assert _stored_kinds(template) == {"delta", "whole"}
    k = 1
    while True:
        trial = tmp_path / f"kill-{k}"
        shutil.copytree(template, trial)
        proc = run_script(str(trial), {}, "vacuum", "2", LC_TEST_KILL_AT_STEP=str(k))
        for file in (trial / "versions").glob("[0-9]*.json"):  # not a temp file a kill left
            version = int(file.name[:-5])
            if version == 0:
                continue
            assert lc.load(str(trial), version=version).x.numpy().tolist() == values[version], (k, version)
        for branch in ("main", "side"):
            head = lc.load(str(trial), branch=branch)
            assert head.x.numpy().tolist() == values[head.version]
            head.x.append(5)
        lc.load(str(trial)).vacuum(grace_seconds=0, keep_versions=2)
        for branch in ("main", "side"):
            assert lc.load(str(trial), branch=branch).x.numpy()[-1] == 5
        if proc.returncode == 0:
            assert k > 10
            return
        assert proc.returncode == -9, proc.stderr
        shutil.rmtree(trial)
        k += 1
