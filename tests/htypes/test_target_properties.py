"""Property-based tests of the detection and segmentation htype checks (bbox, keypoints, polygon,
binary_mask, segment_mask): any drawn sample — arrays of any dtype and small shape, with NaN and infinities,
nested lists of numbers, bools, None, text and bytes — is stored and read back, or refused with a
LakeComputeError; never another exception.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402  # after the importorskip
from hypothesis import strategies as st  # noqa: E402

from lakecompute.testing.htype_cases import near_valid_samples  # noqa: E402  # it needs hypothesis

TENSORS: dict[str, dict[str, Any]] = {
    "boxes": {"htype": "bbox", "dtype": "float32"},
    "unit_boxes": {"htype": "bbox", "dtype": "float64", "format": "cxcywh", "normalized": True},
    "keypoints": {"htype": "keypoints", "dtype": "float32", "keypoint_names": ["a", "b", "c"]},
    "polygons": {"htype": "polygon"},
    "polygons64": {"htype": "polygon", "dtype": "float64"},
    "masks": {"htype": "binary_mask"},
    "segments": {"htype": "segment_mask", "class_names": ["bg", "road", "car"]},
    "segment_ids": {"htype": "segment_mask", "dtype": "int32"},
}

samples = near_valid_samples(max_leaves=24)


@cache
def _dataset() -> lc.Dataset:
    ds = lc.empty("mem://target-properties", overwrite=True)
    with ds:
        for name, spec in TENSORS.items():
            ds.create_tensor(name, **spec)
    return ds


def _boxes(got: np.ndarray) -> bool:
    return bool(got.shape[1:] == (4,))


def _polygons(got: list[list[np.ndarray]]) -> bool:
    return all(part.ndim == 2 and part.shape[1] == 2 for obj in got for part in obj)


def _mask(got: np.ndarray) -> bool:
    return got.dtype == np.bool_ and got.ndim in (2, 3)


#: What each tensor's stored samples read back as (a polygon sample as objects of (m, 2) polygons).
STORED_AS = {
    "boxes": _boxes,
    "unit_boxes": _boxes,
    "keypoints": lambda got: got.shape[-2:] == (3, 3),
    "polygons": _polygons,
    "polygons64": _polygons,
    "masks": _mask,
    "segments": lambda got: got.ndim == 2,
    "segment_ids": lambda got: got.ndim == 2,
}


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)  # fmt: skip
@given(st.sampled_from(sorted(TENSORS)), st.lists(samples, min_size=1, max_size=3))
def test_target_htypes_store_or_refuse_any_sample(name: str, values: list[Any]) -> None:
    """Appending (one sample) or extending (several, checked joined when they allow it) either stores
    every sample, which then reads back with its htype's rank, or raises a LakeComputeError and stores
    none."""
    tensor = _dataset()[name]
    before = len(tensor)
    try:
        if len(values) == 1:
            tensor.append(values[0])
        else:
            tensor.extend(values)
    except lc.LakeComputeError:
        assert len(tensor) == before
        return
    assert len(tensor) == before + len(values)
    for i in range(before, before + len(values)):
        got = tensor[i].numpy()
        assert STORED_AS[name](got), f"{name}[{i}]: {got!r:.200}"
