"""An encoded image from a table cell (Hugging Face's ``{bytes, path}`` struct, or a binary column)."""

from __future__ import annotations

from io import BytesIO
from typing import Any, Final

import numpy as np

from lakecompute.compression import decode_image, image_shape_from_bytes
from lakecompute.errors import InvalidArgumentError, InvalidSampleError

__all__ = ["ImageBytes", "image_format"]

_MAGIC: Final = ((b"\x89PNG", "png"), (b"\xff\xd8", "jpeg"), (b"BM", "bmp"))


def image_format(data: bytes) -> str:
    """The format of encoded image bytes from their first bytes: png, jpeg, webp, bmp, or ``unknown``."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "unknown"


def _fitted(header: tuple[int, ...], dims: tuple[int | None, ...]) -> tuple[int, ...]:
    """The shape an image whose header says ``header`` has in a tensor of ``dims``: greyscale of rank 3 is
    HxWx1, and a fixed channel count wins over the file's (WebP stores greyscale as RGB and may drop
    an opaque alpha channel; `decode_image` restores both exactly)."""
    if len(dims) == 2:
        return header[:2]
    if len(dims) == 3:
        channels = dims[2] if dims[2] is not None else (header[2] if len(header) == 3 else 1)
        return (*header[:2], channels)
    return header


class ImageBytes:
    """An encoded image read from a table: appended to an image tensor whose sample compression is its
    format it is stored as these bytes (after they decode once, checked); anywhere else it is decoded
    like an array (``numpy()``), as `lakecompute.read`'s files are.

    Attributes:
        data: the encoded bytes.
        path: the struct's ``path`` (a name; never opened).
    """

    __slots__ = ("_checked", "_dims", "_shape", "data", "path")

    def __init__(
        self,
        data: bytes,
        path: str | None = None,
        shape: tuple[int, ...] | None = None,
        dims: tuple[int | None, ...] = (),
    ) -> None:
        self.data = data
        self.path = path
        self._shape = shape
        self._dims = dims  # the tensor's rank and fixed extents, when the table recorded them
        self._checked = False

    @property
    def format(self) -> str:
        """``png``, ``jpeg``, ``webp``, ``bmp`` or ``unknown``, from the bytes."""
        return image_format(self.data)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape ``numpy()`` gives: the one the table recorded, else read from the header.

        Raises:
            InvalidSampleError: the bytes are not a readable 8-bit image.
        """
        if self._shape is None:
            try:
                self._shape = _fitted(image_shape_from_bytes(self.data), self._dims)
            except InvalidArgumentError as exc:
                raise self._unreadable(exc) from exc
        return self._shape

    def numpy(self) -> np.ndarray:
        """The pixels, uint8, of `shape`.

        Raises:
            InvalidSampleError: the bytes are not a readable 8-bit image, or not of `shape` (the tensor it
                is written to names itself).
        """
        try:
            return decode_image(self.data, self.shape)
        except InvalidArgumentError as exc:
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: InvalidArgumentError) -> InvalidSampleError:
        what = f"the image {self.path!r}" if self.path else f"the image bytes ({len(self.data)} bytes)"
        return InvalidSampleError("", f"cannot read {what}: {exc}")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else arr

    def check(self) -> ImageBytes:
        """Decode the bytes once, into Pillow's own buffer (as the folder ingests check their files; no
        array is made): bytes that do not decode must not be stored.

        Raises:
            InvalidSampleError: the bytes are not a readable 8-bit image of `shape`.
        """
        if self._checked:
            return self
        from PIL import Image

        height, width = self.shape[:2]
        try:
            with Image.open(BytesIO(self.data)) as image:
                image.load()
                size = image.size
        except Exception as exc:  # Pillow raises OSError, ValueError or SyntaxError for broken data
            raise self._unreadable(InvalidArgumentError(f"Cannot decode the image data ({exc}).")) from exc
        if size != (width, height):
            raise self._unreadable(InvalidArgumentError(f"it is {size[1]}x{size[0]}, not {self.shape}"))
        self._checked = True
        return self

    def _lakecompute_blob(self) -> tuple[str, bytes, tuple[int, ...]]:
        """``(format, bytes, shape)`` for storing the bytes as they are (see ``htypes`` image codec)."""
        self.check()
        return self.format, self.data, self.shape

    def __reduce__(self) -> tuple[Any, ...]:
        return (ImageBytes, (self.data, self.path, self._shape, self._dims))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImageBytes) and (self.data, self.path) == (other.data, other.path)

    def __hash__(self) -> int:
        return hash((self.data, self.path))

    def __repr__(self) -> str:
        return f"ImageBytes({self.format}, {len(self.data)} bytes, path={self.path!r})"
