"""The one rule for when several samples are one array (htypes.stacked), and what read paths do with it."""

from __future__ import annotations

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.errors import RaggedShapeError
from lakecompute.htypes import stack_samples, stacked
from lakecompute.loaders._transform import collate_rows


def test_numbers_and_arrays_of_one_shape_stack() -> None:
    """Numbers and numeric arrays of one shape become one array with a leading sample axis."""
    ints = stacked([1, 2, 3])
    assert ints is not None
    assert ints.tolist() == [1, 2, 3]
    got = stacked([np.zeros((2, 3), np.uint8), np.ones((2, 3), np.uint8)])
    assert got is not None
    assert got.shape == (2, 2, 3)
    assert got.dtype == np.uint8


@pytest.mark.parametrize(
    "values",
    [[np.zeros(2), np.zeros(3)], ["a", "b"], [True, False], [{"k": 1}], [np.array(["x"]), np.array(["y"])]],
)
def test_ragged_text_bools_and_objects_do_not_stack(values: list[object]) -> None:
    """Ragged arrays, strings, Python bools and objects are not one array: None."""
    assert stacked(values) is None


def test_stacking_keeps_each_values_dtype() -> None:
    """Arrays of one shape but different dtypes are not one array (the eval drain checks them one by one,
    so the first decides a new tensor's dtype); numbers followed by an array are not either."""
    assert stacked([np.zeros(2, np.uint8), np.zeros(2, np.int64)]) is None
    assert stacked([1, np.zeros(2)]) is None
    scalars = stacked([np.array(1, np.int16), np.array(2, np.int16)])
    assert scalars is not None
    assert scalars.dtype == np.int16
    assert scalars.tolist() == [1, 2]


def test_stack_samples_names_the_tensor_when_ragged() -> None:
    """Ragged samples asked for as one array raise RaggedShapeError naming the tensor and the way out."""
    with pytest.raises(RaggedShapeError, match=r"tensor 'boxes'.*aslist=True"):
        stack_samples([np.zeros((1, 4)), np.zeros((2, 4))], "boxes")


def test_tensor_numpy_and_loader_collate_agree() -> None:
    """numpy() refuses ragged samples while a loader batch keeps them as a list, by the same rule."""
    ds = lc.empty("mem://stacking-rule", overwrite=True)
    ds.create_tensor("x", dtype="int32")
    ds.x.extend([np.arange(2, dtype=np.int32), np.arange(3, dtype=np.int32)])
    with pytest.raises(RaggedShapeError, match="'x'"):
        ds.x.numpy()
    rows = [{"x": v} for v in ds.x.numpy(aslist=True)]
    batch = collate_rows(rows)
    assert isinstance(batch["x"], list)
    assert [v.tolist() for v in batch["x"]] == [[0, 1], [0, 1, 2]]
    same = collate_rows([{"x": np.arange(2)}, {"x": np.arange(2) + 1}])
    assert same["x"].tolist() == [[0, 1], [1, 2]]


def test_loader_collate_keeps_mixed_dtypes_as_a_list() -> None:
    """A transform's outputs of one shape but different dtypes come as a list, each value its own dtype,
    as the eval drain leaves them to be checked one by one."""
    batch = collate_rows([{"x": np.zeros(2, np.uint8)}, {"x": np.ones(2, np.float32)}])
    assert isinstance(batch["x"], list)
    assert [v.dtype for v in batch["x"]] == [np.uint8, np.float32]
