"""An encoded image's file checked whole without decoding its pixels (the table ingests' ``verify=False``),
and a JPEG's frame header read (what decodes it: the GPU's JPEG decoder takes only some frames).

What is checked, per format:

* **PNG**: the signature; every chunk's length inside the file and its CRC; IHDR first, with a size,
  bit depth, colour type and methods PNG allows; a PLTE before the pixels of a palette image; at least
  one IDAT; and the IEND chunk, after which nothing is read (bytes past it are ignored, as decoders do).
* **JPEG**: SOI, then every marker segment up to the first SOS (its length inside the file), a frame
  header (SOF) of 8-bit samples with 1, 3 or 4 components and a size, and the EOI marker at the end
  (zero padding after it is allowed).
* **WebP**: the RIFF header's size is the file's, and the chunks inside it fill it exactly, the first
  a VP8, VP8L or VP8X chunk.

A file that passes can still fail to decode (its compressed pixels are not looked at): reading such a
sample later raises `lakecompute.errors.DatasetCorruptError`, as for any stored sample that does not
decode. Pixel sizes are refused past Pillow's decompression-bomb limit, as a decode would.

`check_structure` also gives a PNG's and a JPEG's shape (the one `lakecompute.compression.decode_image`
returns) from the header it walked, so that no second parser runs; a WebP's comes from Pillow's header.
`jpeg_frame` gives a JPEG's whole frame header (`JpegFrame`: coding process, components and their sampling
factors, the Adobe colour transform) from the same walk.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from PIL import Image

try:  # zlib-ng's CRC-32 (the tables extra) runs at 26 GB/s here, the system zlib's at 7: the same function
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - the tables extra installs it
    from zlib import crc32

from lakecompute.errors import InvalidArgumentError

__all__ = ["JpegFrame", "check_structure", "jpeg_frame"]

_PNG: Final = b"\x89PNG\r\n\x1a\n"
#: Bit depths PNG allows per colour type (PNG spec 11.2.2, table 11.1).
_PNG_DEPTHS: Final[dict[int, tuple[int, ...]]] = {
    0: (1, 2, 4, 8, 16),
    2: (8, 16),
    3: (1, 2, 4, 8),
    4: (8, 16),
    6: (8, 16),
}
#: The channels `decode_image` gives per colour type (a palette's depend on its transparency).
_PNG_CHANNELS: Final[dict[int, int]] = {0: 1, 2: 3, 4: 4, 6: 4}
#: JPEG markers that stand alone (no length follows): TEM, RST0-7, SOI.
_STANDALONE: Final = frozenset({0x01, *range(0xD0, 0xD8), 0xD8})
#: Start-of-frame markers (all but DHT 0xC4, JPG 0xC8 and DAC 0xCC of 0xC0-0xCF).
_SOF: Final = frozenset(set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC})
_SOS: Final = 0xDA
_EOI: Final = 0xD9
_APP14: Final = 0xEE


@dataclass(frozen=True, slots=True)
class JpegFrame:
    """A JPEG's frame header (SOF), and the colour transform its Adobe segment names, if it has one.

    Attributes:
        marker: the SOF marker's second byte: 0xC0 baseline, 0xC1 extended and 0xC2 progressive Huffman
            coding; 0xC3 lossless; 0xC5-0xC7 hierarchical; 0xC9-0xCF arithmetic coding.
        height, width: the size in pixels.
        components: ``(id, horizontal, vertical)`` per component: its identifier and sampling factors.
        adobe_transform: the APP14 "Adobe" segment's transform (0: none, so 3 components are RGB; 1:
            YCbCr; 2: YCCK), or None without one.
    """

    marker: int
    height: int
    width: int
    components: tuple[tuple[int, int, int], ...]
    adobe_transform: int | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape `decode_image` gives it: HxW for greyscale, HxWx3 for colour (CMYK too)."""
        if len(self.components) == 1:
            return self.height, self.width
        return self.height, self.width, 3


def _bad(why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"The image file is damaged or incomplete: {why}.")


def _size_ok(width: int, height: int) -> None:
    """Refuse an empty image and one past Pillow's decompression-bomb limit (a decode refuses it)."""
    if width <= 0 or height <= 0:
        raise _bad(f"it declares a size of {width}x{height} pixels")
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > 2 * limit:
        raise InvalidArgumentError(
            f"The image declares {width}x{height} pixels, more than the {2 * limit} Pillow decodes "
            "(a decompression bomb)."
        )


