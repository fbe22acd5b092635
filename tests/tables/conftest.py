"""What the tables tests share: a small dataset of the everyday htypes, and Parquet files made from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc

pytest.importorskip("pyarrow")

NAMES = ["cat", "dog", "bird"]


def image(i: int) -> np.ndarray:
    """Image ``i``: 6-9 pixels high, a pattern from ``i`` (so every image differs)."""
    rng = np.random.default_rng(i)
    return rng.integers(0, 256, size=(6 + i % 4, 5, 3), dtype=np.uint8)


def make_photos(path: str, n: int = 12) -> lc.Dataset:
    """A dataset of ``n`` rows: PNG images, named labels, boxes, an embedding, a caption, json meta."""
    ds = lc.empty(path, overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    ds.create_tensor("labels", htype="class_label", class_names=NAMES)
    ds.create_tensor("boxes", htype="bbox", format="xywh")
    ds.create_tensor("emb", htype="embedding")
    ds.create_tensor("caption", htype="text")
    ds.create_tensor("meta", htype="json")
    with ds:
        for i in range(n):
            ds.append(
                {
                    "images": image(i),
                    "labels": i % 3,
                    "boxes": np.full((i % 3, 4), i, dtype=np.float32),
                    "emb": np.arange(4, dtype=np.float32) + i,
                    "caption": f"photo {i} é",
                    "meta": {"i": i, "tags": ["x"] * (i % 2)},
                }
            )
    return ds


@pytest.fixture
def photos(tmp_path: Path) -> lc.Dataset:
    return make_photos(str(tmp_path / "photos"))


@pytest.fixture
def photos_parquet(photos: lc.Dataset, tmp_path: Path) -> Path:
    path = tmp_path / "photos.parquet"
    photos.to_parquet(path, progressbar=False)
    return path
