"""Small real-format COCO and YOLO datasets written by the tests themselves (images, JSON, label files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc

SIZES = {"a.jpg": (48, 64), "b.jpg": (40, 50), "c.jpg": (32, 32), "sub/d.jpg": (30, 40)}


def _image(path: Path, size: tuple[int, int], seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


def uncompressed_rle(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed RLE of a mask (column-major runs, starting with a run of zeros)."""
    flat = mask.astype(np.uint8).flatten(order="F")
    counts, value, run = [], 0, 0
    for v in flat.tolist():
        if v == value:
            run += 1
        else:
            counts.append(run)
            value, run = v, 1
    counts.append(run)
    return {"size": list(mask.shape), "counts": counts}


def coco_document() -> dict[str, Any]:
    """An instances + keypoints JSON: polygons (one and two parts), uncompressed and compressed RLE,
    keypoints on persons, non-contiguous category ids, an image without annotations."""
    from pycocotools import mask as mask_utils

    crowd = np.zeros((40, 50), dtype=bool)
    crowd[5:20, 10:30] = True
    compressed = mask_utils.encode(np.asfortranarray(np.pad(np.ones((6, 6), np.uint8), ((3, 21), (4, 30)))))
    images = [
        {"id": 10 + i, "file_name": name, "height": h, "width": w, "license": 1}
        for i, (name, (h, w)) in enumerate(SIZES.items())
    ]
    anns = [
        {
            "id": 101, "image_id": 10, "category_id": 1, "iscrowd": 0, "area": 412.5,
            "bbox": [5.5, 6.25, 20.0, 30.75],
            "segmentation": [[5.5, 6.25, 25.5, 6.25, 25.5, 37.0, 5.5, 37.0]],
            "keypoints": [10, 12, 2, 14, 12, 1, 0, 0, 0], "num_keypoints": 2,
        },
        {
            "id": 102, "image_id": 10, "category_id": 3, "iscrowd": 0, "area": 120.0,
            "bbox": [30.0, 4.0, 20.0, 12.0],
            "segmentation": [
                [30.0, 4.0, 40.0, 4.0, 40.0, 10.0], [42.0, 8.0, 50.0, 8.0, 50.0, 16.0, 42.0, 16.0]
            ],
        },
        {
            "id": 103, "image_id": 11, "category_id": 7, "iscrowd": 1, "area": 300.0,
            "bbox": [10.0, 5.0, 20.0, 15.0], "segmentation": uncompressed_rle(crowd),
        },
        {
            "id": 104, "image_id": 11, "category_id": 1, "iscrowd": 0, "area": 55.25,
            "bbox": [1.0, 2.0, 3.0, 4.0], "segmentation": [[1.0, 2.0, 4.0, 2.0, 4.0, 6.0]],
            "keypoints": [2, 3, 2, 3, 3, 2, 2.5, 5.5, 2], "num_keypoints": 3,
        },
        {
            "id": 105, "image_id": 13, "category_id": 3, "iscrowd": 1, "area": 36.0,
            "bbox": [4.0, 3.0, 6.0, 6.0],
            "segmentation": {"size": [30, 40], "counts": compressed["counts"].decode("ascii")},
        },
    ]  # fmt: skip
    categories = [
        {"id": 7, "name": "dog", "supercategory": "animal"},
        {
            "id": 1, "name": "person", "supercategory": "person",
            "keypoints": ["nose", "left_eye", "right_eye"], "skeleton": [[1, 2], [1, 3]],
        },
        {"id": 3, "name": "car", "supercategory": "vehicle"},
    ]  # fmt: skip
    return {"info": {"description": "test"}, "images": images, "annotations": anns, "categories": categories}


def write_coco(root: Path) -> tuple[Path, Path]:
    """Write a 4-image COCO dataset under ``root``: ``(images folder, annotations JSON)``."""
    images = root / "images"
    for seed, (name, size) in enumerate(SIZES.items()):
        _image(images / name, size, seed)
    annotations = root / "instances.json"
    annotations.write_text(json.dumps(coco_document()))
    return images, annotations


@pytest.fixture
def coco_files(tmp_path: Path) -> tuple[Path, Path]:
    """``(images folder, annotations JSON)`` of a 4-image COCO dataset."""
    return write_coco(tmp_path / "coco")


YOLO_LABELS = {
    "train/a.jpg": "0 0.5 0.5 0.25 0.125\n1 0.1 0.2 0.05 0.0625\n",
    "train/b.jpg": "1 0.481719 0.634028 0.690625 0.713278\n",
    "train/c.jpg": None,  # no label file: a background image
    "val/d.jpg": "0 0.1 0.1 0.4 0.1 0.4 0.5 0.1 0.5\n2 0.75 0.25 0.5 0.5\n",  # a polygon line and a box
}


@pytest.fixture
def coco(coco_files: tuple[Path, Path], tmp_path: Path) -> lc.Dataset:
    """The COCO fixture ingested: the input of the augmentation tests."""
    images, annotations = coco_files
    return lc.ingest_coco(images, annotations, tmp_path / "coco-ds", progressbar=False)


@pytest.fixture
def yolo_folder(tmp_path: Path) -> Path:
    """A YOLO folder: data.yaml, images/{train,val}, labels/{train,val} (with a segmentation line)."""
    return write_yolo(tmp_path / "yolo")


def write_yolo(root: Path) -> Path:
    """Write a YOLO folder at ``root`` (see `yolo_folder`)."""
    root.mkdir(parents=True)
    (root / "data.yaml").write_text(
        "path: .\ntrain: images/train\nval: images/val\nnames:\n  0: car\n  1: person\n  2: dog\n"
    )
    for seed, (name, text) in enumerate(YOLO_LABELS.items()):
        _image(root / "images" / name, (32 + 4 * seed, 40), seed)
        if text is not None:
            label = root / "labels" / name.replace(".jpg", ".txt")
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text(text)
    return root