def check_structure(data: bytes | memoryview) -> tuple[int, ...] | None:
    """Check that ``data`` is a whole PNG, JPEG or WebP file, without decoding its pixels.

    Returns:
        For a PNG of at most 8 bits per channel, and a JPEG: the shape `decode_image` gives (HxW for
        greyscale, HxWx3, HxWx4). None for a WebP and a PNG of 16 bits per channel (their header is read
        by Pillow, which also refuses the 16-bit one, naming its depth).

    Raises:
        InvalidArgumentError: the file is damaged, incomplete, not one of these formats, or declares no
            pixels or too many (the message says what).
    """
    view = memoryview(data).cast("B")  # slices of a view are not copies (the chunks' CRCs read them)
    head = bytes(view[:12])
    if head.startswith(_PNG):
        return _png(view)
    if head.startswith(b"\xff\xd8"):
        return _jpeg(view).shape
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        _webp(view)
        return None
    raise InvalidArgumentError("Cannot read the image data: expected PNG, JPEG or WebP bytes.")


def jpeg_frame(data: bytes | memoryview) -> JpegFrame:
    """The frame header of the JPEG file ``data``, after its structure is checked as `check_structure`
    checks it (every segment to the first scan, the end-of-image marker).

    Raises:
        InvalidArgumentError: ``data`` is not a whole JPEG file, or one `check_structure` refuses.
    """
    view = memoryview(data).cast("B")
    if bytes(view[:2]) != b"\xff\xd8":
        raise InvalidArgumentError("Cannot read the image data: expected JPEG bytes.")
    return _jpeg(view)


def _png_chunk(data: memoryview, at: int) -> tuple[bytes, int]:
    """The kind of the PNG chunk at ``at`` and where it ends (its CRC checked)."""
    end = len(data)
    if at + 12 > end:
        raise _bad(f"it ends inside a chunk header at byte {at}, before its IEND chunk")
    length = int.from_bytes(data[at : at + 4], "big")
    kind = bytes(data[at + 4 : at + 8])
    stop = at + 8 + length
    if length > 0x7FFFFFFF or stop + 4 > end:
        raise _bad(f"its {kind!r} chunk at byte {at} claims {length} bytes, past the end of the file")
    if crc32(data[at + 4 : stop]) != int.from_bytes(data[stop : stop + 4], "big"):
        raise _bad(f"the CRC of its {kind!r} chunk at byte {at} does not match")
    return kind, stop


def _png(data: memoryview) -> tuple[int, ...] | None:
    at = len(_PNG)
    kind, stop = _png_chunk(data, at)
    width, height, depth, colour = _ihdr(kind, data[at + 8 : stop])
    palette = transparent = pixels = False
    while kind != b"IEND":
        at = stop + 4
        kind, stop = _png_chunk(data, at)
        if kind == b"IHDR":
            raise _bad("it has a second IHDR chunk")
        palette |= kind == b"PLTE"
        transparent |= kind == b"tRNS"
        if kind == b"IDAT" and colour == 3 and not palette:
            raise _bad("its palette image has no PLTE chunk before its pixels")
        pixels |= kind == b"IDAT"
    if not pixels:
        raise _bad("it has no IDAT chunk (no pixels)")
    if depth > 8:
        return None  # Pillow's header says the depth in the message that refuses it
    channels = (4 if transparent else 3) if colour == 3 else _PNG_CHANNELS[colour]
    return (height, width) if channels == 1 else (height, width, channels)


def _ihdr(kind: bytes, body: memoryview) -> tuple[int, int, int, int]:
    """``(width, height, bit depth, colour type)`` of a PNG's first chunk, checked."""
    if kind != b"IHDR" or len(body) != 13:
        raise _bad(f"its first chunk is {kind!r} of {len(body)} bytes, not a 13-byte IHDR")
    width, height = int.from_bytes(body[0:4], "big"), int.from_bytes(body[4:8], "big")
    depth, colour, method, filtering, interlace = (int(b) for b in body[8:13])
    if depth not in _PNG_DEPTHS.get(colour, ()):
        raise _bad(f"its IHDR declares colour type {colour} with bit depth {depth}, which PNG does not allow")
    if method or filtering or interlace > 1:
        raise _bad(f"its IHDR declares methods {method}, {filtering}, {interlace}, which PNG does not define")
    if width > 0x7FFFFFFF or height > 0x7FFFFFFF:
        raise _bad(f"it declares a size of {width}x{height} pixels")
    _size_ok(width, height)
    return width, height, depth, colour


