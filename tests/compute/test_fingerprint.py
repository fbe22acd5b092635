"""Fingerprints: equal exactly when the values are, also on the fast path for long homogeneous lists."""

from __future__ import annotations

import numpy as np
import pytest

from lakecompute.compute._fingerprint import fingerprint_value


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (list(range(100)), [float(i) for i in range(100)]),  # same numbers, another type
        (list(range(100)), list(range(1, 101))),
        ([1] * 99 + [True], [1] * 100),  # one item of another type among many
        ([np.zeros(3, np.uint8)] * 100, [np.zeros(3, np.int16)] * 100),  # arrays of another dtype
        ([np.zeros(3)] * 100, [np.zeros((3, 1))] * 100),  # arrays of another shape
        ([str(i) for i in range(100)], [str(i) for i in range(100)][::-1]),
        (list(range(100)), tuple(range(100))),
        (["a", "bb"] + ["c"] * 62, ["a\x00", "bb"] + ["c"] * 62),  # a trailing NUL, hidden by <U padding
        (["c"] * 63 + ["\x00"], ["c"] * 63 + [""]),
    ],
)
def test_fingerprint_long_lists_differ_when_values_differ(a: object, b: object) -> None:
    """Long lists that differ in a value, a type, a dtype, a shape or their container differ."""
    assert fingerprint_value(a, "data_in") != fingerprint_value(b, "data_in")


def test_fingerprint_long_lists_equal_when_values_equal() -> None:
    """Equal long lists (rebuilt, not the same objects) fingerprint the same, fast path or not."""
    assert fingerprint_value(list(range(1000)), "x") == fingerprint_value(list(range(1000)), "x")
    arrays = [np.full(4, i) for i in range(100)]
    assert fingerprint_value(arrays, "x") == fingerprint_value([a.copy() for a in arrays], "x")
    mixed = [1, "a", 2.5] * 40
    assert fingerprint_value(mixed, "x") == fingerprint_value(list(mixed), "x")
    assert fingerprint_value([2**70] * 100, "x") != fingerprint_value([2**70 + 1] * 100, "x")  # past int64
