"""Tests for lakecompute.compression: image codecs and zarr chunk codecs."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from PIL import Image

from lakecompute.compression import (
    CHUNK_COMPRESSIONS,
    SAMPLE_COMPRESSIONS,
    decode_image,
    encode_image,
    image_shape_from_bytes,
    parse_chunk_compression,
    parse_sample_compression,
    zarr_compressors,
)
from lakecompute.errors import InvalidArgumentError, InvalidSampleError, InvalidTypeError

LOSSLESS = ["png", "webp"]
SHAPES = [(28, 28), (28, 28, 1), (32, 48, 3), (32, 48, 4), (1, 1), (1, 1, 3), (3, 517), (3, 517, 4)]


def random_image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Return random uint8 pixels of the given shape."""
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def gradient_image(shape: tuple[int, ...]) -> np.ndarray:
    """Return a smooth uint8 gradient, the kind of content JPEG is made for."""
    height, width = shape[:2]
    rows = np.linspace(0, 255, height)[:, None]
    cols = np.linspace(0, 255, width)[None, :]
    grey = (rows + cols) / 2
    if len(shape) == 2:
        return grey.astype(np.uint8)
    channels = [(grey + 20 * c) % 256 for c in range(shape[2])]
    return np.stack(channels, axis=-1).astype(np.uint8)


def saved_bytes(image: Image.Image, image_format: str = "PNG") -> bytes:
    """Return ``image`` saved in ``image_format``."""
    buffer = BytesIO()
    image.save(buffer, format=image_format)
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("compression", LOSSLESS)
def test_encode_image_lossless_round_trip_is_exact(compression: str, shape: tuple[int, ...]) -> None:
    """PNG and WebP give back exactly the encoded pixels, shape and dtype included."""
    array = random_image(shape)
    decoded = decode_image(encode_image(array, compression), shape=shape)
    assert decoded.dtype == np.uint8
    assert decoded.shape == shape
    np.testing.assert_array_equal(decoded, array)


@pytest.mark.parametrize("compression", LOSSLESS)
def test_encode_image_rgba_keeps_colour_under_transparent_pixels(compression: str) -> None:
    """RGB values under fully transparent pixels survive (WebP would drop them without exact=True)."""
    array = random_image((16, 16, 4))
    array[..., 3] = 0
    decoded = decode_image(encode_image(array, compression), shape=array.shape)
    np.testing.assert_array_equal(decoded, array)


@pytest.mark.parametrize("compression", LOSSLESS)
def test_encode_image_opaque_rgba_keeps_alpha_channel(compression: str) -> None:
    """An all-opaque RGBA image decodes to four channels even if the codec dropped its alpha."""
    array = random_image((16, 16, 4))
    array[..., 3] = 255
    decoded = decode_image(encode_image(array, compression), shape=array.shape)
    np.testing.assert_array_equal(decoded, array)


@pytest.mark.parametrize("shape", [(64, 80), (64, 80, 1), (64, 80, 3), (1, 1, 3), (3, 517)])
def test_encode_image_jpeg_round_trip_is_close(shape: tuple[int, ...]) -> None:
    """JPEG keeps the shape and stays within a small mean error on a smooth image."""
    array = gradient_image(shape)
    decoded = decode_image(encode_image(array, "jpeg"), shape=shape)
    assert decoded.dtype == np.uint8
    assert decoded.shape == shape
    assert np.abs(decoded.astype(np.int16) - array.astype(np.int16)).mean() < 8


@pytest.mark.parametrize(
    ("compression", "shape", "expected"),
    [
        ("png", (5, 7), (5, 7)),
        ("png", (5, 7, 1), (5, 7)),
        ("png", (5, 7, 3), (5, 7, 3)),
        ("png", (5, 7, 4), (5, 7, 4)),
        ("jpeg", (5, 7), (5, 7)),
        ("jpeg", (5, 7, 3), (5, 7, 3)),
        ("webp", (5, 7, 3), (5, 7, 3)),
    ],
)
def test_decode_image_without_shape_follows_the_file(
    compression: str, shape: tuple[int, ...], expected: tuple[int, ...]
) -> None:
    """Without a stored shape, greyscale decodes to HxW and colour to HxWx3 / HxWx4."""
    data = encode_image(random_image(shape), compression)
    assert decode_image(data).shape == expected
    assert image_shape_from_bytes(data) == expected


