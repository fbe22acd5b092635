"""An encoded image from a table cell (Hugging Face's ``{bytes, path}`` struct, or a binary column)."""

from __future__ import annotations

from io import BytesIO
from typing import Any, Final

import numpy as np

from lakecompute.compression import decode_image, decoded_mode, image_shape_from_bytes
from lakecompute.errors import InvalidArgumentError, InvalidSampleError
from lakecompute.imagefiles import check_structure

__all__ = ["ImageBytes", "image_format"]

_MAGIC: Final = ((b"\x89PNG", "png"), (b"\xff\xd8", "jpeg"), (b"BM", "bmp"))


def image_format(data: bytes | memoryview) -> str:
    """The format of encoded image bytes from their first bytes: png, jpeg, webp, bmp, or ``unknown``."""
    head = bytes(data[:12])
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
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
    format it is stored as these bytes (after they are checked, `check`); anywhere else it is decoded
    like an array (``numpy()``), as `lakecompute.read`'s files are.

    Args:
        data: the encoded bytes, or a view of them in the table's buffer (kept as it is: a view is
            stored from there, and copied only when `data` is asked for).

    Attributes:
        path: the struct's ``path`` (a name; never opened).
        verify: how `check` checks the bytes: True (the default) decodes them once; False checks the
            file's structure only, without decoding its pixels (the table ingests' ``verify=False``:
            see `lakecompute.imagefiles`).
    """

    __slots__ = ("_buffer", "_checked", "_dims", "_shape", "path", "verify")

    def __init__(
        self,
        data: bytes | memoryview,
        path: str | None = None,
        shape: tuple[int, ...] | None = None,
        dims: tuple[int | None, ...] = (),
        *,
        verify: bool = True,
    ) -> None:
        self._buffer = data
        self.path = path
        self._shape = shape
        self._dims = dims  # the tensor's rank and fixed extents, when the table recorded them
        self._checked = False
        self.verify = verify

    @property
    def data(self) -> bytes:
        """The encoded bytes (a view of a table's buffer is copied into bytes once, when asked for)."""
        if not isinstance(self._buffer, bytes):
            self._buffer = bytes(self._buffer)
        return self._buffer

    @property
    def nbytes(self) -> int:
        """The encoded bytes' length (what an eval's blocks are sized by)."""
        return len(self._buffer)

    @property
    def format(self) -> str:
        """``png``, ``jpeg``, ``webp``, ``bmp`` or ``unknown``, from the bytes."""
        return image_format(self._buffer)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape ``numpy()`` gives: the one the table recorded, else read from the header.

        Raises:
            InvalidSampleError: the bytes are not a readable 8-bit image.
        """
        if self._shape is None:
            try:
                self._shape = _fitted(image_shape_from_bytes(self._buffer), self._dims)
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
            return decode_image(self._buffer, self.shape)
        except InvalidArgumentError as exc:
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: InvalidArgumentError) -> InvalidSampleError:
        what = f"the image {self.path!r}" if self.path else f"the image bytes ({self.nbytes} bytes)"
        return InvalidSampleError("", f"cannot read {what}: {exc}")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else arr

    def check(self) -> ImageBytes:
        """Check the bytes once, as `verify` says: decoded once, into Pillow's own buffer (as the folder
        ingests check their files; no array is made), or their file's structure alone (`verify` False).
        Bytes that do not decode (or, unverified, whose file is damaged) must not be stored.

        Raises:
            InvalidSampleError: the bytes are not a readable 8-bit image of `shape` (or, unverified, not
                a whole PNG, JPEG or WebP file of `shape`).
        """
        if self._checked:
            return self
        if not self.verify:
            return self._check_structure()
        from PIL import Image

        try:
            with Image.open(BytesIO(self._buffer)) as image:
                if self._shape is None:  # from this header: not opened twice
                    mode = decoded_mode(image)
                    width, height = image.size
                    found = (height, width) if mode == "L" else (height, width, len(mode))
                    self._shape = _fitted(found, self._dims)
                image.load()
                size = image.size
        except InvalidArgumentError as exc:
            raise self._unreadable(exc) from exc
        except Exception as exc:  # Pillow raises OSError, ValueError or SyntaxError for broken data
            raise self._unreadable(InvalidArgumentError(f"Cannot decode the image data ({exc}).")) from exc
        self._same_size(size)
        self._checked = True
        return self

    def _check_structure(self) -> ImageBytes:
        try:
            found = check_structure(self._buffer)
            if found is None and self._shape is not None:
                # A WebP's (or a 16-bit PNG's) header, by Pillow, to hold the table's shape against.
                found = image_shape_from_bytes(self._buffer)
        except InvalidArgumentError as exc:
            raise self._unreadable(exc) from exc
        if found is not None and self._shape is None:
            self._shape = _fitted(found, self._dims)
        elif found is not None:
            self._same_size((found[1], found[0]))
        _ = self.shape  # a WebP's (and a 16-bit PNG's) header, by Pillow: it refuses what is not 8-bit
        self._checked = True
        return self

    def _same_size(self, size: tuple[int, int]) -> None:
        """Refuse pixels of another size than the recorded `shape` (``size`` is Pillow's width, height)."""
        height, width = self.shape[:2]
        if size != (width, height):
            raise self._unreadable(InvalidArgumentError(f"it is {size[1]}x{size[0]}, not {self.shape}"))

    def _lakecompute_blob(self) -> tuple[str, bytes | memoryview, tuple[int, ...]]:
        """``(format, bytes, shape)`` for storing the bytes as they are (see ``htypes`` image codec): a
        view of a table's buffer as it is (stored from there by the process that read it)."""
        self.check()
        return self.format, self._buffer, self.shape

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (self.data, self.path, self._shape, self._dims, self.verify))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImageBytes) and (self.data, self.path) == (other.data, other.path)

    def __hash__(self) -> int:
        return hash((self.data, self.path))

    def __repr__(self) -> str:
        return f"ImageBytes({self.format}, {self.nbytes} bytes, path={self.path!r})"


def _rebuilt(
    data: bytes, path: str | None, shape: tuple[int, ...] | None, dims: tuple[int | None, ...], verify: bool
) -> ImageBytes:
    """An `ImageBytes` sent to another process (``verify`` is keyword-only)."""
    return ImageBytes(data, path, shape, dims, verify=verify)
