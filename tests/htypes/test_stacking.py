"""The one rule for when several samples are one array (htypes.stacked), and what read paths do with it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


_shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_shapes, st.sampled_from(["uint8", "int16", "float32"])), min_size=1, max_size=6),
    st.booleans(),
)
def test_arrays_stack_exactly_when_their_shapes_and_dtypes_agree(
    specs: list[tuple[tuple[int, ...], str]], view: bool
) -> None:
    """Any list of arrays (shapes that differ in rank or in any dimension, also with equal totals such as
    (1, 2) and (2, 1), dtypes, flipped views) stacks to np.stack's result exactly when every shape and
    dtype is the first's; else None."""
    values = [np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) for shape, dtype in specs]
    if view:
        values = [v[::-1] if v.ndim else v for v in values]
    got = stacked(values)
    if len({v.shape for v in values}) == 1 and len({v.dtype for v in values}) == 1:
        assert got is not None
        np.testing.assert_array_equal(got, np.stack(values))
        assert got.dtype == values[0].dtype
    else:
        assert got is None


def test_arrays_whose_first_dimensions_differ_but_sum_alike_do_not_stack() -> None:
    """(27, 28) and (29, 28) join into as many rows as two (28, 28) would: still not one shape."""
    assert stacked([np.zeros((28, 28)), np.zeros((27, 28)), np.zeros((29, 28))]) is None
    assert stacked([np.zeros((28, 28)), np.zeros((28, 27))]) is None
    assert stacked([np.zeros((28, 28)), np.zeros((28, 28, 1))]) is None


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