@pytest.mark.parametrize("compression", sorted(SAMPLE_COMPRESSIONS))
def test_decode_image_result_is_writeable_and_accepts_memoryview(compression: str) -> None:
    """The decoded array can be modified in place, and memoryview input works like bytes."""
    array = gradient_image((8, 8, 3))
    decoded = decode_image(memoryview(encode_image(array, compression)), shape=(8, 8, 3))
    assert decoded.flags.writeable
    decoded[0, 0, 0] = 1


def test_encode_image_accepts_non_contiguous_arrays() -> None:
    """A strided view encodes the same pixels as its contiguous copy."""
    array = random_image((20, 30, 3))[::2, ::3]
    decoded = decode_image(encode_image(array, "png"), shape=array.shape)
    np.testing.assert_array_equal(decoded, array)


@pytest.mark.parametrize("compression", ["PNG", "jpg", " WebP "])
def test_encode_image_accepts_compression_aliases(compression: str) -> None:
    """encode_image accepts every spelling parse_sample_compression does."""
    data = encode_image(gradient_image((4, 4)), compression)
    assert decode_image(data, shape=(4, 4)).shape == (4, 4)


@pytest.mark.parametrize(
    ("image", "image_format", "expected"),
    [
        (Image.new("1", (7, 5)), "PNG", (5, 7)),
        (Image.new("LA", (7, 5)), "PNG", (5, 7, 4)),
        (Image.new("P", (7, 5)), "PNG", (5, 7, 3)),
        (Image.new("RGBA", (7, 5)).quantize(), "PNG", (5, 7, 4)),
        (Image.new("CMYK", (7, 5)), "JPEG", (5, 7, 3)),
        (Image.new("RGB", (7, 5)), "BMP", (5, 7, 3)),
    ],
)
def test_decode_image_converts_other_8_bit_modes(
    image: Image.Image, image_format: str, expected: tuple[int, ...]
) -> None:
    """Files in other 8-bit modes and formats decode to uint8 L, RGB or RGBA, as the header predicts."""
    data = saved_bytes(image, image_format)
    assert image_shape_from_bytes(data) == expected
    decoded = decode_image(data)
    assert decoded.dtype == np.uint8
    assert decoded.shape == expected


def test_decode_image_palette_with_transparency_gives_rgba() -> None:
    """A palette PNG with a transparent entry decodes to RGBA with alpha 0 at that entry."""
    image = Image.new("P", (4, 3), color=1)
    image.putpalette([0, 0, 0, 255, 0, 0])
    image.putpixel((0, 0), 0)
    buffer = BytesIO()
    image.save(buffer, format="PNG", transparency=0)
    data = buffer.getvalue()
    assert image_shape_from_bytes(data) == (3, 4, 4)
    decoded = decode_image(data)
    assert decoded.shape == (3, 4, 4)
    np.testing.assert_array_equal(decoded[0, 0], [0, 0, 0, 0])
    np.testing.assert_array_equal(decoded[0, 1], [255, 0, 0, 255])


# --------------------------------------------------------------------------------------------------
# Error paths


@pytest.mark.parametrize(
    ("array", "match"),
    [
        (np.zeros((8, 8), dtype=np.float32), r"uint8 .* Got dtype float32 with shape \(8, 8\)"),
        (np.zeros((8, 8, 3), dtype=np.uint16), r"Got dtype uint16 with shape \(8, 8, 3\)"),
        (np.zeros((8, 8), dtype=bool), r"Got dtype bool"),
        (np.zeros((2, 8, 8, 3), dtype=np.uint8), r"C in \(1, 3, 4\)\. Got shape \(2, 8, 8, 3\)"),
        (np.zeros((8,), dtype=np.uint8), r"Got shape \(8,\)"),
        (np.zeros((8, 8, 2), dtype=np.uint8), r"Got shape \(8, 8, 2\)"),
        (np.zeros((0, 8), dtype=np.uint8), r"at least 1x1 pixels\. Got shape \(0, 8\)"),
        ([[0, 1], [2, 3]], r"Got list\."),
    ],
)
@pytest.mark.parametrize("compression", sorted(SAMPLE_COMPRESSIONS))
def test_encode_image_rejects_bad_arrays(compression: str, array: np.ndarray, match: str) -> None:
    """Arrays that are not uint8 HxW / HxWxC images raise InvalidSampleError naming the tensor."""
    with pytest.raises(InvalidSampleError, match=match) as info:
        encode_image(array, compression, tensor="photos")
    assert info.value.tensor == "photos"
    assert str(info.value).startswith("Cannot store sample in tensor 'photos': Expected a")


