"""Sample compression (png / jpeg / webp images) and chunk compression (zarr v3 codecs).

Two kinds of compression meet in a lakecompute tensor:

* **Sample compression** encodes one image at a time into a self-contained blob (PNG, JPEG or
  WebP). It runs inside worker processes, so the functions here are pure and tuned for speed:
  PNG encoding is the measured bottleneck of image ingestion, not storage.
* **Chunk compression** is a generic zarr codec applied to the byte arrays that hold tensor data.
  zstd suits sparse and label data; photos gain little from it, so images use sample compression
  with either no chunk codec or the cheap lz4.

Example:
    >>> import numpy as np
    >>> image = np.zeros((28, 28, 1), dtype=np.uint8)
    >>> blob = encode_image(image, "png")
    >>> decode_image(blob, shape=image.shape).shape
    (28, 28, 1)
"""

from __future__ import annotations

from io import BytesIO
from typing import TYPE_CHECKING, Final

import numpy as np
from PIL import Image

from lakecompute.errors import InvalidArgumentError, InvalidSampleError

# The names and their parsing sit below storage (see lakecompute.specs); re-exported here.
from lakecompute.specs import (
    CHUNK_COMPRESSIONS,
    SAMPLE_COMPRESSIONS,
    ChunkCompression,
    SampleCompression,
    parse_chunk_compression,
    parse_sample_compression,
)

if TYPE_CHECKING:
    from zarr.abc.codec import BytesBytesCodec

#: What Pillow raises for bytes it cannot read: OSError and ValueError for a broken file, SyntaxError from
#: some plugins, and DecompressionBombError (no OSError) for a header that declares more than twice
#: ``Image.MAX_IMAGE_PIXELS`` (a hostile or damaged size, refused before any pixel is allocated).
_UNREADABLE = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)

__all__ = [
    "CHUNK_COMPRESSIONS",
    "JPEG_QUALITY",
    "PNG_LEVEL",
    "SAMPLE_COMPRESSIONS",
    "ChunkCompression",
    "SampleCompression",
    "check_kept_bytes",
    "decode_image",
    "decoded_mode",
    "eight_bits",
    "encode_image",
    "encoded_format",
    "image_depth",
    "image_shape_from_bytes",
    "parse_chunk_compression",
    "parse_sample_compression",
    "zarr_compressors",
]


#: The zlib level images are stored at as PNG. Level 1 encodes ~35% faster than the default level 6 for a
#: few percent more bytes; encoding, not storage, limits image ingestion, so speed wins (measured per
#: level by ``python -m bench png-levels``; docs/performance.md has the table).
PNG_LEVEL: Final = 1
#: The JPEG quality images are encoded at (stored, or exported with image_format='jpeg').
JPEG_QUALITY: Final = 90
# Lossless so that a round trip is exact; quality (the effort, for lossless) 0 and method 0 are the
# fastest settings. exact=True keeps the RGB values under fully transparent pixels, which libwebp
# would otherwise rewrite to compress better, breaking exact RGBA round trips.
_WEBP_OPTIONS: Final[dict[str, object]] = {"lossless": True, "quality": 0, "method": 0, "exact": True}

# Channel count -> Pillow mode of a uint8 image we can encode. One channel is stored as greyscale.
_MODE_BY_CHANNELS: Final[dict[int, str]] = {1: "L", 3: "RGB", 4: "RGBA"}

# Modes Pillow decodes other images into, and the 8-bit mode lakecompute returns for each, so that a
# file read by lc.read() always comes back as uint8 HxW, HxWx3 or HxWx4. "P" and "PA" are resolved
# separately because the answer depends on whether the palette has transparency.
_DECODED_MODES: Final[dict[str, str]] = {
    "L": "L",
    "1": "L",
    "RGB": "RGB",
    "RGBA": "RGBA",
    "RGBX": "RGB",
    "RGBa": "RGBA",
    "LA": "RGBA",
    "PA": "RGBA",
    "CMYK": "RGB",
    "YCbCr": "RGB",
    "LAB": "RGB",
    "HSV": "RGB",
}


# --------------------------------------------------------------------------------------------------
# Sample compression


