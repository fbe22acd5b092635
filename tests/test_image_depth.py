"""Images keep their depth or are refused: a file of 16 bits per channel (a PNG of any mode) is never read
cut to 8 bits without being asked (`convert_depth`), at append, at ingest, or when its bytes would be kept."""

from __future__ import annotations

import json
import struct
import zlib
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.compression import decode_image, encode_image, image_depth, image_shape_from_bytes
from lakecompute.htypes import CODECS
from lakecompute.specs import parse_tensor_spec

# PNG colour type by channel count: grey, grey + alpha, RGB, RGBA.
_COLOUR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png16(values: np.ndarray) -> bytes:
    """A real 16-bit-per-channel PNG of ``values`` (HxW or HxWxC, C in 1..4; Pillow writes only 16-bit
    greyscale, so the file is put together from its chunks: big-endian samples, filter 0 per row)."""
    height, width = values.shape[:2]
    channels = 1 if values.ndim == 2 else values.shape[2]
    rows = values.astype(">u2").reshape(height, width * channels)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)
    header = struct.pack(">IIBBBBB", width, height, 16, _COLOUR_TYPES[channels], 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw))
        + _chunk(b"IEND", b"")
    )


def _pillow_png(values: np.ndarray, mode: str) -> bytes:
    out = BytesIO()
    Image.fromarray(values).convert(mode).save(out, format="PNG") if mode != "I;16" else Image.fromarray(
        values
    ).save(out, format="PNG")
    return out.getvalue()


def _twelve_bit(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A microscope's 12-bit values (0..4095) as a 16-bit file holds them."""
    return np.random.default_rng(seed).integers(0, 4096, shape).astype(np.uint16)


# Each 16-bit PNG: its bytes, the values it holds, what the refusal says, and the shape read converted.
CASES = {
    "I;16 (Pillow)": (lambda v: _pillow_png(v, "I;16"), (6, 5), "greyscale, 16 bits a pixel", (6, 5)),
    "grey 16": (png16, (6, 5), "greyscale, 16 bits a pixel", (6, 5)),
    "LA 32": (png16, (6, 5, 2), "greyscale and alpha, 32 bits a pixel", (6, 5, 4)),
    "RGB 48": (png16, (6, 5, 3), "RGB, 48 bits a pixel", (6, 5, 3)),
    "RGBA 64": (png16, (6, 5, 4), "RGBA, 64 bits a pixel", (6, 5, 4)),
}


def _case(name: str, seed: int = 0) -> tuple[bytes, np.ndarray, str, tuple[int, ...]]:
    make, shape, said, read_shape = CASES[name]
    values = _twelve_bit(shape, seed) * 16 + 7  # the whole 16-bit range, low bytes not zero
    return make(values), values, said, read_shape


def _expected(values: np.ndarray, read_shape: tuple[int, ...]) -> np.ndarray:
    high = (values >> 8).astype(np.uint8)
    if values.ndim == 3 and values.shape[2] == 2:  # grey + alpha reads as RGBA
        return np.dstack([high[..., 0]] * 3 + [high[..., 1]])
    return high.reshape(read_shape)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_16_bit_png_is_refused_naming_its_depth(name: str) -> None:
    """Pillow opens a 48-bit RGB or 64-bit RGBA PNG as 8-bit RGB(A), keeping each value's high byte (the
    check on Pillow's mode passed, and a 12-bit microscopy image read almost black): every 16-bit mode is
    refused, the message naming the depth, the layout and the way out."""
    data, _, said, _ = _case(name)
    assert image_depth(Image.open(BytesIO(data)))[0] == 16
    match = (
        rf"Got a PNG of 16 bits per channel \({said}\).*refused rather than cut to 8 bits.*convert_depth=True"
    )
    with pytest.raises(lc.InvalidArgumentError, match=match):
        decode_image(data)
    with pytest.raises(lc.InvalidArgumentError, match="16 bits per channel"):
        image_shape_from_bytes(data)


@pytest.mark.parametrize("name", sorted(CASES))
def test_convert_depth_keeps_each_values_high_byte(name: str) -> None:
    """Asked for, the conversion keeps each value's high byte (Pillow's own I;16 -> L clips to 255)."""
    data, values, _, read_shape = _case(name)
    got = decode_image(data, convert_depth=True)
    assert got.dtype == np.uint8
    assert got.shape == read_shape
    np.testing.assert_array_equal(got, _expected(values, read_shape))


def test_the_tree_before_read_a_12_bit_image_almost_black() -> None:
    """Why the refusal: read as Pillow reads it, a 12-bit RGB image in a 16-bit PNG is at most 15 of 255."""
    data = png16(_twelve_bit((8, 8, 3)))
    with Image.open(BytesIO(data)) as image:
        assert image.mode == "RGB"
        assert int(np.asarray(image).max()) <= 15


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (Image.fromarray(np.array([[0, 255, 0, 255]], np.uint8)).convert("1"), [[0, 255, 0, 255]]),
        (Image.fromarray(np.array([[0, 85, 170, 255]], np.uint8)), [[0, 85, 170, 255]]),
    ],
    ids=["1-bit", "8-bit grey"],
)
def test_1_bit_and_8_bit_grey_read_exactly(image: Image.Image, expected: list[list[int]]) -> None:
    """Fewer than 8 bits read exactly, as 8-bit values (1-bit: 0 and 255)."""
    out = BytesIO()
    image.save(out, format="PNG", bits=1 if image.mode == "1" else 8)
    data = out.getvalue()
    assert image_depth(Image.open(BytesIO(data)))[0] <= 8
    assert decode_image(data).tolist() == expected


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_palette_pngs_of_every_depth_read_their_colours(bits: int) -> None:
    """A palette PNG (1, 2, 4 or 8 bits an index) reads as the palette's RGB colours, exactly."""
    colours = np.random.default_rng(bits).integers(0, 256, (1 << bits, 3), dtype=np.uint8)
    indices = np.arange(4 * 4).reshape(4, 4) % (1 << bits)
    image = Image.fromarray(indices.astype(np.uint8), "P")
    image.putpalette(colours.reshape(-1).tolist())
    out = BytesIO()
    image.save(out, format="PNG", bits=bits)
    data = out.getvalue()
    assert data[24] == bits  # the IHDR's bit depth: the file is what the test says
    np.testing.assert_array_equal(decode_image(data), colours[indices])