def _marker(data: memoryview, at: int) -> tuple[int, int]:
    """The next JPEG marker that has a length, from byte ``at`` (fill bytes and standalone markers
    passed), and where it is."""
    end = len(data)
    while True:
        if at + 2 > end or data[at] != 0xFF:
            raise _bad(f"no marker at byte {at}, before its first scan (SOS)")
        while at + 1 < end and data[at + 1] == 0xFF:  # fill bytes before a marker
            at += 1
        if at + 2 > end:
            raise _bad("it ends inside a marker, before its first scan (SOS)")
        marker = data[at + 1]
        if marker in (0xD8, 0):
            raise _bad(f"a misplaced byte 0x{marker:02X} follows 0xFF at byte {at}")
        if marker not in _STANDALONE:
            return marker, at
        at += 2


def _jpeg(data: memoryview) -> JpegFrame:
    at, end = 2, len(data)
    frame: JpegFrame | None = None
    transform: int | None = None
    marker = 0
    while marker != _SOS:
        marker, at, body = _segment(data, at)
        if marker in _SOF and frame is not None:
            raise _bad("it has a second frame header (SOF)")
        if marker in _SOF:
            frame = _sof(marker, body)
        if marker == _APP14 and len(body) >= 12 and bytes(body[:5]) == b"Adobe":
            transform = body[11]
        if marker != _SOS:
            at += 4 + len(body)
    if frame is None:
        raise _bad("it has no frame header (SOF) before its first scan")
    tail = bytes(data[max(at, end - 4096) :]).rstrip(b"\x00")
    if not tail.endswith(b"\xff\xd9"):
        raise _bad("it does not end with the EOI marker (the file is cut short)")
    return replace(frame, adobe_transform=transform)


def _segment(data: memoryview, at: int) -> tuple[int, int, memoryview]:
    """The next marker segment from byte ``at`` (before the first scan): its marker, where it starts, and
    its body (the bytes after its length), checked to lie inside the file."""
    marker, at = _marker(data, at)
    if marker == _EOI:
        raise _bad("it ends (EOI) before its first scan (SOS)")
    if at + 4 > len(data):
        raise _bad(f"it ends inside the length of marker 0x{marker:02X} at byte {at}")
    length = int.from_bytes(data[at + 2 : at + 4], "big")
    if length < 2 or at + 2 + length > len(data):
        raise _bad(f"marker 0x{marker:02X} at byte {at} claims {length} bytes, past the end of the file")
    return marker, at, data[at + 4 : at + 2 + length]


def _sof(marker: int, body: memoryview) -> JpegFrame:
    """The frame header ``body`` of SOF marker ``marker``, checked (its Adobe transform not yet known)."""
    if len(body) < 6:
        raise _bad(f"its frame header (0x{marker:02X}) holds {len(body)} bytes")
    precision = body[0]
    height, width = int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big")
    components = body[5]
    if len(body) != 6 + 3 * components:
        raise _bad(f"its frame header holds {len(body)} bytes for {components} components")
    if precision != 8:
        raise InvalidArgumentError(
            f"Expected an 8-bit image. Got a JPEG of {precision} bits per sample; convert it to 8 bits."
        )
    if components not in (1, 3, 4):
        raise InvalidArgumentError(
            f"Expected a greyscale, RGB or CMYK JPEG. Got one of {components} components."
        )
    _size_ok(width, height)
    fields = body[6:]
    parts = tuple((fields[k], fields[k + 1] >> 4, fields[k + 1] & 15) for k in range(0, 3 * components, 3))
    return JpegFrame(marker, height, width, parts)


def _webp(data: memoryview) -> None:
    end = int.from_bytes(data[4:8], "little") + 8  # bytes after the RIFF chunk are not read
    if end > len(data) or end < 12:
        raise _bad(f"its RIFF header claims {end} bytes, the file holds {len(data)}")
    at, first = 12, True
    while at < end:
        if at + 8 > end:
            raise _bad(f"it ends inside a chunk header at byte {at}")
        kind = bytes(data[at : at + 4])
        length = int.from_bytes(data[at + 4 : at + 8], "little")
        stop = at + 8 + length + (length & 1)
        if stop > end:
            raise _bad(f"its {kind!r} chunk at byte {at} claims {length} bytes, past the end of the file")
        if first and kind not in (b"VP8 ", b"VP8L", b"VP8X"):
            raise _bad(f"its first chunk is {kind!r}, not VP8, VP8L or VP8X")
        first = False
        at = stop
    if first:
        raise _bad("it holds no chunks")