def encode_image(array: np.ndarray, compression: str, *, tensor: str = "images") -> bytes:
    """Encode one uint8 image as PNG, JPEG or WebP.

    PNG and WebP are lossless: `decode_image` gives back exactly ``array``. JPEG (quality 90)
    is lossy. An HxWx1 image is stored as greyscale; pass its shape to `decode_image` to get
    HxWx1 back.

    Args:
        array: a uint8 array of shape HxW (greyscale) or HxWxC with C 1 (greyscale), 3 (RGB) or
            4 (RGBA).
        compression: ``"png"``, ``"jpeg"`` or ``"webp"`` (any spelling
            `parse_sample_compression` accepts).
        tensor: the tensor the image is for, named in error messages.

    Returns:
        The encoded image.

    Raises:
        InvalidSampleError: if the array is not a uint8 image of a supported shape, or the format
            cannot hold it (RGBA as JPEG, sizes past the format's limit).
        InvalidArgumentError: if ``compression`` is not an image codec.

    Example:
        >>> blob = encode_image(np.zeros((4, 4, 3), dtype=np.uint8), "webp")
        >>> blob[:4]
        b'RIFF'
    """
    name = parse_sample_compression(compression)
    if name is None:
        raise InvalidArgumentError(
            "Expected an image compression for encode_image. Got None. "
            "Pass one of 'jpeg', 'png', 'webp', or store the array uncompressed."
        )
    mode = _check_image(array, tensor)
    if name == "jpeg" and mode == "RGBA":
        raise InvalidSampleError(
            tensor,
            f"JPEG cannot store an alpha channel; got an RGBA image of shape {array.shape}. "
            "Convert it to RGB (array[..., :3]) or use sample_compression='png' or 'webp'.",
        )
    # Pillow infers L / RGB / RGBA from a 2-D, HxWx3 or HxWx4 uint8 array; a trailing axis of 1 has to
    # go first. ascontiguousarray is free for the usual C-ordered array and saves Pillow a detour
    # through tobytes() for strided views.
    pixels = np.ascontiguousarray(array[:, :, 0] if mode == "L" and array.ndim == 3 else array)
    image = Image.fromarray(pixels)
    buffer = BytesIO()
    try:
        if name == "png":
            image.save(buffer, format="PNG", compress_level=PNG_LEVEL)
        elif name == "jpeg":
            image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
        else:
            # WebP has no greyscale: Pillow would convert anyway; doing it here keeps that explicit.
            # decode_image() turns it back into one channel, exactly, when given the stored shape.
            if mode == "L":
                image = image.convert("RGB")
            image.save(buffer, format="WEBP", **_WEBP_OPTIONS)
    except (OSError, ValueError) as exc:
        # Pillow raises these for sizes past a format's limit (16383 px for WebP, 65535 for JPEG).
        raise InvalidSampleError(
            tensor,
            f"{name.upper()} cannot encode an image of shape {array.shape} ({exc}). "
            "Use sample_compression='png' or split the image.",
        ) from exc
    return buffer.getvalue()


