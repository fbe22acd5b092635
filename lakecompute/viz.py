"""Pictures of data: a contact sheet of image samples with their labels."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from lakecompute.errors import InvalidArgumentError

__all__ = ["contact_sheet"]


def contact_sheet(
    ds: Any,
    tensor: str = "images",
    label_tensor: str | None = "labels",
    indices: list[int] | None = None,
    cols: int = 8,
    rows: int | None = None,
    cell: int = 96,
) -> Image.Image:
    """A grid of image samples, each captioned with its index and class name.

    Args:
        ds: a dataset or view.
        tensor: the image tensor.
        label_tensor: a class_label tensor to caption with (skipped if absent).
        indices: which samples (default: the first ``cols * rows``).
        cols: columns of the grid.
        rows: rows of the grid (default: enough for 4 rows or all samples).
        cell: the size in pixels of each image's square.
    """
    t = ds[tensor]
    n = len(t)
    if n == 0:
        raise InvalidArgumentError(f"Tensor {tensor!r} has no samples to show.")
    if indices is None:
        count = min(n, cols * (rows or 4))
        indices = list(range(count))
    rows = rows or math.ceil(len(indices) / cols)
    indices = indices[: cols * rows]
    names: list[str] = []
    labels = None
    if label_tensor is not None and label_tensor in ds.tensors:
        names = list(ds[label_tensor].info.get("class_names") or [])
        labels = ds[label_tensor]
    caption = 14
    sheet = Image.new("RGB", (cols * cell, rows * (cell + caption)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for k, i in enumerate(indices):
        arr = np.asarray(t[i].numpy())
        if arr.ndim == 3 and arr.shape[2] == 1:
            arr = arr[:, :, 0]
        img = Image.fromarray(arr.astype(np.uint8)).convert("RGB")
        img.thumbnail((cell, cell))
        x, y = (k % cols) * cell, (k // cols) * (cell + caption)
        sheet.paste(img, (x + (cell - img.width) // 2, y + (cell - img.height) // 2))
        text = str(i)
        if labels is not None and i < len(labels):
            value = np.asarray(labels[i].numpy()).reshape(-1)
            if value.size:
                v = int(value[0])
                text += f": {names[v] if 0 <= v < len(names) else v}"
        draw.text((x + 2, y + cell), text, fill=(0, 0, 0))
    return sheet
