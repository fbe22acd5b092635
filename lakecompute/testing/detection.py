"""A small synthetic COCO dataset on disk (deterministic by seed) for docs, examples and benchmarks.

Each image shows a few filled rectangles ("box") and diamonds ("diamond") on a gradient; every object has
its box, its polygon and, for diamonds, its four corners as keypoints.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

__all__ = ["COCO_CATEGORIES", "write_coco_folder"]

COCO_CATEGORIES: list[dict[str, Any]] = [
    {"id": 1, "name": "box", "supercategory": "shape"},
    {
        "id": 2,
        "name": "diamond",
        "supercategory": "shape",
        "keypoints": ["top", "right", "bottom", "left"],
        "skeleton": [[1, 2], [2, 3], [3, 4], [4, 1]],
    },
]


def _object(rng: np.random.Generator, h: int, w: int, ann_id: int, image_id: int) -> dict[str, Any]:
    bw, bh = int(rng.integers(w // 8, w // 3)), int(rng.integers(h // 8, h // 3))
    x, y = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
    diamond = bool(rng.integers(0, 2))
    if diamond:
        cx, cy = x + bw / 2, y + bh / 2
        poly = [cx, y, x + bw, cy, cx, y + bh, x, cy]
    else:
        poly = [x, y, x + bw, y, x + bw, y + bh, x, y + bh]
    ann: dict[str, Any] = {
        "id": ann_id,
        "image_id": image_id,
        "category_id": 2 if diamond else 1,
        "bbox": [x, y, bw, bh],
        "area": bw * bh / (2 if diamond else 1),
        "iscrowd": 0,
        "segmentation": [poly],
    }
    if diamond:
        ann["keypoints"] = [v for i in range(0, 8, 2) for v in (poly[i], poly[i + 1], 2)]
        ann["num_keypoints"] = 4
    return ann


def _draw(ann: dict[str, Any], img: np.ndarray, colour: np.ndarray) -> None:
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    x, y, bw, bh = ann["bbox"]
    if ann["category_id"] == 1:
        inside = (xx >= x) & (xx < x + bw) & (yy >= y) & (yy < y + bh)
    else:
        cx, cy = x + bw / 2, y + bh / 2
        inside = np.abs(xx - cx) / (bw / 2) + np.abs(yy - cy) / (bh / 2) <= 1
    img[inside] = colour


def write_coco_folder(
    root: str | os.PathLike[str], n: int = 8, size: tuple[int, int] = (96, 128), seed: int = 0
) -> tuple[str, str]:
    """Write ``n`` JPEG images and an instances JSON under ``root``.

    Returns:
        ``(images folder, annotations JSON path)``, ready for `lakecompute.ingest_coco`.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    h, w = size
    images_dir = os.path.join(os.fspath(root), "images")
    os.makedirs(images_dir, exist_ok=True)
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    for i in range(n):
        gradient = (np.mgrid[0:h, 0:w][0] * 200 // max(1, h - 1)).astype(np.uint8)
        img = np.stack([gradient, gradient[::-1], np.full_like(gradient, 60)], axis=-1)
        for _ in range(int(rng.integers(1, 4))):
            ann = _object(rng, h, w, len(anns) + 1, i + 1)
            _draw(ann, img, rng.integers(120, 256, 3).astype(np.uint8))
            anns.append(ann)
        name = f"{i + 1:06d}.jpg"
        Image.fromarray(img).save(os.path.join(images_dir, name), quality=92)
        images.append({"id": i + 1, "file_name": name, "height": h, "width": w})
    path = os.path.join(os.fspath(root), "instances.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"images": images, "annotations": anns, "categories": COCO_CATEGORIES}, f)
    return images_dir, path
