"""What COCO and YOLO share: optional imports, box layouts, numbers for JSON and text, image files."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.ingest import IMAGE_EXTENSIONS

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "convert_boxes",
    "encode_mask",
    "image_files",
    "image_size",
    "plain",
    "require",
    "write_image",
]

_INSTALL = 'pip install "lakecompute[vision]"'


def require(module: str, purpose: str, install: str = _INSTALL) -> ModuleType:
    """Import an optional dependency, or raise InvalidArgumentError naming the install command."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InvalidArgumentError(
            f"{purpose} needs the package {module.split('.')[0]!r}, which is not installed. "
            f"Install it with: {install}"
        ) from exc


def encode_mask(mask: np.ndarray) -> dict[str, Any]:
    """pycocotools' compressed RLE of a HxW mask, with ``counts`` as text (as COCO files hold it)."""
    mask_utils = require("pycocotools.mask", "Encoding COCO masks")
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(s) for s in rle["size"]], "counts": rle["counts"].decode("ascii")}


def plain(values: Any) -> list[Any]:
    """Numbers as JSON and text want them: ints where a value is whole, floats otherwise."""
    out: list[Any] = []
    for v in np.asarray(values).reshape(-1).tolist():
        out.append(int(v) if float(v).is_integer() else float(v))
    return out


def convert_boxes(
    boxes: np.ndarray, src: tuple[str, bool], dst: tuple[str, bool], width: int, height: int
) -> np.ndarray:
    """Boxes ``(k, 4)`` from one (format, normalized) layout to another, for an image of that size.

    The same layout gives the boxes back untouched (no arithmetic, so values stay exact).
    """
    if src == dst:
        return boxes
    b = boxes.astype(np.float64)
    if src[1]:
        b = b * np.array([width, height, width, height], dtype=np.float64)
    x1, y1 = _corner(b, src[0])
    w, h = _size(b, src[0])
    out = _from_corner(x1, y1, w, h, dst[0])
    if dst[1]:
        out = out / np.array([width, height, width, height], dtype=np.float64)
    return out


def _corner(b: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    if fmt == "cxcywh":
        return b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2
    return b[:, 0], b[:, 1]


def _size(b: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    if fmt == "xyxy":
        return b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    return b[:, 2], b[:, 3]


def _from_corner(x1: np.ndarray, y1: np.ndarray, w: np.ndarray, h: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "xyxy":
        return np.stack([x1, y1, x1 + w, y1 + h], axis=1)
    if fmt == "cxcywh":
        return np.stack([x1 + w / 2, y1 + h / 2, w, h], axis=1)
    return np.stack([x1, y1, w, h], axis=1)


def image_files(folder: str) -> list[str]:
    """Image files under ``folder`` (any depth, hidden entries skipped), sorted, relative to it."""
    found: list[str] = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            if not n.startswith(".") and os.path.splitext(n)[1].lower() in IMAGE_EXTENSIONS:
                found.append(os.path.relpath(os.path.join(root, n), folder))
    return sorted(found)


_EXTENSION_FORMATS = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png", ".webp": "webp"}


def write_image(sample: Any, compression: str | None, path: str) -> None:
    """Write one image sample (a ``ds.images[i]`` view of a tensor stored with ``compression``) to
    ``path``: the stored file's bytes when its format is the one the name asks for (a kept JPEG is
    written back byte for byte), else encoded by Pillow in the format of the name's ending."""
    from PIL import Image

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    wanted = _EXTENSION_FORMATS.get(os.path.splitext(path)[1].lower())
    if wanted is not None and wanted == compression:
        with open(path, "wb") as f:
            f.write(sample.tobytes())
        return
    Image.fromarray(np.asarray(sample.numpy())).save(path)


def image_size(sample: Any) -> tuple[int, int]:
    """``(height, width)`` of one image sample (a ``ds.images[i]`` view), from its stored shape."""
    shape = sample.shape
    return int(shape[0]), int(shape[1])
