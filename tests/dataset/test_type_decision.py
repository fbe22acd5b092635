"""One type decision: every writer (append, extend, an eval's first outputs, its workers, fragments
applied to the head) checks a tensor's rank and dtype through `TensorSchema`, with one message each."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.errors import InvalidSampleError

RANK = r"every sample of a tensor has the same number of dimensions: expected {}, got {}\."
PACKAGE = Path(lc.__file__).parent


@pytest.mark.parametrize(
    ("phrase", "count"),
    [("same number of dimensions", 1), ("storing them would change their values", 1)],
)
def test_each_failure_has_one_message_in_the_package(phrase: str, count: int) -> None:
    found = [p for p in PACKAGE.rglob("*.py") for _ in re.finditer(re.escape(phrase), p.read_text())]
    assert len(found) == count, found
    assert {p.name for p in found} == {"_schema.py"}


def test_append_extend_and_setitem_share_the_rank_rule(tmp_path: Path) -> None:
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("x")
    ds.x.append(np.zeros(3))
    with pytest.raises(InvalidSampleError, match=RANK.format(1, 2)):
        ds.x.append(np.zeros((2, 2)))
    with pytest.raises(InvalidSampleError, match=RANK.format(1, 0)):
        ds.extend({"x": [np.zeros(2), 5]})
    with pytest.raises(InvalidSampleError, match=RANK.format(1, 2)):
        ds.x.extend(np.zeros((2, 2, 2)))
    with pytest.raises(InvalidSampleError, match=RANK.format(1, 2)):
        ds.x[0] = np.zeros((1, 1))
    assert ds.x.numpy().tolist() == [[0.0, 0.0, 0.0]]


def test_the_first_samples_of_a_call_decide_the_rank_within_it(tmp_path: Path) -> None:
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("x")
    with pytest.raises(InvalidSampleError, match=RANK.format(1, 2)):
        ds.x.extend([np.zeros(2), np.zeros((1, 1))])
    assert len(ds.x) == 0
    with ds:
        ds.x.append(np.zeros((1, 1)))
        assert ds.x.ndim == 2  # decided when buffered, before any commit
        with pytest.raises(InvalidSampleError, match=RANK.format(2, 1)):
            ds.x.append(np.zeros(1))


@lc.compute
def _first_bad(sample_in: Any, sample_out: Any) -> None:
    sample_out.append({"y": np.zeros((2, 2))})


@lc.compute
def _later_bad(sample_in: Any, sample_out: Any) -> None:
    n = int(sample_in)
    sample_out.append({"y": np.zeros(2) if n < 4 else np.zeros((2, 2))})


def test_eval_outputs_share_the_rank_rule(tmp_path: Path) -> None:
    """The preflight (first outputs against the tensor) and the workers (later outputs) say the same."""
    out = lc.empty(str(tmp_path / "out"))
    out.create_tensor("y")
    out.y.append(np.zeros(2))
    with pytest.raises(lc.errors.TransformError, match=RANK.format(1, 2)):
        _first_bad().eval(list(range(3)), out, progressbar=False)
    result = _later_bad().eval(list(range(6)), out, ignore_errors=True, progressbar=False)
    assert result.failed_indices == [4, 5]
    assert all(re.search(RANK.format(1, 2), f.message) for f in result.failed)
    assert len(lc.load(out.path).y) == 5


def test_a_decided_dtype_is_never_narrowed(tmp_path: Path) -> None:
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("g")
    ds.g.extend(np.arange(3))
    assert ds.g.dtype == np.int64
    with pytest.raises(InvalidSampleError, match="cannot be stored as int64 without losing information"):
        ds.g.append(0.5)
    assert ds.g.numpy().tolist() == [0, 1, 2]
