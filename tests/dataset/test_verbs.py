"""Everyday verbs: ds.filter, ds.rename_tensor, ds.random_split and the dataset-level ds.info."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc


def _numbers(path: str, n: int = 20) -> lc.Dataset:
    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("caption", htype="text")
    ds.extend({"x": np.arange(n), "caption": [f"item {i}" for i in range(n)]})
    return ds


def is_even(row: Any) -> bool:
    """Keep even x (module level, so worker processes can run it)."""
    return int(row.x.numpy()) % 2 == 0


@pytest.mark.parametrize("num_workers", [0, 2])
def test_filter_with_a_function_runs_like_an_eval(tmp_path: Path, num_workers: int) -> None:
    """A function keeps the rows it returns true for; the view reads them in order, with any workers."""
    ds = _numbers(str(tmp_path / "ds"))
    view = ds.filter(is_even, num_workers=num_workers, progressbar=False)
    assert isinstance(view, lc.DatasetView)
    assert view.x.numpy().tolist() == list(range(0, 20, 2))
    assert view.caption[1].text() == "item 2"
    assert view.version == ds.version


def test_filter_with_a_mask_and_on_a_view(tmp_path: Path) -> None:
    """A boolean mask selects samples; filtering a view selects within the view."""
    ds = _numbers(str(tmp_path / "ds"), 6)
    assert ds.filter(np.array([True, False, True, False, False, True])).x.numpy().tolist() == [0, 2, 5]
    view = ds[2:6].filter(lambda row: int(row.x.numpy()) > 3, progressbar=False)
    assert view.x.numpy().tolist() == [4, 5]
    assert len(ds.filter(lambda row: False, progressbar=False)) == 0


def test_filter_refuses_a_mask_of_the_wrong_length(tmp_path: Path) -> None:
    """A mask that is not one bool per sample is refused, saying what filter takes."""
    ds = _numbers(str(tmp_path / "ds"), 4)
    with pytest.raises(lc.InvalidArgumentError, match=r"a boolean mask of one value per sample \(4\)"):
        ds.filter([True, False])


def test_rename_tensor_keeps_data_order_and_history(tmp_path: Path) -> None:
    """The renamed tensor has the same samples, info and place; the old version keeps the old name."""
    path = str(tmp_path / "ds")
    ds = _numbers(path, 5)
    ds.create_tensor("boxes", htype="bbox", format="xywh")
    ds.boxes.extend([[[0, 0, 1, 1]]] * 5)
    before = ds.version
    ds.rename_tensor("x", "value")
    reopened = lc.load(path)
    assert list(reopened.tensors) == ["value", "caption", "boxes"]
    assert reopened.value.numpy().tolist() == [0, 1, 2, 3, 4]
    assert lc.load(path, version=before).x.numpy().tolist() == [0, 1, 2, 3, 4]
    ds.rename_tensor("boxes", "bboxes")
    assert lc.load(path).bboxes.info.format == "xywh"
    ds.value.append(5)  # writing goes on under the new name
    assert lc.load(path).value.numpy().tolist()[-1] == 5


def test_rename_tensor_refusals(tmp_path: Path) -> None:
    """Renaming a missing tensor, onto a taken name or to a bad name raises and changes nothing."""
    ds = _numbers(str(tmp_path / "ds"), 2)
    version = ds.version
    with pytest.raises(lc.TensorDoesNotExistError):
        ds.rename_tensor("nope", "y")
    with pytest.raises(lc.TensorExistsError):
        ds.rename_tensor("x", "caption")
    with pytest.raises(lc.InvalidArgumentError, match="Invalid tensor name"):
        ds.rename_tensor("x", "a/b")
    assert ds.version == version
    assert list(ds.tensors) == ["x", "caption"]


def test_random_split_is_disjoint_complete_and_seeded(tmp_path: Path) -> None:
    """Splits cover every sample once, have the asked sizes, and are the same for the same seed."""
    ds = _numbers(str(tmp_path / "ds"), 11)
    train, val = ds.random_split([0.8, 0.2], seed=3)
    assert (len(train), len(val)) == (9, 2)  # floor(8.8)=8, floor(2.2)=2, the remainder to the first
    got = train.x.numpy().tolist() + val.x.numpy().tolist()
    assert sorted(got) == list(range(11))
    again = ds.random_split([0.8, 0.2], seed=3)
    assert again[1].x.numpy().tolist() == val.x.numpy().tolist()
    other = ds.random_split([0.8, 0.2], seed=4)
    assert other[1].x.numpy().tolist() != val.x.numpy().tolist()
    a, b, c = ds.random_split([5, 5, 1], seed=0)
    assert (len(a), len(b), len(c)) == (5, 5, 1)
    with pytest.raises(lc.InvalidArgumentError, match=r"add up to 1 \(e.g. \[0.8, 0.2\]\)"):
        ds.random_split([0.5, 0.2])


def test_dataset_info_is_versioned_json(tmp_path: Path) -> None:
    """ds.info keys commit a version, read back after reopening, and views read them."""
    path = str(tmp_path / "ds")
    ds = _numbers(path, 3)
    assert dict(ds.info) == {}
    ds.info["source"] = "COCO val2017"
    ds.info.update(license="CC-BY-4.0", year=2017)
    reopened = lc.load(path)
    assert dict(reopened.info) == {"source": "COCO val2017", "license": "CC-BY-4.0", "year": 2017}
    assert reopened.info.year == 2017
    assert reopened[0:2].info["source"] == "COCO val2017"
    assert lc.load(path, version=ds.version - 2).info == {}
    with ds:
        del ds.info["year"]
        ds.x.append(3)
    assert "year" not in lc.load(path).info
    with pytest.raises(lc.InvalidArgumentError, match="JSON values"):
        ds.info["bad"] = object()
    with pytest.raises(lc.ReadOnlyError):
        ds[0:2].info["x"] = 1