def decode_image(
    data: bytes | memoryview, shape: tuple[int, ...] | None = None, *, convert_depth: bool = False
) -> np.ndarray:
    """Decode an image into a writeable uint8 array.

    Args:
        data: the encoded image (PNG, JPEG, WebP, or any other format Pillow reads).
        shape: the shape the image had when it was encoded. Given, the result has exactly this
            shape: HxWx1 for an encoded HxWx1 array, and greyscale, RGB or RGBA as asked (WebP stores
            greyscale as RGB and may drop an opaque alpha channel; both are restored). Without it, the
            shape follows the file: HxW for greyscale, HxWx3 for RGB, HxWx4 with alpha.
        convert_depth: read an image of 16 bits per channel as 8 bits, keeping each value's high byte
            (``v >> 8``), instead of refusing it (see `image_depth`).

    Returns:
        The pixels, uint8, of shape ``shape`` if given.

    Raises:
        InvalidArgumentError: if the data is not a readable image, has more than 8 bits per channel
            (unless ``convert_depth``; the message names the depth), or its size does not match ``shape``.

    Example:
        >>> blob = encode_image(np.full((2, 3), 7, dtype=np.uint8), "png")
        >>> decode_image(blob).tolist()
        [[7, 7, 7], [7, 7, 7]]
    """
    image = _open(data)
    if shape is None:
        mode = decoded_mode(image, convert_depth=convert_depth)
    else:
        decoded_mode(image, convert_depth=convert_depth)  # the depth check: before the pixels are loaded
        mode = _mode_for_shape(shape)
        width, height = image.size
        if (height, width) != tuple(shape[:2]):
            raise InvalidArgumentError(
                f"Expected an image of shape {tuple(shape)}. Got {height}x{width} pixels. "
                "The stored shape and image bytes disagree; the dataset may be damaged."
            )
    try:
        image = eight_bits(image)
        if image.mode != mode:
            # Converting greyscale stored as RGB (WebP) back to "L" is exact: Pillow's weights sum to 1
            # in fixed point, so R=G=B=v gives v. An opaque RGB image gains alpha 255.
            image = image.convert(mode)
        # np.array copies Pillow's tobytes() once more to get a writeable array (numpy cannot make an
        # array over immutable bytes writeable); measured at under 5% of a 256x256 PNG decode.
        pixels = np.array(image)
    except _UNREADABLE as exc:
        raise InvalidArgumentError(
            f"Cannot decode the image data ({exc}). Expected PNG, JPEG or WebP bytes."
        ) from exc
    if shape is not None and len(shape) == 3 and shape[2] == 1:
        pixels = pixels[:, :, np.newaxis]
    return pixels


def image_shape_from_bytes(data: bytes | memoryview) -> tuple[int, ...]:
    """Return the shape `decode_image` gives for ``data``, reading only the header.

    Args:
        data: an encoded image.

    Returns:
        ``(H, W)`` for greyscale, ``(H, W, 3)`` for colour, ``(H, W, 4)`` with alpha.

    Raises:
        InvalidArgumentError: if the data is not a readable 8-bit image.

    Example:
        >>> image_shape_from_bytes(encode_image(np.zeros((5, 7, 3), dtype=np.uint8), "png"))
        (5, 7, 3)
    """
    # Image.open parses the header only; the pixels are decoded on first access, which never comes.
    image = _open(data)
    width, height = image.size
    mode = decoded_mode(image)
    return (height, width) if mode == "L" else (height, width, len(mode))


def check_kept_bytes(data: bytes | memoryview, tensor: str) -> None:
    """Refuse encoded image bytes about to be stored as they are whose depth is more than 8 bits per
    channel: decoded, they would read cut to 8 bits. A PNG says its bit depth in its first chunk (byte
    24), so the common case costs one byte read; JPEG and WebP files that decode are 8 bits per channel.

    Raises:
        InvalidSampleError: a PNG of 16 bits per channel (the message names the depth).
    """
    if bytes(data[:8]) != b"\x89PNG\r\n\x1a\n" or len(data) < 25 or data[24] <= 8:
        return
    try:
        decoded_mode(_open(data))
    except InvalidArgumentError as exc:
        raise InvalidSampleError(tensor, str(exc)) from exc


