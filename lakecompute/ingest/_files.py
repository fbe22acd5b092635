"""One image file, read lazily (`read`, `ImageFile`), and decoded for an ingest (`load_for_ingest`).

An `ImageFile` appended to an image tensor whose sample compression is the file's own format is
stored as its bytes (a JPEG is not re-encoded and loses nothing); otherwise it is decoded like an array.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError, warn
from lakecompute.parsing import parse_flag

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "AS_STORED",
    "EXTENSION_FORMATS",
    "FORMATS",
    "FORMAT_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "SKIPPED_IMAGE_EXTENSIONS",
    "ImageFile",
    "PathLike",
    "ReadOptions",
    "image_files",
    "is_image_name",
    "load_for_ingest",
    "read",
    "skipped_images",
    "unreadable",
    "with_skip_advice",
]

EXTENSION_FORMATS: Final[Mapping[str, str]] = MappingProxyType(
    {
        ".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png", ".webp": "webp", ".bmp": "bmp",
        ".tif": "tiff", ".tiff": "tiff", ".ppm": "ppm", ".pgm": "ppm",
    }
)  # fmt: skip
"""Image file name endings (lower case) -> the format their content normally has: the one table of
which files are images, what an ingest plan counts, and what an export names a file. The endings are
torchvision's ``ImageFolder``'s (a TIFF of several pages is refused, not cut to its first)."""

IMAGE_EXTENSIONS: Final[frozenset[str]] = frozenset(EXTENSION_FORMATS)
"""File name endings (any case) that `ingest_classification` reads as images."""

SKIPPED_IMAGE_EXTENSIONS: Final[frozenset[str]] = frozenset(
    [
        ".gif", ".apng", ".heic", ".heif", ".avif", ".jfif", ".jpe", ".jp2", ".j2k", ".ico", ".tga", ".psd",
        ".pbm", ".pnm", ".qoi", ".svg", ".dng", ".cr2", ".nef", ".arw", ".raw",
    ]
)  # fmt: skip
"""Endings of image files an ingest does not read (animations, camera raw, HEIC, vector images...): not
silently skipped, but named in a warning (`skipped_images`), since a folder of them is likely meant."""

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


def image_files(folder: str, skipped: list[str] | None = None, above: Sequence[str] = ()) -> list[str]:
    """Image files under ``folder`` (any depth, hidden entries skipped), sorted, relative to it; the image
    files not read (`SKIPPED_IMAGE_EXTENSIONS`) are added to ``skipped`` (paths under ``folder``).

    Symbolic links are followed, to files and to folders alike, as torchvision's ``ImageFolder`` and
    ultralytics follow them (a split made of links to the images holds them all); a link back to a
    folder the walk is inside (or to one of ``above``, folders that hold ``folder``) is not followed,
    so a loop of links is walked once instead of forever."""
    found: list[str] = []
    for root, names in _walk(folder, above):
        found.extend(os.path.relpath(os.path.join(root, n), folder) for n in names if is_image_name(n))
        if skipped is not None:
            skipped.extend(
                os.path.join(root, n)
                for n in sorted(names)
                if not n.startswith(".") and os.path.splitext(n)[1].lower() in SKIPPED_IMAGE_EXTENSIONS
            )
    return sorted(found)


def _walk(folder: str, above: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """``os.walk``'s folders and file names, following links to folders but none that leads back to a
    folder it is inside (each folder's real path is checked against those of the folders above it)."""
    inside: dict[str, frozenset[str]] = {folder: frozenset(os.path.realpath(f) for f in (*above, folder))}
    for root, dirs, names in os.walk(folder, followlinks=True):
        outer = inside.pop(root, frozenset())
        kept = []
        for name in sorted(d for d in dirs if not d.startswith(".")):
            real = os.path.realpath(os.path.join(root, name))
            if real not in outer:
                inside[os.path.join(root, name)] = outer | {real}
                kept.append(name)
        dirs[:] = kept
        yield root, names


def skipped_images(skipped: Sequence[str], call: str, where: str) -> None:
    """Warn, once, that ``call`` skipped the image files ``skipped`` found in ``where`` (a count per ending
    and the first few paths), and how to have them read; nothing when there are none."""
    if not skipped:
        return
    endings = Counter(os.path.splitext(p)[1].lower() for p in skipped)
    counts = ", ".join(f"{e}: {n}" for e, n in endings.most_common())
    shown = ", ".join(repr(p) for p in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
    warn(
        f"{call} skipped {len(skipped)} image file(s) in {where!r} that it does not read ({counts}): "
        f"{shown}. It reads files ending in {', '.join(sorted(IMAGE_EXTENSIONS))}; convert the others to "
        "one of those to have them ingested (a GIF or APNG may hold many frames, a camera raw file needs "
        "developing, HEIC needs a Pillow plugin)."
    )


FORMATS: Final[dict[str, str]] = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png", "WEBP": "webp", "BMP": "bmp"}
"""Pillow's format names -> ours (the sample compressions; other formats keep Pillow's name, lower case)."""

PathLike = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How image files are read beyond their stored pixels (`lc.read`, and every ingest's options).

    Attributes:
        convert_depth: read an image of 16 bits per channel as 8 bits, keeping each value's high byte,
            instead of refusing it (a 16-bit PNG of any mode; see `lakecompute.compression.image_depth`).
        exif_transpose: turn the pixels as the file's EXIF orientation says (a phone's portrait photo is
            stored on its side, with a tag saying how to show it), as viewers and OpenCV do. Off, the
            pixels are as stored, as Pillow and torchvision's ``ImageFolder`` read them.
    """

    convert_depth: bool = False
    exif_transpose: bool = False


AS_STORED: Final = ReadOptions()
"""The default `ReadOptions`: pixels as stored, more than 8 bits per channel refused."""

#: EXIF orientation -> the numpy steps that show the stored pixels upright (as Pillow's
#: ``ImageOps.exif_transpose``): transpose the first two axes, then flip rows, then flip columns.
_ORIENTATIONS: Final[dict[int, tuple[bool, bool, bool]]] = {
    2: (False, False, True), 3: (False, True, True), 4: (False, True, False), 5: (True, False, False),
    6: (True, False, True), 7: (True, True, True), 8: (True, True, False),
}  # fmt: skip


def orientation(image: Image.Image) -> int:
    """The EXIF orientation (1 to 8) of an opened image, from its header; 1 (as stored) without one."""
    try:
        value = image.getexif().get(0x0112, 1)
    except Exception:  # a damaged EXIF block: Pillow raises various errors; the pixels are as stored
        return 1
    return value if isinstance(value, int) and value in _ORIENTATIONS else 1


def upright(pixels: np.ndarray, turn: int) -> np.ndarray:
    """``pixels`` (HxW or HxWxC) turned as EXIF orientation ``turn`` says."""
    steps = _ORIENTATIONS.get(turn)
    if steps is None:
        return pixels
    swap, rows, cols = steps
    out = pixels.swapaxes(0, 1) if swap else pixels
    out = out[::-1] if rows else out
    return np.ascontiguousarray(out[:, ::-1] if cols else out)


class ImageFile:
    """An image file, read on first use and decoded only when its pixels are asked for.

    Made by `lc.read`. It can be appended wherever an image array can:

    * to an image tensor whose ``sample_compression`` is the file's format, the file's bytes are
      stored as they are (checked to decode first) — no re-encoding, no extra JPEG loss — unless the
      pixels read differ from the stored ones (a 16-bit file read with ``convert_depth``, a turned
      EXIF orientation with ``exif_transpose``);
    * anywhere else it is decoded (``.numpy()``) and stored like an array.

    Pixels come back as uint8: HxW for greyscale, HxWx3 for colour, HxWx4 with transparency. A file of
    more than 8 bits per channel is refused, naming its depth (or converted: `ReadOptions`).

    Attributes:
        path: the file's path as given.
        options: how the file is read (`ReadOptions`).
    """

    __slots__ = ("_as_stored", "_data", "_decodes", "_format", "_shape", "_turn", "options", "path")

    def __init__(self, path: str, data: bytes | None = None, options: ReadOptions = AS_STORED) -> None:
        self.path = path
        self.options = options
        self._data = data
        self._format: str | None = None
        self._shape: tuple[int, ...] | None = None
        self._turn = 1  # the EXIF orientation applied (1: none)
        self._as_stored = True  # the pixels read are the stored ones: the bytes can be kept
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
        self._read_header(self._open())

    def _read_header(self, image: Image.Image) -> str:
        """Take the format, depth, orientation and shape from an opened, not yet loaded, image; returns
        the 8-bit mode it decodes to."""
        from lakecompute.compression import decoded_mode, image_depth

        fmt = image.format or "unknown"
        self._format = FORMATS.get(fmt, fmt.lower())
        try:
            mode = decoded_mode(image, convert_depth=self.options.convert_depth)
            pages = getattr(image, "n_frames", 1) if fmt == "TIFF" else 1
            if pages != 1:
                raise InvalidArgumentError(
                    f"Expected one image per file. Got a TIFF of {pages} pages, of which only the first "
                    "would be read: split it into one file per page."
                )
        except InvalidArgumentError as exc:
            raise unreadable(self.path, exc) from exc
        self._turn = orientation(image) if self.options.exif_transpose else 1
        self._as_stored = self._turn == 1 and image_depth(image)[0] <= 8
        width, height = image.size
        if _ORIENTATIONS.get(self._turn, (False,))[0]:
            width, height = height, width
        self._shape = (height, width) if mode == "L" else (height, width, len(mode))
        return mode

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

        shape = self.shape
        if self._turn != 1 and _ORIENTATIONS[self._turn][0]:
            shape = (shape[1], shape[0], *shape[2:])  # as stored, before turning
        try:
            pixels = decode_image(self._bytes(), shape, convert_depth=self.options.convert_depth)
        except InvalidArgumentError as exc:
            raise unreadable(self.path, exc) from exc
        return upright(pixels, self._turn)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else arr

    def _lakecompute_blob(self) -> tuple[str, bytes, tuple[int, ...]]:
        """``(format, bytes, shape)`` for storing the file as it is (see ``htypes.encode_sample``); the
        format is ``""`` when the pixels read are not the stored ones (converted or turned), so that the
        bytes are never stored as if they were."""
        if not self._decodes:
            self.numpy()  # a file that does not decode must not be stored
        return self.format if self._as_stored else "", self._bytes(), self.shape

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to a worker before it was read, an ImageFile travels as its path only.
        return (ImageFile, (self.path, self._data, self.options))

    def __repr__(self) -> str:
        return f"ImageFile({self.path!r})"


def read(path: PathLike, *, convert_depth: bool = False, exif_transpose: bool = False) -> ImageFile:
    """Open an image file lazily; append the result to an image tensor like an array.

    A file of more than 8 bits per channel (a 16-bit PNG of any mode) is refused when read, naming its
    depth, rather than cut to 8 bits; EXIF orientation is not applied unless asked (`ReadOptions`).

    Args:
        path: a JPEG, PNG, WebP or BMP file (any format Pillow reads).
        convert_depth: read a file of 16 bits per channel as 8 bits (each value's high byte).
        exif_transpose: turn the pixels upright as the file's EXIF orientation says.

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
    options = ReadOptions(
        parse_flag("convert_depth", convert_depth), parse_flag("exif_transpose", exif_transpose)
    )
    return ImageFile(name, options=options)


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


def load_for_ingest(
    path: str, mode: str, compression: str | None, options: ReadOptions = AS_STORED
) -> np.ndarray | ImageFile:
    """Decode one file fully (so a broken one fails here, named); the bytes themselves when they can
    be stored as they are (the stored format and colour mode, 8 bits per channel, not turned by its
    EXIF orientation), else the pixels in ``mode``."""
    from PIL import Image

    from lakecompute.compression import eight_bits

    file = ImageFile(path, options=options)
    data = file._bytes()
    try:
        with Image.open(BytesIO(data)) as opened:
            decoded = file._read_header(opened)  # before loading: the depth is read from the header
            opened.load()
            fmt = FORMATS.get(opened.format or "", "")
            if compression is not None and fmt == compression and decoded == mode and file._as_stored:
                file._decodes = True  # opened.load() above decoded every pixel: no need to again
                return file
            image: Image.Image = eight_bits(opened)
            if image.mode != decoded:
                # Via the decoded mode: Pillow warns when a palette with transparency goes straight to RGB.
                image = image.convert(decoded)
            pixels = np.asarray(image.convert(mode) if image.mode != mode else image)
    except InvalidSampleError as exc:  # _read_header refused the depth: said for the ingest's tensor
        raise unreadable(path, exc.__cause__ or exc, "images") from exc
    except Exception as exc:  # Pillow raises OSError, ValueError or SyntaxError for broken files
        raise unreadable(path, exc, "images") from exc
    return upright(pixels, file._turn)
