"""Branches, tags, restore, diff, merge and saved views on S3 (a local moto server), as on a local disk:
the same workflow, kills at every step, writers on two branches, vacuum after a deleted branch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.reliability.reliability_helpers import script_env
from tests.reliability.versions_flow import (
    SCRIPT,
    kill_at_every_step,
    make_branched,
    make_numbers,
    run_branch_workflow,
    run_script,
)


@pytest.mark.timeout(300)
def test_s3_branch_workflow(bucket: str, storage_options: dict[str, Any], tmp_path: Path) -> None:
    """Branch, in-place eval killed and resumed there, diff, merges, a conflict and restore, on S3."""
    run_branch_workflow(f"s3://{bucket}/ds", storage_options, tmp_path)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("op", ["checkout-create", "restore", "merge-three-way", "delete-branch"])
def test_s3_a_kill_at_any_step_leaves_every_branch_whole(
    bucket: str, storage_options: dict[str, Any], op: str
) -> None:
    """On S3, SIGKILL before each storage step of an operation leaves every branch and tag whole."""

    def fresh(name: str) -> str:
        url = f"s3://{bucket}/{name}"
        make_branched(url, storage_options)
        return url

    assert kill_at_every_step(op, fresh, storage_options) > 1


@pytest.mark.timeout(300)
def test_s3_writers_on_two_branches_both_commit(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    """Processes appending on two branches of an S3 dataset at once all commit; two committing on one
    branch from the same version: one of them gets CommitConflictError."""
    url = f"s3://{bucket}/ds"
    ds = make_numbers(url, storage_options, 5)
    for name in ("a", "b", "c"):
        ds.checkout(name, create=True)
    go = tmp_path / "go"
    env = script_env(LC_TEST_GO=str(go), LC_TEST_STORAGE=json.dumps(storage_options))
    jobs = [("a", "1", "3"), ("b", "2", "3"), ("c", "3", "1"), ("c", "4", "1")]
    procs = [
        subprocess.Popen([sys.executable, str(SCRIPT), url, "append", *job], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for job in jobs
    ]  # fmt: skip
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "START"
    go.touch()
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        outcomes.append(out.splitlines()[-1].split()[0])
    assert outcomes[:2] == ["DONE", "DONE"]
    assert sorted(outcomes[2:]) == ["CONFLICT", "DONE"]
    assert lc.load(url, branch="a", storage_options=storage_options).x.numpy().tolist() == [
        *range(5),
        1,
        1,
        1,
    ]
    assert lc.load(url, branch="b", storage_options=storage_options).x.numpy().tolist() == [
        *range(5),
        2,
        2,
        2,
    ]
    assert len(lc.load(url, branch="c", storage_options=storage_options).x) == 6
    assert len(lc.load(url, storage_options=storage_options).x) == 5


@pytest.mark.timeout(300)
def test_s3_vacuum_after_delete_branch(bucket: str, storage_options: dict[str, Any]) -> None:
    """On S3, a deleted branch's versions go with vacuum(grace_seconds=0); main's and tagged ones stay."""
    url = f"s3://{bucket}/ds"
    ds = make_numbers(url, storage_options, 6)
    ds.checkout("exp", create=True)
    ds.x.append(1)
    ds.tag("kept")
    ds.x.append(2)
    gone = ds.version
    ds.checkout("main")
    ds.delete_branch("exp")
    assert ds.vacuum(grace_seconds=0)["versions"] == 1
    with pytest.raises(lc.DatasetNotFoundError):
        lc.load(url, version=gone, storage_options=storage_options)
    assert lc.load(url, version="kept", storage_options=storage_options).x.numpy().tolist() == [*range(6), 1]
    np.testing.assert_array_equal(lc.load(url, storage_options=storage_options).x.numpy(), np.arange(6))


@pytest.mark.timeout(600)
def test_s3_a_saved_view_resumes_after_sigkill(bucket: str, storage_options: dict[str, Any]) -> None:
    """A save of 10,000 JPEG rows into S3 killed part-way resumes to a byte-identical copy."""
    from lakecompute.testing.internals import dataset_core
    from tests.dataset.test_saved_views import N_JPEG, jpegs

    src_url, dest = f"s3://{bucket}/src", f"s3://{bucket}/copy"
    src = jpegs(src_url, N_JPEG, storage_options)
    killed = run_script(src_url, storage_options, "save", "1", dest, "1000", LC_TEST_KILL_AT_STEP="25")
    assert killed.returncode == -9, killed.stderr
    done = len(lc.load(dest, storage_options=storage_options))
    assert 0 < done < N_JPEG
    assert done % 1000 == 0
    out = src.save(dest, storage_options=storage_options, progressbar=False, checkpoint_interval=1000)
    rows = np.arange(N_JPEG)
    mine = [e.blob for e in dataset_core(out).reader("images").read_encoded_at(rows)]
    theirs = [e.blob for e in dataset_core(src).reader("images").read_encoded_at(rows)]
    assert mine == theirs
    assert [e["samples"]["images"] for e in out.log()[2:]] == list(range(1000, N_JPEG + 1, 1000))