def _check_image(array: object, tensor: str) -> str:
    """Return the Pillow mode ``array`` encodes as, or raise InvalidSampleError."""
    expected = "Expected a uint8 array of shape HxW or HxWxC with C in (1, 3, 4)"
    if not isinstance(array, np.ndarray):
        raise InvalidSampleError(tensor, f"{expected}. Got {type(array).__name__}.")
    if array.dtype != np.uint8:
        raise InvalidSampleError(
            tensor,
            f"{expected}. Got dtype {array.dtype} with shape {array.shape}. "
            "Convert it first, e.g. (array * 255).clip(0, 255).astype(np.uint8) for floats in [0, 1].",
        )
    if array.ndim == 2:
        mode = "L"
    elif array.ndim == 3 and array.shape[2] in _MODE_BY_CHANNELS:
        mode = _MODE_BY_CHANNELS[array.shape[2]]
    else:
        raise InvalidSampleError(
            tensor,
            f"{expected}. Got shape {array.shape}. Store other arrays with sample_compression=None.",
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise InvalidSampleError(
            tensor, f"Expected an image of at least 1x1 pixels. Got shape {array.shape}."
        )
    return mode


def encoded_format(data: bytes | memoryview) -> str | None:
    """The sample compression (``"png"``, ``"jpeg"``, ``"webp"``) whose file ``data`` is, from its first
    bytes; None for anything else.

    Example:
        >>> encoded_format(encode_image(np.zeros((2, 2), np.uint8), "webp"))
        'webp'
    """
    head = bytes(data[:12])
    if head.startswith(b"\x89PNG"):
        return "png"
    if head.startswith(b"\xff\xd8"):
        return "jpeg"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    return None


def _open(data: bytes | memoryview) -> Image.Image:
    """Open ``data`` lazily with Pillow, wrapping its errors in InvalidArgumentError."""
    # Telling Pillow the format skips trying other plugins first: ~15% faster for small PNGs.
    known = encoded_format(data)
    formats = (known.upper(),) if known is not None else None
    buffer = BytesIO(data)
    try:
        return Image.open(buffer, formats=formats)
    except _UNREADABLE as exc:
        # Pillow names the buffer it could not identify by its repr, an address: not for a message.
        detail = str(exc).replace(f" {buffer!r}", "")
        raise InvalidArgumentError(
            f"Cannot read the image data ({detail}). Expected PNG, JPEG or WebP bytes."
        ) from exc


def decoded_mode(image: Image.Image, *, convert_depth: bool = False) -> str:
    """Return the 8-bit mode (L, RGB or RGBA) decode_image turns ``image`` into, refusing an image of more
    than 8 bits per channel (`image_depth`; call it before the pixels are loaded, while the header is at
    hand) unless ``convert_depth`` (16 bits: each value's high byte is kept).

    Raises:
        InvalidArgumentError: more than 8 bits per channel (the message names the depth), or a mode with
            no 8-bit form.
    """
    bits, what = image_depth(image)
    if bits > 8 and not (convert_depth and bits == 16):
        raise InvalidArgumentError(_depth_message(image, bits, what, convert_depth))
    if image.mode == "P":
        return "RGBA" if "transparency" in image.info else "RGB"
    mode = "L" if image.mode in _WIDE_GREY else _DECODED_MODES.get(image.mode)
    if mode is None:
        raise InvalidArgumentError(
            f"Expected an 8-bit image (greyscale, RGB or RGBA). Got Pillow mode {image.mode!r}. "
            "Convert it to 8 bits per channel before storing it."
        )
    return mode


def eight_bits(image: Image.Image) -> Image.Image:
    """``image`` with 16-bit greyscale values cut to their high byte (``v >> 8``, what ``convert_depth``
    asks for; Pillow's own conversion would clip them to 255), any other image as it is."""
    if image.mode not in _WIDE_GREY:
        return image
    return Image.fromarray((np.asarray(image, dtype=np.uint16) >> 8).astype(np.uint8))


#: Pillow's 16-bit greyscale modes (one per byte order), read as uint16 values.
_WIDE_GREY: Final = frozenset({"I;16", "I;16B", "I;16L", "I;16N"})
#: Bits per value of Pillow's modes wider than 8 bits: 16-bit greyscale, 32-bit integer and float.
_WIDE_MODES: Final[dict[str, int]] = {**dict.fromkeys(_WIDE_GREY, 16), "I": 32, "F": 32}
#: A stored layout (PNG raw mode, Pillow mode, TIFF photometric) -> what its channels are, for messages.
_LAYOUTS: Final[dict[str, tuple[str, int]]] = {
    "I": ("greyscale", 1), "L": ("greyscale", 1), "F": ("greyscale", 1), "LA": ("greyscale and alpha", 2),
    "RGB": ("RGB", 3), "RGBA": ("RGBA", 4),
}  # fmt: skip


def image_depth(image: Image.Image) -> tuple[int, str]:
    """The bits per channel ``image`` stores, and what it is (``"a PNG of 16 bits per channel (RGB, 48
    bits a pixel)"``), read from its header: call it before the pixels are loaded.

    Pillow's mode alone does not tell: it opens a 16-bit-per-channel colour PNG (48-bit RGB, 64-bit RGBA,
    32-bit grey and alpha) as 8-bit RGB or RGBA, keeping each value's high byte, so a 12-bit microscopy
    image saved that way would read almost black. The PNG's raw mode and a TIFF's BitsPerSample say the
    depth stored. Palette, 1-, 2- and 4-bit images are 8 bits or fewer: they read exactly.

    Example:
        >>> image_depth(Image.open(BytesIO(encode_image(np.zeros((2, 2, 3), np.uint8), "png"))))
        (8, 'a PNG of 8 bits per channel (RGB, 24 bits a pixel)')
    """
    bits = _WIDE_MODES.get(image.mode, 8)
    layout = image.mode
    tiles = getattr(image, "tile", None)  # an opened file's decoding plan: gone once loaded
    raw = tiles[0][3] if tiles else None
    if isinstance(raw, tuple) and raw:
        raw = raw[0]  # TIFF and raw decoders: (rawmode, ...)
    if image.format == "PNG" and isinstance(raw, str) and ";16" in raw:
        bits, layout = 16, raw.split(";")[0]  # RGB;16B, RGBA;16B, LA;16B, I;16B
    elif image.format == "TIFF":
        per_sample = getattr(image, "tag_v2", {}).get(258) or (bits,)
        bits = max(int(b) for b in (per_sample if isinstance(per_sample, tuple) else (per_sample,)))
    name, channels = _LAYOUTS.get(layout.split(";")[0], (layout, len(image.getbands())))
    fmt = image.format or "n image"
    return bits, f"a {fmt} of {bits} bits per channel ({name}, {bits * channels} bits a pixel)"


def _depth_message(image: Image.Image, bits: int, what: str, convert_depth: bool) -> str:
    """Why an image of ``bits`` per channel is refused, and the ways out."""
    if bits == 16:
        ways = (
            "Convert it to 8 bits yourself (scaled to the range your values use: a 12-bit image saved "
            "in 16 bits would read almost black), or ask for the conversion (convert_depth=True: "
            "lc.read(path, convert_depth=True), or the ingest's convert_depth=True), which keeps each "
            "value's high byte. To keep all 16 bits, read the file with a library that keeps them "
            "(OpenCV's IMREAD_UNCHANGED, imageio, tifffile) and store the uint16 array in a tensor "
            "without sample_compression."
        )
    else:
        ways = (
            "No 8-bit conversion is defined for it: convert it to 8 bits per channel yourself, or store "
            "the array in a tensor without sample_compression."
        )
    done = " even with convert_depth=True (which converts 16 bits only)" if convert_depth else ""
    return (
        f"Expected an image of at most 8 bits per channel (greyscale, RGB or RGBA). Got {what}, "
        f"which Pillow opens as mode {image.mode!r}: it is refused{done} rather than cut to 8 bits. {ways}"
    )


def _mode_for_shape(shape: tuple[int, ...]) -> str:
    """Return the Pillow mode an image stored with ``shape`` decodes to."""
    if len(shape) == 2:
        return "L"
    if len(shape) == 3 and shape[2] in _MODE_BY_CHANNELS:
        return _MODE_BY_CHANNELS[shape[2]]
    raise InvalidArgumentError(
        f"Expected an image shape HxW or HxWxC with C in (1, 3, 4). Got {tuple(shape)}."
    )


# --------------------------------------------------------------------------------------------------
# Chunk compression


def zarr_compressors(name: str | None) -> tuple[BytesBytesCodec, ...]:
    """Return the zarr v3 codecs for a chunk compression, to pass as ``compressors=``.

    Args:
        name: ``"zstd"``, ``"lz4"``, ``"gzip"`` or ``None`` (any spelling
            `parse_chunk_compression` accepts).

    Returns:
        The codecs, empty for ``None``.

    Raises:
        InvalidArgumentError: if ``name`` is not a known chunk compression.

    Example:
        >>> zarr_compressors("zstd")
        (ZstdCodec(level=1, checksum=False),)
    """
    # zarr is imported here, not at the top: workers that only encode images never pay for it.
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    compression = parse_chunk_compression(name)
    if compression is None:
        return ()
    if compression == "zstd":
        # Level 1: ratio ~8 on sparse and label data at high speed; higher levels gain little.
        return (ZstdCodec(level=1),)
    if compression == "lz4":
        # Blosc's default bitshuffle ran at 57 MB/s on uint8; without shuffling lz4 is cheap, which
        # is all photos (already PNG/JPEG) can use.
        return (BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle"),)
    return (GzipCodec(level=1),)
