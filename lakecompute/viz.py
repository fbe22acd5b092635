"""Pictures of data: a contact sheet of image samples with their labels."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import InvalidArgumentError, TensorDoesNotExistError

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["contact_sheet"]

_CAPTION = 14  # pixels of caption under each image (Pillow's default bitmap font is 11 px high)


def contact_sheet(
    ds: Any,
    tensor: str = "images",
    label_tensor: str | None = "labels",
    indices: list[int] | None = None,
    cols: int = 8,
    rows: int | None = None,
    cell: int = 96,
    title: str | None = None,
) -> Image.Image:
    """A grid of image samples, each captioned with its index and class name.

    Images smaller than a cell are shown at their own size (so a resize is visible); larger ones
    are shrunk to fit.

    Args:
        ds: a dataset or view.
        tensor: the image tensor.
        label_tensor: a class_label tensor to caption with (skipped if the dataset has none).
        indices: which samples (default: the first ``cols * rows``).
        cols: columns of the grid.
        rows: rows of the grid (default: as many as ``indices`` need, or 4).
        cell: the size in pixels of each image's square.
        title: a line of text above the grid.

    Returns:
        The sheet as an RGB Pillow image; ``.save("grid.png")`` writes it.

    Raises:
        InvalidArgumentError: the tensor has no samples, or an index or size is out of range.
        TensorDoesNotExistError: ``tensor`` is not in the dataset.
    """
    from PIL import Image, ImageDraw

    if cols < 1 or (rows is not None and rows < 1) or cell < 8:
        raise InvalidArgumentError(
            f"Expected cols >= 1, rows >= 1 and cell >= 8. Got {cols=}, {rows=}, {cell=}."
        )
    if tensor not in ds.tensors:
        raise TensorDoesNotExistError(tensor, list(ds.tensors))
    t = ds[tensor]
    n = len(t)
    if n == 0:
        raise InvalidArgumentError(f"Tensor {tensor!r} has no samples to show.")
    if indices is None:
        indices = list(range(min(n, cols * (rows or 4))))
    bad = [i for i in indices if not 0 <= i < n]
    if bad:
        raise InvalidArgumentError(f"Sample indices {bad!r} are out of range for {n} samples of {tensor!r}.")
    if not indices:
        raise InvalidArgumentError("Expected at least one sample index to show. Got none.")
    rows = rows or math.ceil(len(indices) / cols)
    indices = indices[: cols * rows]
    names: list[str] = []
    labels = None
    if label_tensor is not None and label_tensor in ds.tensors:
        names = list(ds[label_tensor].info.get("class_names") or [])
        labels = ds[label_tensor]
    top = _CAPTION + 4 if title else 0
    sheet = Image.new("RGB", (cols * cell, top + rows * (cell + _CAPTION)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    if title:
        draw.text((4, 2), title, fill=(0, 0, 0))
    for k, i in enumerate(indices):
        arr = np.asarray(t[i].numpy())
        if arr.ndim == 3 and arr.shape[2] == 1:
            arr = arr[:, :, 0]
        img = Image.fromarray(arr.astype(np.uint8)).convert("RGB")
        img.thumbnail((cell - 4, cell - 4))
        x, y = (k % cols) * cell, top + (k // cols) * (cell + _CAPTION)
        sheet.paste(img, (x + (cell - img.width) // 2, y + (cell - img.height) // 2))
        text = str(i)
        if labels is not None and i < len(labels):
            value = np.asarray(labels[i].numpy()).reshape(-1)
            if value.size:
                v = int(value[0])
                text += f": {names[v] if 0 <= v < len(names) else v}"
        draw.text((x + 3, y + cell), text, fill=(0, 0, 0))
    return sheet
