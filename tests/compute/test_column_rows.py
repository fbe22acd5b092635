"""The rows of dataset input (built in C, read through C field accessors) behave as plain rows do."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.compute._samples import InputRow, InputValue, column_rows
from lakecompute.errors import TensorDoesNotExistError


def _rows() -> list[Any]:
    columns = {
        "images": np.arange(24, dtype=np.uint8).reshape(3, 2, 4),
        "labels": np.array([7, 8, 9], dtype=np.uint8),
        "my-name": ["a", "bb", "ccc"],
    }
    return list(column_rows(columns, 10, 3))


def test_tensors_by_attribute_item_and_index() -> None:
    """Attribute and item access give each sample's own value; ``index`` is its position in data_in."""
    rows = _rows()
    assert [r.index for r in rows] == [10, 11, 12]
    np.testing.assert_array_equal(rows[1].images.numpy(), np.arange(8, 16).reshape(2, 4))
    label = rows[2].labels.numpy()
    assert isinstance(label, np.ndarray)
    assert label.shape == ()
    assert int(label) == 9
    assert rows[2]["my-name"].text() == "ccc"
    assert getattr(rows[0], "my-name").data() == "a"
    assert rows[0].keys() == ["images", "labels", "my-name"]
    assert "labels" in rows[0]
    assert "nope" not in rows[0]
    assert sorted(rows[0].tensors) == ["images", "labels", "my-name"]
    assert rows[0].to_dict()["my-name"] == "a"


def test_unknown_tensor_errors_name_the_tensors() -> None:
    """A missing tensor fails as on plain rows: AttributeError naming the tensors, TensorDoesNotExistError."""
    row = _rows()[0]
    with pytest.raises(AttributeError, match=r"sample_in has no tensor 'boxes'; it has \['images', 'labels'"):
        _ = row.boxes
    with pytest.raises(TensorDoesNotExistError, match="boxes"):
        _ = row["boxes"]
    with pytest.raises(TensorDoesNotExistError):
        _ = row[0]  # type: ignore[index]


def test_rows_and_values_are_not_sequences() -> None:
    """Neither a row nor a value can be taken for a tuple: len, iteration, indexing and + raise TypeError."""
    row = _rows()[0]
    value = row.images
    for attempt in (lambda: len(row), lambda: list(row), lambda: row + row, lambda: len(value)):
        with pytest.raises(TypeError):
            attempt()
    for attempt in (lambda: value[0], lambda: list(value), lambda: value * 2, lambda: 3 in value):
        with pytest.raises(TypeError, match=r"call \.numpy\(\)"):
            attempt()
    assert bool(row)
    assert bool(value)
    assert value != InputValue((value.numpy(), None))
    assert value == value
    assert len({row, _rows()[0]}) == 2  # hashed by identity


def test_rows_pickle_as_plain_rows() -> None:
    """A row pickles as a plain InputRow with the same values and index; a value as itself."""
    row = _rows()[1]
    back = pickle.loads(pickle.dumps(row))
    assert type(back) is InputRow
    assert back.index == 11
    np.testing.assert_array_equal(back.images.numpy(), row.images.numpy())
    value = pickle.loads(pickle.dumps(row.labels))
    assert isinstance(value, InputValue)
    assert int(value.numpy()) == 8
    np.testing.assert_array_equal(np.asarray(row.images), row.images.numpy())


def test_a_kept_row_keeps_its_values(tmp_path: Path) -> None:
    """Rows a function keeps past its call (a closure's list) still hold their own sample's values."""
    ds = lc.empty(str(tmp_path / "in"))
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(50))
    kept: list[Any] = []

    @lc.compute
    def keep(sample_in: Any, sample_out: Any) -> None:
        kept.append(sample_in)
        sample_out.y.append(sample_in.x.numpy() * 2)

    out = lc.empty(str(tmp_path / "out"))
    out.create_tensor("y", dtype="int64")
    keep().eval(ds, out, num_workers=0, progressbar=False)
    assert [int(r.x.numpy()) for r in kept] == list(range(50))
    assert [r.index for r in kept] == list(range(50))
    np.testing.assert_array_equal(out.y.numpy(), 2 * np.arange(50))