# -- append --------------------------------------------------------------------------------------------


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("compression", ["png", "jpeg", None])
def test_append_refuses_a_16_bit_file_and_converts_when_asked(
    tmp_path: Path, compression: str | None
) -> None:
    """lc.read of a 48-bit PNG appended to a png tensor (whose bytes would have been kept as they are), a
    jpeg one or an uncompressed one: refused naming the file and the depth, nothing written; with
    ``convert_depth=True`` stored as the 8-bit high bytes (a kept PNG would still be 16-bit: it is not)."""
    data, values, _, _ = _case("RGB 48")
    path = _file(tmp_path, "scope.png", data)
    ds = lc.empty(tmp_path / "ds")
    ds.create_tensor("images", htype="image", sample_compression=compression)
    with pytest.raises(
        lc.InvalidSampleError, match=r"scope\.png.*16 bits per channel \(RGB, 48 bits a pixel\)"
    ):
        ds.images.append(lc.read(path))
    assert len(ds.images) == 0
    ds.images.append(lc.read(path, convert_depth=True))
    got = ds.images[0].numpy()
    want = (values >> 8).astype(np.uint8)
    if compression == "jpeg":  # the high bytes, encoded as the tensor encodes every array
        want = decode_image(encode_image(want, "jpeg"))
    np.testing.assert_array_equal(got, want)
    if compression == "png":
        assert ds.images[0].tobytes()[24] == 8  # stored as an 8-bit PNG


def test_bytes_kept_as_they_are_are_checked_for_depth(tmp_path: Path) -> None:
    """Whatever offers its bytes to be kept as they are (the blob protocol an ImageFile uses) is checked:
    a 16-bit PNG is refused by the image tensor itself."""

    class Blob:
        def _lakecompute_blob(self) -> tuple[str, bytes, tuple[int, ...]]:
            return "png", png16(np.full((3, 4, 3), 4095, np.uint16)), (3, 4, 3)

    ds = lc.empty(tmp_path / "ds")
    ds.create_tensor("images", htype="image", sample_compression="png")
    with pytest.raises(lc.InvalidSampleError, match=r"'images'.*16 bits per channel \(RGB, 48 bits"):
        ds.images.append(Blob())
    assert len(ds.images) == 0