def test_encode_image_rejects_rgba_as_jpeg() -> None:
    """JPEG refuses an alpha channel and says to convert to RGB or use png/webp."""
    with pytest.raises(
        InvalidSampleError, match=r"JPEG cannot store an alpha channel.*Convert it to RGB.*'png' or 'webp'"
    ) as info:
        encode_image(random_image((4, 4, 4)), "jpeg", tensor="photos")
    assert info.value.tensor == "photos"


def test_encode_image_wraps_format_size_limits() -> None:
    """An image past WebP's 16383-pixel limit raises InvalidSampleError, not a Pillow error."""
    with pytest.raises(InvalidSampleError, match=r"WEBP cannot encode an image of shape \(1, 16384\)"):
        encode_image(np.zeros((1, 16384), dtype=np.uint8), "webp")


@pytest.mark.parametrize(
    ("compression", "error", "match"),
    [
        ("gif", InvalidArgumentError, r"Unknown sample compression 'gif'\. Expected one of None"),
        (None, InvalidArgumentError, r"Expected an image compression for encode_image\. Got None"),
    ],
)
def test_encode_image_rejects_unknown_compression(
    compression: str, error: type[Exception], match: str
) -> None:
    """encode_image refuses names that are not image codecs."""
    with pytest.raises(error, match=match):
        encode_image(random_image((4, 4)), compression)


def test_decode_image_rejects_garbage() -> None:
    """Bytes that are no image raise InvalidArgumentError."""
    with pytest.raises(
        InvalidArgumentError, match=r"Cannot read the image data .*Expected PNG, JPEG or WebP"
    ):
        decode_image(b"not an image at all")


def test_a_header_that_declares_a_decompression_bomb_is_refused_as_unreadable() -> None:
    """A header past twice Pillow's pixel limit makes Pillow raise DecompressionBombError, no OSError:
    every reader of image bytes refuses it as it refuses any unreadable image."""
    blob = BytesIO()
    Image.new("RGB", (4, 4)).save(blob, format="PNG")
    data = bytearray(blob.getvalue())
    data[16:24] = (20_000).to_bytes(4, "big") * 2  # IHDR's width and height; its CRC set again below
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    for read in (image_shape_from_bytes, decode_image):
        with pytest.raises(InvalidArgumentError, match=r"Cannot read the image data .*decompression bomb"):
            read(bytes(data))


def test_decode_image_rejects_truncated_png() -> None:
    """A PNG cut short raises InvalidArgumentError when its pixels are decoded."""
    data = encode_image(random_image((64, 64, 3)), "png")
    with pytest.raises(InvalidArgumentError, match=r"Cannot decode the image data"):
        decode_image(data[: len(data) // 2])


def test_decode_image_rejects_mismatched_shape() -> None:
    """A stored shape whose size differs from the image raises InvalidArgumentError."""
    data = encode_image(random_image((4, 6)), "png")
    with pytest.raises(InvalidArgumentError, match=r"Expected an image of shape \(6, 4\)\. Got 4x6 pixels"):
        decode_image(data, shape=(6, 4))


def test_decode_image_rejects_unsupported_shape() -> None:
    """A stored shape that is not an image shape raises InvalidArgumentError."""
    data = encode_image(random_image((4, 6)), "png")
    with pytest.raises(InvalidArgumentError, match=r"C in \(1, 3, 4\)\. Got \(4, 6, 2\)"):
        decode_image(data, shape=(4, 6, 2))


def test_decode_image_rejects_16_bit_images() -> None:
    """16-bit images are refused rather than silently clipped to 8 bits."""
    data = saved_bytes(Image.fromarray(np.full((4, 4), 1000, dtype=np.uint16)))
    with pytest.raises(
        InvalidArgumentError, match=r"at most 8 bits per channel.*16 bits per channel.*opens as mode 'I;16'"
    ):
        decode_image(data)
    with pytest.raises(InvalidArgumentError, match=r"16 bits per channel"):
        image_shape_from_bytes(data)


# --------------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("png", "png"),
        ("PNG", "png"),
        ("jpeg", "jpeg"),
        ("jpg", "jpeg"),
        ("JPG", "jpeg"),
        ("webp", "webp"),
        (" WebP ", "webp"),
    ],
)
def test_parse_sample_compression_normalises(value: str | None, expected: str | None) -> None:
    """Case, surrounding space and the 'jpg' alias are normalised; None stays None."""
    assert parse_sample_compression(value) == expected


