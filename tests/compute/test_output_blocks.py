"""Outputs far larger than their inputs are checked and written a few samples at a time within a task:
values and their order stay right, and a value that cannot be stored still names its own input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out

#: Bytes of output per input: two of them fill the 16 MiB a task buffers before writing.
SIZE = 8 << 20
N = 24
BAD = "LC_TEST_BLOCKS_BAD_AT"  # read at run time, so setting it does not change the eval's fingerprint


@lc.compute
def inflate(sample_in: Any, sample_out: Any) -> None:
    """A small int in, 8 MiB out (a 2-D value, which a 1-D tensor cannot store, at the input named by BAD)."""
    i = int(sample_in)
    value = np.full(SIZE, i, dtype=np.uint8)
    sample_out.x.append(value.reshape(2, -1) if i == int(os.environ.get(BAD, "-1")) else value)


def test_large_outputs_come_back_in_order(scheduler: Sched, tmp_path: Path) -> None:
    out = make_out(tmp_path / "out", x={"dtype": "uint8"})
    inflate().eval(list(range(N)), out, **scheduler.kw)
    back = lc.load(str(tmp_path / "out"))
    assert len(back.x) == N
    for i in range(N):
        value = back.x[i].numpy()
        assert value.shape == (SIZE,)
        assert int(value[0]) == i
        assert int(value[-1]) == i


@pytest.mark.parametrize("bad", [5, 10, 17])
def test_a_value_that_cannot_be_stored_names_its_input(
    scheduler: Sched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: int
) -> None:
    out = make_out(tmp_path / "out", x={"dtype": "uint8"})
    monkeypatch.setenv(BAD, str(bad))
    with pytest.raises(lc.TransformError, match=rf"failed on data_in\[{bad}\]") as info:
        inflate().eval(list(range(N)), out, **scheduler.kw)
    assert isinstance(info.value.__cause__, lc.InvalidSampleError)
    assert len(lc.load(str(tmp_path / "out")).x) == 0


@pytest.mark.parametrize("bad", [3, 9, 10])
def test_ignore_errors_skips_only_the_value_that_cannot_be_stored(
    scheduler: Sched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: int
) -> None:
    out = make_out(tmp_path / "out", x={"dtype": "uint8"})
    monkeypatch.setenv(BAD, str(bad))
    result = inflate().eval(list(range(N)), out, ignore_errors=True, **scheduler.kw)
    assert result.failed_indices == [bad]
    assert result.failed[0].error_type == "InvalidSampleError"
    back = lc.load(str(tmp_path / "out")).x
    assert [int(back[j].numpy()[0]) for j in range(len(back))] == [i for i in range(N) if i != bad]
