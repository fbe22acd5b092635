"""Float casts are range-checked like integer ones: a finite value that would become inf is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc


@pytest.mark.parametrize(
    ("dtype", "value", "bad"),
    [
        ("float32", 1e300, r"1e\+300"),
        ("float32", [1.0, -1e300], r"-1e\+300"),
        ("float16", 100000, "100000"),
        ("float16", np.array([1, 70000], dtype=np.int64), "70000"),
        ("complex64", np.array([1e300 + 0j]), r"\(1e\+300\+0j\)"),
    ],
)
def test_float_cast_overflow_is_refused(tmp_path: Path, dtype: str, value: Any, bad: str) -> None:
    """A value beyond the tensor's float range raises InvalidSampleError naming it; nothing is stored."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("f", dtype=dtype)
    ds.f.append(np.zeros(np.shape(value), dtype=dtype))
    with pytest.raises(
        lc.InvalidSampleError, match=rf"value {bad} does not fit dtype {dtype}.*wider dtype"
    ) as info:
        ds.f.append(value)
    assert info.value.tensor == "f"
    assert len(lc.load(str(tmp_path / "ds"), read_only=True).f) == 1


def test_float_cast_keeps_given_inf_and_nan(tmp_path: Path) -> None:
    """inf and nan given as such are stored as they are, through a narrowing cast too."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("f", dtype="float32")
    ds.f.append(np.array([np.inf, np.nan, -np.inf, 1.5, 3e38]))
    got = lc.load(str(tmp_path / "ds"), read_only=True).f[0].numpy()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array([np.inf, np.nan, -np.inf, 1.5, 3e38], dtype=np.float32))


def test_float_cast_overflow_refused_in_generic_tensor(tmp_path: Path) -> None:
    """Once a generic tensor's dtype is decided as float32, a float64 value beyond its range is refused."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("g")
    ds.g.append(np.float32(1))
    with pytest.raises(lc.InvalidSampleError, match=r"value 1e\+300 does not fit dtype float32"):
        ds.g.append(np.array(1e300))
    assert ds.g.numpy(aslist=True) == [1.0]
