"""lc.vision.augment refuses ``objects=`` columns that are not one entry per box (categories [0, 1] beside
three boxes), naming the column and the row, before the library sees the row: kept in step with the boxes,
they would be written misaligned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

A = pytest.importorskip("albumentations")

FLIP = lc.vision.Albumentations(A.Compose([A.HorizontalFlip(p=1.0)], bbox_params=A.BboxParams(format="coco")))


def _rows(path: Path, categories: list[list[int]]) -> lc.Dataset:
    """Rows of three boxes each, with the categories given (one list per row)."""
    ds = lc.empty(path)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="xywh")
        ds.create_tensor("categories", htype="class_label", class_names=["a", "b", "c"])
        ds.create_tensor("ids", dtype="int64")
    for labels in categories:
        ds.append(
            {
                "images": np.zeros((16, 20, 3), np.uint8),
                "boxes": [[1, 1, 4, 4], [6, 2, 5, 5], [12, 8, 3, 3]],
                "categories": labels,
                "ids": [7, 8, 9],
            }
        )
    return ds


@lc.compute
def flipped(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    sample_out.append(lc.vision.augment(FLIP, sample_in, rng, boxes="boxes", objects=["ids", "categories"]))


def test_a_column_with_fewer_entries_than_boxes_is_refused_naming_it_and_the_row(tmp_path: Path) -> None:
    ds = _rows(tmp_path / "ds", [[0, 1, 2], [0, 1]])
    rng = np.random.default_rng(0)
    with pytest.raises(
        lc.InvalidArgumentError,
        match=r"objects column 'categories' has 2 entries in row 1, but 'boxes' has 3",
    ):
        lc.vision.augment(FLIP, ds[1], rng, boxes="boxes", objects=["categories"])
    row = lc.vision.augment(FLIP, ds[0], rng, boxes="boxes", objects=["ids", "categories"])
    assert row["categories"].tolist() == [0, 1, 2]
    assert row["ids"].tolist() == [7, 8, 9]


def test_an_eval_stops_at_the_misaligned_row_and_writes_nothing_misaligned(tmp_path: Path) -> None:
    ds = _rows(tmp_path / "ds", [[0, 1, 2], [0, 1, 2], [2], [0, 1, 2]])
    out = lc.like(tmp_path / "out", ds)
    with pytest.raises(lc.TransformError, match=r"'categories' has 1 entries in row 2") as info:
        flipped().eval(ds, out, seed=1, progressbar=False)
    assert info.value.index == 2
    assert len(lc.load(tmp_path / "out")) == 0


def test_a_scalar_objects_column_is_refused(tmp_path: Path) -> None:
    ds = _rows(tmp_path / "ds", [[0, 1, 2]])
    with ds:
        ds.create_tensor("score", dtype="float32")
    ds.score.append(0.5)
    with pytest.raises(
        lc.InvalidArgumentError, match=r"'score' has a single value in row 0, but 'boxes' has 3"
    ):
        lc.vision.augment(FLIP, ds[0], np.random.default_rng(0), boxes="boxes", objects=["score"])