def test_stored_16_bit_bytes_are_refused_when_read() -> None:
    """A 48-bit PNG stored byte for byte by the tree before reads as an error naming the depth (the reader
    reports it on the dataset), never as its high bytes."""
    spec = parse_tensor_spec("images", "image", None, "png", None)
    with pytest.raises(lc.InvalidArgumentError, match=r"16 bits per channel \(RGB, 48"):
        CODECS[spec.htype].decode(spec, png16(np.zeros((3, 4, 3), np.uint16)), (3, 4, 3))


# -- ingest --------------------------------------------------------------------------------------------


def _classes(tmp_path: Path) -> tuple[Path, np.ndarray]:
    root = tmp_path / "cells"
    data, values, _, _ = _case("RGB 48", seed=1)
    _file(root, "a/scope.png", data)
    Image.fromarray(np.full((6, 5, 3), 9, np.uint8)).save(root / "a" / "plain.png")
    return root, values


def test_ingest_classification_refuses_a_16_bit_file_and_converts_when_asked(tmp_path: Path) -> None:
    root, values = _classes(tmp_path)
    with pytest.raises(
        lc.InvalidSampleError, match=r"scope\.png.*16 bits per channel \(RGB, 48.*skip_errors"
    ):
        lc.ingest_classification(root, tmp_path / "ds", progressbar=False)
    assert not lc.exists(tmp_path / "ds")
    ds = lc.ingest_classification(root, tmp_path / "ds", progressbar=False, convert_depth=True)
    np.testing.assert_array_equal(ds.images[0].numpy(), np.full((6, 5, 3), 9))
    np.testing.assert_array_equal(ds.images[1].numpy(), values >> 8)
    assert ds.images[1].tobytes()[24] == 8


def test_ingest_of_16_bit_greyscale_converted_is_stored_greyscale(tmp_path: Path) -> None:
    """Converted 16-bit greyscale counts as greyscale: a folder of it is stored HxW."""
    data, values, _, _ = _case("grey 16")
    _file(tmp_path / "src", "a/x.png", data)
    ds = lc.ingest_classification(tmp_path / "src", tmp_path / "ds", progressbar=False, convert_depth=True)
    assert ds.images[0].numpy().shape == (6, 5)
    np.testing.assert_array_equal(ds.images[0].numpy(), values >> 8)


def _coco(tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    data, values, _, _ = _case("RGBA 64", seed=2)
    images = tmp_path / "coco"
    _file(images, "scope.png", data)
    doc: dict[str, Any] = {
        "images": [{"id": 1, "file_name": "scope.png", "height": 6, "width": 5}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 2, 2], "area": 4, "iscrowd": 0}
        ],
        "categories": [{"id": 1, "name": "cell"}],
    }
    annotations = tmp_path / "instances.json"
    annotations.write_text(json.dumps(doc))
    return images, annotations, values


def test_ingest_coco_refuses_a_16_bit_file_and_converts_when_asked(tmp_path: Path) -> None:
    images, annotations, values = _coco(tmp_path)
    with pytest.raises(lc.InvalidSampleError, match=r"scope\.png.*16 bits per channel \(RGBA, 64"):
        lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False, convert_depth=True)
    np.testing.assert_array_equal(ds.images[0].numpy(), (values[..., :3] >> 8))  # stored RGB, as ingests do


def test_ingest_yolo_refuses_a_16_bit_file_and_converts_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "yolo"
    data, values, _, _ = _case("LA 32", seed=3)
    _file(root, "images/train/scope.png", data)
    _file(root, "labels/train/scope.txt", b"0 0.5 0.5 0.2 0.2\n")
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/train\nnames:\n  0: cell\n")
    with pytest.raises(lc.InvalidSampleError, match=r"scope\.png.*16 bits per channel \(greyscale and alpha"):
        lc.ingest_yolo(root, tmp_path / "ds", progressbar=False)
    ds = lc.ingest_yolo(root, tmp_path / "ds", progressbar=False, convert_depth=True)
    grey = (values[..., 0] >> 8).astype(np.uint8)
    np.testing.assert_array_equal(ds.images[0].numpy(), np.dstack([grey] * 3))


def test_convert_depth_must_be_a_flag(tmp_path: Path) -> None:
    with pytest.raises(lc.InvalidTypeError, match="convert_depth"):
        lc.ingest_classification(tmp_path, tmp_path / "ds", convert_depth="yes")  # type: ignore[call-arg]
    with pytest.raises(lc.InvalidTypeError, match="convert_depth"):
        lc.read(__file__, convert_depth=1)  # type: ignore[arg-type]
