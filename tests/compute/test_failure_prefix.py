"""After a failure with checkpoint_interval, the kept prefix is floor(k / n) * n for every scheduler."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out

FAIL = "LC_TEST_PREFIX_FAIL_AT"  # read at run time, so fixing it does not change the eval's fingerprint
INTERVAL = 8


@lc.compute
def slow_head_fails(sample_in: Any, sample_out: Any) -> None:
    """Inputs before 40 are slow, so later tasks (and the failure at 45) finish before them."""
    i = int(sample_in)
    if i < 40:
        time.sleep(0.01)
    if i == int(os.environ.get(FAIL, "-1")):
        raise RuntimeError(f"input {i} is broken")
    sample_out.y.append(i * 3)


@pytest.mark.parametrize("fail_at", [45, 7, 64])
def test_failure_keeps_the_checkpoints_before_it(
    scheduler: Sched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    """Tasks before the failing input's checkpoint finish and are committed; the message says how many."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    monkeypatch.setenv(FAIL, str(fail_at))
    kept = (fail_at // INTERVAL) * INTERVAL
    with pytest.raises(lc.TransformError, match=rf"failed on data_in\[{fail_at}\]") as info:
        slow_head_fails().eval(list(range(80)), out, checkpoint_interval=INTERVAL, **scheduler.kw)
    if kept:
        assert f"The outputs of the first {kept} inputs are kept" in str(info.value)
        assert f"resume from input {kept}" in str(info.value)
    else:
        assert "Nothing of this run was written." in str(info.value)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [3 * i for i in range(kept)]

    monkeypatch.delenv(FAIL)
    result = slow_head_fails().eval(list(range(80)), out, checkpoint_interval=INTERVAL, **scheduler.kw)
    assert result.resumed_from == kept
    np.testing.assert_array_equal(lc.load(str(tmp_path / "out")).y.numpy(), 3 * np.arange(80))


def test_failure_without_checkpoints_keeps_nothing(
    scheduler: Sched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without checkpoint_interval a failure commits nothing, and the message says so."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    monkeypatch.setenv(FAIL, "45")
    with pytest.raises(lc.TransformError, match="Nothing of this run was written"):
        slow_head_fails().eval(list(range(80)), out, **scheduler.kw)
    again = lc.load(str(tmp_path / "out"))
    assert (again.version, len(again.y)) == (out.version, 0)
