"""One image file, read lazily (`read`, `ImageFile`), and decoded for an ingest (`load_for_ingest`).

An `ImageFile` appended to an image tensor whose sample compression is the file's own format is
stored as its bytes (a JPEG is not re-encoded and loses nothing); otherwise it is decoded like an array.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from io import BytesIO
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "EXTENSION_FORMATS",
    "FORMATS",
    "FORMAT_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "ImageFile",
    "PathLike",
    "image_files",
    "is_image_name",
    "load_for_ingest",
    "read",
    "unreadable",
    "with_skip_advice",
]

EXTENSION_FORMATS: Final[Mapping[str, str]] = MappingProxyType(
    {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png", ".webp": "webp", ".bmp": "bmp"}
)
"""Image file name endings (lower case) -> the format their content normally has: the one table of
which files are images, what an ingest plan counts, and what an export names a file."""

IMAGE_EXTENSIONS: Final[frozenset[str]] = frozenset(EXTENSION_FORMATS)
"""File name endings (any case) that `ingest_classification` reads as images."""

FORMAT_EXTENSIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        fmt: next(ending for ending, of in EXTENSION_FORMATS.items() if of == fmt)
        for fmt in dict.fromkeys(EXTENSION_FORMATS.values())
    }
)
"""Format -> the file name ending written for it (the first listed: ``.jpg`` for JPEG)."""


def is_image_name(name: str) -> bool:
    """Whether a file named ``name`` is read as an image: not hidden, ending in `IMAGE_EXTENSIONS`."""
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def image_files(folder: str) -> list[str]:
    """Image files under ``folder`` (any depth, hidden entries skipped), sorted, relative to it."""
    found: list[str] = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(os.path.relpath(os.path.join(root, n), folder) for n in names if is_image_name(n))
    return sorted(found)


FORMATS: Final[dict[str, str]] = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png", "WEBP": "webp", "BMP": "bmp"}
"""Pillow's format names -> ours (the sample compressions; other formats keep Pillow's name, lower case)."""

PathLike = str | os.PathLike[str]


class ImageFile:
    """An image file, read on first use and decoded only when its pixels are asked for.

    Made by `lc.read`. It can be appended wherever an image array can:

    * to an image tensor whose ``sample_compression`` is the file's format, the file's bytes are
      stored as they are (checked to decode first) — no re-encoding, no extra JPEG loss;
    * anywhere else it is decoded (``.numpy()``) and stored like an array.

    Pixels come back as uint8: HxW for greyscale, HxWx3 for colour, HxWx4 with transparency.

    Attributes:
        path: the file's path as given.
    """

    __slots__ = ("_data", "_decodes", "_format", "_shape", "path")

    def __init__(self, path: str, data: bytes | None = None) -> None:
        self.path = path
        self._data = data
        self._format: str | None = None
        self._shape: tuple[int, ...] | None = None
        self._decodes = False  # known to decode fully (checked by load_for_ingest)

    def _bytes(self) -> bytes:
        if self._data is None:
            try:
                with open(self.path, "rb") as f:
                    self._data = f.read()
            except OSError as exc:
                raise InvalidArgumentError(f"Cannot read image file {self.path!r} ({exc}).") from exc
        return self._data

    def _open(self) -> Image.Image:
        from PIL import Image

        try:
            return Image.open(BytesIO(self._bytes()))
        except Exception as exc:  # Pillow raises OSError, ValueError or SyntaxError for broken files
            raise unreadable(self.path, exc) from exc

    def _header(self) -> None:
        from lakecompute.compression import decoded_mode

        image = self._open()
        fmt = image.format or "unknown"
        self._format = FORMATS.get(fmt, fmt.lower())
        try:
            mode = decoded_mode(image)
        except InvalidArgumentError as exc:
            raise unreadable(self.path, exc) from exc
        width, height = image.size
        self._shape = (height, width) if mode == "L" else (height, width, len(mode))

    @property
    def format(self) -> str:
        """The file's format: ``"jpeg"``, ``"png"``, ``"webp"``, ``"bmp"``, ... (from its content)."""
        if self._format is None:
            self._header()
        assert self._format is not None
        return self._format

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape `numpy()` returns, read from the file's header only."""
        if self._shape is None:
            self._header()
        assert self._shape is not None
        return self._shape

    def numpy(self) -> np.ndarray:
        """Decode the pixels.

        Raises:
            InvalidSampleError: the file is not a readable 8-bit image (the message names it).
        """
        from lakecompute.compression import decode_image

        try:
            return decode_image(self._bytes(), self.shape)
        except InvalidArgumentError as exc:
            raise unreadable(self.path, exc) from exc

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else arr

    def _lakecompute_blob(self) -> tuple[str, bytes, tuple[int, ...]]:
        """``(format, bytes, shape)`` for storing the file as it is (see ``htypes.encode_sample``)."""
        if not self._decodes:
            self.numpy()  # a file that does not decode must not be stored
        return self.format, self._bytes(), self.shape

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to a worker before it was read, an ImageFile travels as its path only.
        return (ImageFile, (self.path, self._data))

    def __repr__(self) -> str:
        return f"ImageFile({self.path!r})"