@pytest.mark.parametrize("value", ["x", "gif", "", "zstd"])
def test_parse_sample_compression_rejects_unknown(value: str) -> None:
    """Unknown names raise InvalidArgumentError listing the options."""
    expected = f"Unknown sample compression {value!r}. Expected one of None, 'jpeg', 'png', 'webp'."
    with pytest.raises(InvalidArgumentError) as info:
        parse_sample_compression(value)
    assert str(info.value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("zstd", "zstd"), ("ZSTD", "zstd"), ("lz4", "lz4"), ("LZ4", "lz4"), ("gzip", "gzip")],
)
def test_parse_chunk_compression_normalises(value: str | None, expected: str | None) -> None:
    """Case is normalised and None stays None."""
    assert parse_chunk_compression(value) == expected


@pytest.mark.parametrize("value", ["x", "blosc", "png", ""])
def test_parse_chunk_compression_rejects_unknown(value: str) -> None:
    """Unknown names raise InvalidArgumentError listing the options."""
    expected = f"Unknown chunk compression {value!r}. Expected one of None, 'gzip', 'lz4', 'zstd'."
    with pytest.raises(InvalidArgumentError) as info:
        parse_chunk_compression(value)
    assert str(info.value) == expected


@pytest.mark.parametrize("parse", [parse_sample_compression, parse_chunk_compression])
def test_parse_compression_rejects_non_strings(parse: Callable[[Any], str | None]) -> None:
    """A value that is neither str nor None raises InvalidTypeError."""
    with pytest.raises(InvalidTypeError, match=r"as a str or None\. Got int 5\."):
        parse(5)


def test_parsed_names_are_the_documented_sets() -> None:
    """The exported sets hold exactly the canonical names the parsers return."""
    assert {"png", "jpeg", "webp"} == SAMPLE_COMPRESSIONS
    assert {"zstd", "lz4", "gzip", None} == CHUNK_COMPRESSIONS
    assert {parse_sample_compression(name) for name in SAMPLE_COMPRESSIONS} == SAMPLE_COMPRESSIONS
    assert {parse_chunk_compression(name) for name in CHUNK_COMPRESSIONS} == CHUNK_COMPRESSIONS


# --------------------------------------------------------------------------------------------------
# Chunk compression


def test_zarr_compressors_none_is_empty() -> None:
    """No chunk compression means no compressor codecs."""
    assert zarr_compressors(None) == ()


def test_zarr_compressors_picks_the_documented_codecs() -> None:
    """zstd level 1, blosc-lz4 without shuffle and gzip level 1 are used."""
    (zstd,) = zarr_compressors("zstd")
    assert isinstance(zstd, zarr.codecs.ZstdCodec)
    assert zstd.level == 1
    (lz4,) = zarr_compressors("LZ4")
    assert isinstance(lz4, zarr.codecs.BloscCodec)
    assert (lz4.cname.value, lz4.clevel, lz4.shuffle) == ("lz4", 5, zarr.codecs.BloscShuffle.noshuffle)
    (gzip,) = zarr_compressors("gzip")
    assert isinstance(gzip, zarr.codecs.GzipCodec)
    assert gzip.level == 1


def test_zarr_compressors_rejects_unknown() -> None:
    """An unknown chunk compression raises InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match=r"Unknown chunk compression 'snappy'"):
        zarr_compressors("snappy")


@pytest.mark.parametrize("data_kind", ["random", "zeros"])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("name", sorted(CHUNK_COMPRESSIONS, key=str))
def test_zarr_compressors_round_trip_through_local_store(
    tmp_path: Path, name: str | None, dtype: str, data_kind: str
) -> None:
    """Each chunk codec writes and reads back a zarr array on a LocalStore exactly."""
    shape = (1000, 37)
    if data_kind == "random":
        data = np.random.default_rng(1).integers(0, 256, size=shape).astype(dtype)
    else:
        data = np.zeros(shape, dtype=dtype)
    store = zarr.storage.LocalStore(tmp_path / "array.zarr")
    array = zarr.create_array(
        store, shape=shape, chunks=(256, 37), dtype=dtype, compressors=zarr_compressors(name)
    )
    array[:] = data
    reopened = zarr.open_array(zarr.storage.LocalStore(tmp_path / "array.zarr"), mode="r")
    np.testing.assert_array_equal(reopened[:], data)
    assert len(reopened.compressors) == (0 if name is None else 1)
