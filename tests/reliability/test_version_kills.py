"""kill -9 at every step of the version operations leaves every branch whole; the branch workflow with a
killed and resumed in-place eval, on a local disk (tests/s3 runs both on S3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.versions_flow import OPS, kill_at_every_step, make_branched, run_branch_workflow


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_kill_at_any_step_leaves_every_branch_whole(tmp_path: Path, op: str) -> None:
    """SIGKILL before each storage step of an operation (and in the middle of each file written) leaves
    every branch and tag as before, or the operation's target as after; all still commit and vacuum."""

    def fresh(name: str) -> str:
        path = str(tmp_path / name)
        make_branched(path, {})
        return path

    assert kill_at_every_step(op, fresh, {}) > 1


def test_the_branch_workflow_on_a_local_disk(tmp_path: Path) -> None:
    """Branch, in-place eval killed and resumed there, diff, merges, a conflict and restore (local)."""
    run_branch_workflow(str(tmp_path / "ds"), {}, tmp_path)
