"""What the export tests share: a small detection dataset with the file names a test chooses."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import lakecompute as lc

#: The export formats every export test runs.
EXPORTS = ["coco", "yolo"]


def boxes_dataset(
    path: Path,
    names: list[str],
    shade: int = 0,
    classes: tuple[str, ...] = ("cat", "dog"),
    sample_compression: str | None = "png",
) -> lc.Dataset:
    """Images named ``names`` (pixels ``shade + i``) with one xyxy box and label each."""
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression=sample_compression)
        ds.create_tensor("file_name", htype="text")
        ds.create_tensor("boxes", htype="bbox", format="xyxy")
        ds.create_tensor("categories", htype="class_label", class_names=list(classes))
        for i, name in enumerate(names):
            ds.append(
                {
                    "images": np.full((8, 10, 3), shade + i, np.uint8),
                    "file_name": name,
                    "boxes": [[1.0, 2.0, 5.0, 6.0]],
                    "categories": [i % 2],
                }
            )
    return ds
