"""What COCO and YOLO share: optional imports, numbers for JSON and text, image files, polygon scales."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.ingest import EXTENSION_FORMATS, IMAGE_EXTENSIONS, image_files

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "encode_mask",
    "image_bytes",
    "image_files",
    "image_size",
    "plain",
    "polygon_points",
    "require",
    "sample_name",
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


def image_bytes(sample: Any, compression: str | None, name: str, what: str) -> bytes:
    """The file of one image sample (a ``ds.images[i]`` view of a tensor stored with ``compression``)
    named ``name`` (``what`` names it in messages): the stored file's bytes when its format is the one
    the name asks for (a kept JPEG is written back byte for byte), else encoded by Pillow in the format
    of the name's ending.

    Raises:
        InvalidArgumentError: the name does not end in an image file extension.
    """
    import io

    from PIL import Image

    ending = os.path.splitext(name)[1].lower()
    if EXTENSION_FORMATS.get(ending, "") == compression:
        return bytes(sample.tobytes())
    fmt = Image.registered_extensions().get(ending)
    if ending not in IMAGE_EXTENSIONS or fmt is None:
        raise InvalidArgumentError(
            f"{what} does not end in one of {sorted(IMAGE_EXTENSIONS)}, so the image cannot be written "
            "under it. Rename the file (ds.file_name[i] = ...)."
        )
    out = io.BytesIO()
    try:
        Image.fromarray(np.asarray(sample.numpy())).save(out, format=fmt)
    except (OSError, ValueError, TypeError) as exc:  # Pillow: a mode the format cannot hold (RGBA as JPEG)
        raise InvalidArgumentError(
            f"{what}: the image cannot be written as {fmt} ({exc}). Give the file a name whose format "
            "holds it (.png holds every image)."
        ) from exc
    return out.getvalue()


def sample_name(i: int, name: str) -> str:
    """How messages name the file name of sample ``i`` (the entry `FolderExport` confines)."""
    return f"file_name of sample {i} ({name!r:.120})"


def image_size(sample: Any) -> tuple[int, int]:
    """``(height, width)`` of one image sample (a ``ds.images[i]`` view), from its stored shape."""
    shape = sample.shape
    return int(shape[0]), int(shape[1])


def polygon_points(part: Any, info: Any, normalized: bool, canvas: tuple[int, int]) -> np.ndarray:
    """One polygon ``(m, 2)`` of a polygon tensor whose ``info`` says whether its points are normalized
    (a YOLO ingest's) or pixels, as float64 points that are ``normalized`` (or pixels) on an image of
    ``(height, width)``."""
    points = np.asarray(part, dtype=np.float64).reshape(-1, 2)
    stored = bool(info.get("normalized", False))
    if stored == normalized:
        return points
    size = np.array([canvas[1], canvas[0]], dtype=np.float64)
    return points / size if normalized else points * size