def read(path: PathLike) -> ImageFile:
    """Open an image file lazily; append the result to an image tensor like an array.

    Args:
        path: a JPEG, PNG, WebP or BMP file (any format Pillow reads).

    Returns:
        An `ImageFile`: ``.numpy()``, ``.shape``, ``.format``.

    Raises:
        InvalidArgumentError: there is no such file.

    Example:
        >>> ds = lc.empty("./photos", overwrite=True)  # doctest: +SKIP
        >>> ds.create_tensor("images", htype="image", sample_compression="jpeg")  # doctest: +SKIP
        >>> ds.images.append(lc.read("cat.jpg"))  # stored as the file's own bytes  # doctest: +SKIP
    """
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise InvalidArgumentError(
            f"No image file at {name!r}. Check the path (relative to {os.getcwd()!r})."
        )
    return ImageFile(name)


_FIX_FILE = "Fix or remove the file."


def unreadable(path: str, exc: BaseException, tensor: str = "") -> InvalidSampleError:
    """A file that is not a readable image. Without ``tensor`` (an `ImageFile` does not know where it will
    be written) the tensor's writer names it; an ingest, which knows, says how to skip such files."""
    # Pillow names the buffer it was given (<_io.BytesIO object at 0x...>), not the file: said once, above.
    reason = re.sub(r" ?<_io\.\w+ object at 0x[0-9a-f]+>", "", str(exc))
    detail = f"cannot read image file {path!r} ({type(exc).__name__}: {reason}). {_FIX_FILE}"
    return InvalidSampleError(tensor, with_skip_advice(detail) if tensor else detail, source=path)


def skip_advice(fix: str, skipped: str) -> str:
    """The last sentence of an ingest's error about one input file: how to fix it, or which images
    ``skip_errors=True`` skips instead (`without_skip_advice` takes the second half out again)."""
    return f"{fix}{_SKIP_HEAD}{skipped}."


_SKIP_HEAD = ", or pass skip_errors=True to skip "


def without_skip_advice(message: str) -> str:
    """``message`` as the warning of an ingest run with ``skip_errors=True`` lists it: without the advice
    to pass it (`skip_advice`)."""
    head = message.find(_SKIP_HEAD)
    end = message.find(".", head + len(_SKIP_HEAD)) if head >= 0 else -1
    return message if end < 0 else message[:head] + message[end:]


def with_skip_advice(detail: str) -> str:
    """An unreadable file's message as an ingest gives it: with the option that skips such files."""
    return detail.replace(_FIX_FILE, skip_advice(_FIX_FILE[:-1], "unreadable files"))


def load_for_ingest(path: str, mode: str, compression: str | None) -> np.ndarray | ImageFile:
    """Decode one file fully (so a broken one fails here, named); the bytes themselves when they can
    be stored as they are, else the pixels in ``mode``."""
    from PIL import Image

    from lakecompute.compression import decoded_mode

    file = ImageFile(path)
    data = file._bytes()
    try:
        with Image.open(BytesIO(data)) as opened:
            opened.load()
            decoded = decoded_mode(opened)
            fmt = FORMATS.get(opened.format or "", "")
            if compression is not None and fmt == compression and decoded == mode:
                file._format = fmt
                width, height = opened.size
                file._shape = (height, width) if mode == "L" else (height, width, 3)
                file._decodes = True  # opened.load() above decoded every pixel: no need to again
                return file
            image: Image.Image = opened
            if image.mode != decoded:
                # Via the decoded mode: Pillow warns when a palette with transparency goes straight to RGB.
                image = image.convert(decoded)
            pixels = np.asarray(image.convert(mode) if image.mode != mode else image)
    except Exception as exc:  # Pillow raises OSError, ValueError or SyntaxError for broken files
        raise unreadable(path, exc, "images") from exc
    return pixels
