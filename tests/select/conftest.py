"""A dataset with a tensor of every htype expressions apply to, written once per test module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

LABELS = ["cat", "dog", "emu"]
CATEGORIES = ["car", "bus", "person"]
ROWS = 48


def row(i: int) -> dict[str, Any]:
    """Row ``i`` of the every-htype dataset: each value a function of ``i`` (some with objects, some none)."""
    rng = np.random.default_rng(i)
    k = int(rng.integers(0, 4))
    score = float(rng.random()) if i % 11 else float("nan")
    meta: dict[str, Any] = {"n": int(rng.integers(-3, 9)), "hard": bool(i % 3 == 0), "s": "abc"[: i % 4]}
    if i % 5 == 0:
        del meta["n"]
    if i % 7 == 0:
        meta["tags"] = ["x"] * (i % 3)
    return {
        "labels": int(rng.integers(0, 3)),
        "score": np.float32(score),
        "count": np.int16(rng.integers(-20, 20)),
        "flag": bool(rng.integers(0, 2)),
        "categories": rng.integers(0, 3, size=k).astype(np.uint32),
        "boxes": np.round(rng.random((k, 4)) * 10, 2).astype(np.float32),
        "scores": np.round(rng.random(k), 3).astype(np.float32),
        "caption": ["", "a cat", "two dogs", "Émile's bus\n"][i % 4],
        "meta": meta if i % 13 else None,
        "emb": np.round(rng.standard_normal(4), 2).astype(np.float32),
        "polygons": [[np.round(rng.random((3, 2)) * 8, 1).astype(np.float32)] for _ in range(k)],
        "masks": rng.random((6, 5, k)) > 0.5,
        "keypoints": np.concatenate(
            [np.round(rng.random((k, 2, 2)) * 6, 1), rng.integers(0, 3, (k, 2, 1))], axis=2
        ).astype(np.float32),
        "segmask": rng.integers(0, 3, (4 + i % 3, 5)).astype(np.uint8),
        "images": rng.integers(0, 255, (8, 8 + i % 2, 3), dtype=np.uint8),
    }


def make_every_htype(path: Path | str, rows: int = ROWS) -> lc.Dataset:
    """The every-htype dataset at ``path``."""
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("labels", htype="class_label", class_names=LABELS)
        ds.create_tensor("score", dtype="float32")
        ds.create_tensor("count", dtype="int16")
        ds.create_tensor("flag", dtype="bool")
        ds.create_tensor("categories", htype="class_label", class_names=CATEGORIES)
        ds.create_tensor("boxes", htype="bbox", format="xywh")
        ds.create_tensor("scores", dtype="float32")
        ds.create_tensor("caption", htype="text")
        ds.create_tensor("meta", htype="json")
        ds.create_tensor("emb", htype="embedding")
        ds.create_tensor("polygons", htype="polygon")
        ds.create_tensor("masks", htype="binary_mask")
        ds.create_tensor("keypoints", htype="keypoints")
        ds.create_tensor("segmask", htype="segment_mask", class_names=["bg", "a", "b"])
        ds.create_tensor("images", htype="image", sample_compression="png")
        columns: dict[str, list[Any]] = {}
        for i in range(rows):
            for name, value in row(i).items():
                columns.setdefault(name, []).append(value)
        ds.extend(columns)
    return ds


@pytest.fixture(scope="module")
def every(tmp_path_factory: pytest.TempPathFactory) -> lc.Dataset:
    """The every-htype dataset, on disk, read-only for the tests that share it."""
    path = tmp_path_factory.mktemp("select") / "every"
    make_every_htype(path)
    return lc.load(str(path), read_only=True)
