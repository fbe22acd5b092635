"""The per-sample loop of an eval (one function, one input at a time) on one to four output tensors.

It keeps the output lengths of the first two tensors as integers and those of any further ones as a
list, so each count is tested: usual samples, skipped ones (nothing written), drains in the middle of
a block (outputs of 1 MiB a sample), a count that is wrong in only the third or fourth tensor, and a
function that returns its outputs instead of appending them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out

NAMES = ("a", "b", "c", "d")


def _value(i: int, k: int, size: int) -> np.ndarray:
    """What input ``i`` writes to tensor ``k``: ``size`` int32 values that name both."""
    return np.full(size, i * 10 + k, dtype=np.int32)


@lc.compute
def spread(sample_in: Any, sample_out: Any, tensors: int, size: int, skip: tuple[int, ...]) -> None:
    """Input i writes `_value(i, k)` to each of the first ``tensors`` tensors, unless i is in ``skip``."""
    i = int(sample_in)
    if i not in skip:
        sample_out.append({NAMES[k]: _value(i, k, size) for k in range(tensors)})


@lc.compute
def spread_returned(sample_in: Any, sample_out: Any, tensors: int) -> dict[str, Any]:
    """`spread`, its outputs returned as a dict instead of appended."""
    i = int(sample_in)
    return {NAMES[k]: _value(i, k, 4) for k in range(tensors)}


@lc.compute
def one_too_many(sample_in: Any, sample_out: Any, tensors: int, bad: int) -> None:
    """Input ``bad`` writes a second value to the last of ``tensors`` tensors."""
    i = int(sample_in)
    sample_out.append({NAMES[k]: _value(i, k, 4) for k in range(tensors)})
    if i == bad:
        sample_out[NAMES[tensors - 1]].append(_value(i, tensors - 1, 4))


def _out(path: Path, tensors: int) -> lc.Dataset:
    return make_out(path, **{NAMES[k]: {"dtype": "int32"} for k in range(tensors)})


def _expect(ds: lc.Dataset, tensors: int, kept: list[int], size: int) -> None:
    for k in range(tensors):
        got = ds[NAMES[k]].numpy()
        assert got.shape == (len(kept), size), NAMES[k]
        np.testing.assert_array_equal(got[:, 0], [i * 10 + k for i in kept], err_msg=NAMES[k])
        assert (got == got[:, :1]).all(), NAMES[k]


@pytest.mark.parametrize("tensors", [1, 2, 3, 4])
def test_every_output_in_order_with_skips(scheduler: Sched, tmp_path: Path, tensors: int) -> None:
    """40 inputs, 3 of them writing nothing (skip_ok): the other 37 values of each tensor, in order."""
    skip = (0, 17, 39)
    out = _out(tmp_path / "out", tensors)
    spread(tensors=tensors, size=4, skip=skip).eval(list(range(40)), out, skip_ok=True, **scheduler.kw)
    _expect(lc.load(str(tmp_path / "out")), tensors, [i for i in range(40) if i not in skip], 4)


@pytest.mark.parametrize("tensors", [1, 3, 4])
def test_drains_in_the_middle_of_a_block(scheduler: Sched, tmp_path: Path, tensors: int) -> None:
    """Inputs writing 1 MiB in all (the outputs are drained every 16 of them) come out whole, in order."""
    size = (1 << 20) // 4 // tensors
    skip = (5, 20)
    out = _out(tmp_path / "out", tensors)
    spread(tensors=tensors, size=size, skip=skip).eval(list(range(40)), out, skip_ok=True, **scheduler.kw)
    _expect(lc.load(str(tmp_path / "out")), tensors, [i for i in range(40) if i not in skip], size)


@pytest.mark.parametrize("tensors", [2, 3, 4])
def test_a_wrong_count_in_a_later_tensor_names_its_input(
    scheduler: Sched, tmp_path: Path, tensors: int
) -> None:
    """Input 23 writes two values to the last tensor only: a TransformError for input 23, nothing written."""
    out = _out(tmp_path / "out", tensors)
    with pytest.raises(lc.TransformError) as info:
        one_too_many(tensors=tensors, bad=23).eval(list(range(40)), out, **scheduler.kw)
    assert info.value.index == 23
    assert f"'{NAMES[tensors - 1]}'" in str(info.value)
    assert all(len(lc.load(str(tmp_path / "out"))[NAMES[k]]) == 0 for k in range(tensors))


@pytest.mark.parametrize("tensors", [1, 3])
def test_returned_outputs(scheduler: Sched, tmp_path: Path, tensors: int) -> None:
    """A function that returns its outputs as a dict writes them as if it had appended them."""
    out = _out(tmp_path / "out", tensors)
    spread_returned(tensors=tensors).eval(list(range(30)), out, **scheduler.kw)
    _expect(lc.load(str(tmp_path / "out")), tensors, list(range(30)), 4)


@lc.compute
def two_rows(sample_in: Any, sample_out: Any) -> None:
    """A middle step writing two rows of ``a`` and ``b``: the second dict names ``a``, known by then, and
    ``b``, new (its own second value comes after)."""
    i = int(sample_in)
    sample_out.append({"a": np.int64(i)})
    sample_out.append({"a": np.int64(100 * i), "b": np.int64(1)})
    sample_out.b.append(np.int64(2))


@lc.compute
def row_sums(sample_in: Any, sample_out: Any) -> None:
    """The last step: ``x`` = ``a`` + ``b`` of each row."""
    sample_out.x.append(np.int64(sample_in.a.numpy() + sample_in.b.numpy()))


def test_a_new_tensor_after_a_known_one_in_one_append(tmp_path: Path) -> None:
    """A dict that names a known tensor and then a new one adds one value to each, not two to the first."""
    out = make_out(tmp_path / "out")
    lc.compose([two_rows(), row_sums()]).eval(list(range(5)), out, num_workers=0, progressbar=False)
    expected = [v for i in range(5) for v in (i + 1, 100 * i + 2)]
    np.testing.assert_array_equal(lc.load(str(tmp_path / "out")).x.numpy(), expected)
