"""What COCO and YOLO share: optional imports, numbers for JSON and text, image files, polygon scales."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute import optional
from lakecompute.compression import JPEG_QUALITY, encode_image, encoded_format
from lakecompute.errors import InvalidArgumentError, InvalidSampleError, warn
from lakecompute.ingest import EXTENSION_FORMATS, FORMAT_EXTENSIONS, IMAGE_EXTENSIONS, image_files

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "EXPORT_FORMATS",
    "ImageFiles",
    "encode_mask",
    "image_files",
    "image_size",
    "plain",
    "polygon_points",
    "require",
    "sample_name",
]

_INSTALL = 'pip install "lakecompute[vision]"'


def require(module: str, purpose: str, install: str = _INSTALL) -> ModuleType:
    """Import an optional dependency of the vision formats (`lakecompute.optional.require`, with the
    vision extra's install command), or raise InvalidArgumentError naming the install command."""
    return optional.require(module, purpose, install)


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


#: The formats an export writes images in, by `image_format` name; PNG, WebP (as `encode_image` writes it)
#: and BMP keep every pixel, JPEG does not.
EXPORT_FORMATS = ("png", "jpeg", "webp", "bmp")


class ImageFiles:
    """How an export writes its image files: the stored bytes whenever it can, re-encoded only when asked.

    * A sample stored in the format its file name says (a kept JPEG named ``.jpg``) is written as its
      stored bytes, byte for byte.
    * Stored in another format (a JPEG file converted to PNG at ingest, named ``.jpg``), it is written as
      its stored bytes under the name with the stored format's ending (``a.jpg`` -> ``a.png``): nothing is
      encoded again, nothing is lost. `renamed` lists such names; the export warns once, listing them.
    * ``image_format`` asks for every image in one format: the stored bytes when they are in it, else the
      pixels encoded in it (`lakecompute.compression.encode_image`: JPEG at quality 90, WebP lossless;
      Pillow for BMP) under a name with its ending; encoding as JPEG loses detail, and the export warns,
      counting the images (`reencoded`).
    * An image tensor stored as arrays has no file: its images are written in the name's format when it
      keeps every pixel (PNG, WebP, BMP), else (a ``.jpg`` name) as PNG, renamed.

    Args:
        call: the export (``"export_coco"``), named in warnings.
        compression: the image tensor's sample compression (None: arrays).
        image_format: None, or one of `EXPORT_FORMATS` (any case; ``"jpg"`` is ``"jpeg"``).

    Raises:
        InvalidArgumentError: an ``image_format`` that is not one of `EXPORT_FORMATS`.
    """

    def __init__(self, call: str, compression: str | None, image_format: str | None) -> None:
        self.call = call
        self.compression = compression
        self.image_format = _export_format(image_format)
        self.renamed: list[tuple[str, str]] = []
        self.reencoded: list[str] = []

    def default_name(self, stem: str) -> str:
        """The file name of a sample without one: ``stem`` with the ending of the format it is written in."""
        return stem + FORMAT_EXTENSIONS[self.image_format or self.compression or "png"]

    def file(self, sample: Any, name: str, what: str) -> tuple[str, bytes]:
        """The name to write one image sample (a ``ds.images[i]`` view) under, and its bytes (see above);
        ``name`` is the sample's file name, ``what`` names it in messages.

        Raises:
            InvalidArgumentError: the name does not end in an image file ending, or the image cannot be
                encoded in the format asked for (RGBA as JPEG).
        """
        stem, ending = os.path.splitext(name)
        named = EXTENSION_FORMATS.get(ending.lower())
        if named is None:
            raise InvalidArgumentError(
                f"{what} does not end in one of {sorted(IMAGE_EXTENSIONS)}, so the image cannot be written "
                "under it. Rename the file (ds.file_name[i] = ...)."
            )
        blob = bytes(sample.tobytes()) if self.compression is not None else None
        stored = (encoded_format(blob) or self.compression) if blob is not None else None
        target = self.image_format or stored or (named if named != "jpeg" else "png")
        out = name if target == named else stem + FORMAT_EXTENSIONS[target]
        if out != name:
            self.renamed.append((name, out))
        if blob is not None and stored == target:
            return out, blob
        if target == "jpeg":
            self.reencoded.append(name)
        return out, _encoded(np.asarray(sample.numpy()), target, what)

    def warn(self) -> None:
        """Say, once, which files were written under another name and which were encoded lossily."""
        if self.renamed:
            shown = ", ".join(f"{a!r} -> {b!r}" for a, b in self.renamed[:5])
            more = f", and {len(self.renamed) - 5} more" if len(self.renamed) > 5 else ""
            how = (
                f"in the format asked for (image_format={self.image_format!r})"
                if self.image_format
                else "as the bytes they are stored as (in another format than their names said; nothing "
                "encoded again). Pass image_format=... to have every image encoded in one format"
            )
            warn(
                f"{self.call} wrote {len(self.renamed)} image file(s) under a name with another ending, "
                f"{how}: {shown}{more}. The written annotations name the files as written."
            )
        if self.reencoded:
            warn(
                f"{self.call} encoded {len(self.reencoded)} image(s) as JPEG (image_format='jpeg', quality "
                f"{JPEG_QUALITY}), which is lossy: their pixels differ from the stored ones (first: "
                f"{self.reencoded[0]!r}). Export without image_format to write every image as it is stored."
            )


def _export_format(value: str | None) -> str | None:
    if value is None:
        return None
    name = value.lower() if isinstance(value, str) else value
    name = "jpeg" if name == "jpg" else name
    if name not in EXPORT_FORMATS:
        raise InvalidArgumentError(
            f"image_format must be None (every image written in the format it is stored in) or one of "
            f"{list(EXPORT_FORMATS)!r}. Got {value!r}."
        )
    return str(name)


def _encoded(pixels: np.ndarray, fmt: str, what: str) -> bytes:
    """``pixels`` encoded as ``fmt`` (`encode_image` for the sample compressions, Pillow for BMP)."""
    import io

    from PIL import Image

    try:
        if fmt != "bmp":
            return encode_image(pixels, fmt, tensor="images")
        out = io.BytesIO()
        Image.fromarray(pixels[:, :, 0] if pixels.ndim == 3 and pixels.shape[2] == 1 else pixels).save(
            out, format="BMP"
        )
        return out.getvalue()
    except (InvalidSampleError, OSError, ValueError, TypeError) as exc:  # RGBA as JPEG, sizes past a limit
        detail = exc.detail if isinstance(exc, InvalidSampleError) else str(exc)
        raise InvalidArgumentError(
            f"{what}: the image cannot be written as {fmt.upper()} ({detail}). Export without image_format "
            "(every image as it is stored), or with image_format='png', which holds every image."
        ) from exc


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
