"""The viewer's pictures: thumbnails with their targets drawn over them, and full-size images.

A thumbnail is rendered from the stored chunks: the image decoded, its boxes, masks, polygons and
keypoints drawn over it by `lakecompute.viz.draw_targets` (the one place that knows box layouts and
colours), shrunk to `THUMB_SIZE` and encoded as PNG. The server keeps thumbnails in a cache bounded in
bytes (`THUMB_CACHE_BYTES`), keyed by ``(dataset id, version, tensor, row)``: stored data never changes, so
a key names one picture for good.

A full-size image is the stored file itself, byte for byte, when its sample compression is one browsers
show (PNG, JPEG, WebP); an image stored as an array is encoded as PNG (lossless). With ``overlays``, the
targets are drawn over it at full size (PNG).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from lakecompute.viz import draw_targets, target_tensors, to_pil

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["BROWSER_TYPES", "THUMB_CACHE_BYTES", "THUMB_SIZE", "full_image", "thumbnail"]

#: The longest side of a thumbnail, in pixels (smaller images are kept at their size; the page scales them).
THUMB_SIZE: Final = 192
#: Bytes of encoded thumbnails the server keeps.
THUMB_CACHE_BYTES: Final = 32 << 20
#: The sample compressions browsers display, and the media type each is served as.
BROWSER_TYPES: Final = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)  # fast: a thumbnail is made while a page waits
    return buf.getvalue()


def _drawn(ds: Any, tensor: str, row: int, overlays: bool) -> Image.Image:
    img = to_pil(np.asarray(ds[tensor][row].numpy()))
    return draw_targets(ds, row, img, target_tensors(ds, tensor)) if overlays else img


def thumbnail(ds: Any, tensor: str, row: int) -> bytes:
    """Row ``row`` of image tensor ``tensor`` as a PNG thumbnail with its targets drawn over it.

    Raises:
        DatasetCorruptError: the stored image (or a target) is damaged.
        InvalidArgumentError: the sample is not shaped as an image.
    """
    img = _drawn(ds, tensor, row, overlays=True)
    img.thumbnail((THUMB_SIZE, THUMB_SIZE))
    return _png(img)


def full_image(ds: Any, tensor: str, row: int, overlays: bool = False) -> tuple[bytes, str]:
    """Row ``row`` of image tensor ``tensor`` at full size, and its media type: the stored bytes as they
    are for a browser format, else (or with ``overlays``) PNG.

    Raises:
        DatasetCorruptError: the stored image is damaged.
        InvalidArgumentError: the sample is not shaped as an image.
    """
    media = BROWSER_TYPES.get(ds.tensors[tensor].sample_compression or "")
    if media is not None and not overlays:
        return ds[tensor][row].tobytes(), media
    return _png(_drawn(ds, tensor, row, overlays)), "image/png"
