"""How the table ingests check images: by default each file's structure, without decoding its pixels
(``verify=False``, as Deep Lake 3's ``deeplake.read(verify=False)``); with ``verify=True`` every image
decoded once. The structure check is a parser of hostile bytes: it returns or raises a library error."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import lakecompute as lc
from lakecompute.compression import decode_image
from lakecompute.imagefiles import check_structure, jpeg_frame
from lakecompute.tables import ImageBytes

SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _encoded(arr: np.ndarray, fmt: str, **params: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **params)
    return buf.getvalue()


def _pixels(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


PNG = _encoded(_pixels((9, 7, 3)), "PNG")
JPEG = _encoded(_pixels((9, 7, 3)), "JPEG", quality=90)
WEBP = _encoded(_pixels((9, 7, 3)), "WEBP", lossless=True)
FILES = {"png": PNG, "jpeg": JPEG, "webp": WEBP}


def _png_with_bad_pixels(png: bytes) -> bytes:
    """``png`` with its compressed pixels (IDAT) replaced by bytes that do not inflate, every chunk's CRC
    right: whole in structure, not decodable."""
    out, at = bytearray(png[:8]), 8
    while at < len(png):
        n = int.from_bytes(png[at : at + 4], "big")
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + n]
        if kind == b"IDAT":
            body = zlib.compress(b"")[:2] + b"\xff" * (n - 2)  # a zlib header, then no valid deflate block
        out += n.to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")
        at += 12 + n
    return bytes(out)


def _table(*blobs: bytes) -> pa.Table:
    return pa.table({"img": pa.array([{"bytes": b, "path": None} for b in blobs])})


@pytest.mark.parametrize("crc", ["zlib-ng", "the standard library's"])
def test_a_png_chunk_is_checked_by_its_crc_with_either_crc32(
    crc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The structure check takes zlib-ng's CRC-32 when it is installed, else the standard library's: the
    same function. With either, a flipped bit in the pixels' chunk is refused naming the CRC, and the same
    bytes under their own CRC pass."""
    from zlib_ng import zlib_ng

    if crc != "zlib-ng":
        monkeypatch.setattr("lakecompute.imagefiles.crc32", zlib.crc32)
    from lakecompute.imagefiles import crc32

    # zlib-ng's is installed with the tables extra (and the dev one)
    assert crc32 is (zlib_ng.crc32 if crc == "zlib-ng" else zlib.crc32)
    at = PNG.index(b"IDAT")
    n = int.from_bytes(PNG[at - 4 : at], "big")
    flipped = bytearray(PNG)
    flipped[at + 4 + n // 2] ^= 0x10
    with pytest.raises(lc.InvalidArgumentError, match="the CRC of its b'IDAT' chunk"):
        check_structure(bytes(flipped))
    flipped[at + 4 + n : at + 8 + n] = zlib.crc32(bytes(flipped[at : at + 4 + n])).to_bytes(4, "big")
    assert check_structure(bytes(flipped)) == (9, 7, 3)  # whole in structure (its pixels may not decode)


@pytest.mark.parametrize("fmt", sorted(FILES))
def test_by_default_a_cut_or_damaged_file_is_refused(fmt: str, tmp_path: Path) -> None:
    """The default check refuses a file cut short (for a JPEG, its EOI gone; a PNG, its IEND; a WebP, what
    its RIFF size claims), naming the column and row, and leaves nothing at the destination."""
    good = FILES[fmt]
    for damaged in (good[: len(good) // 2], good[:-3]):
        with pytest.raises(lc.InvalidArgumentError, match=r"Column 'img', row 1: .*damaged or incomplete"):
            lc.from_arrow(_table(good, damaged), str(tmp_path / "ds"), progressbar=False)
        assert not lc.exists(str(tmp_path / "ds"))
    ds = lc.from_arrow(_table(good, good), str(tmp_path / "ds"), progressbar=False)
    assert ds.img[1].tobytes() == good  # stored as they are
    np.testing.assert_array_equal(ds.img[1].numpy(), decode_image(good))


def test_a_png_whose_pixels_do_not_decode_is_stored_by_default_and_refused_with_verify(
    tmp_path: Path,
) -> None:
    """Whole in structure, damaged inside its compressed pixels: the default check (no decode) stores it,
    and reading it raises DatasetCorruptError; verify=True decodes it and refuses its row."""
    bad = _png_with_bad_pixels(PNG)
    assert check_structure(bad) == (9, 7, 3)
    with pytest.raises(OSError):
        Image.open(io.BytesIO(bad)).load()
    ds = lc.from_arrow(_table(PNG, bad), str(tmp_path / "lenient"), progressbar=False)
    assert len(ds) == 2
    assert ds.img[0].tobytes() == PNG
    for read in (ds.img[1].numpy, ds.img[1].tobytes):  # a copy of its bytes is checked too
        with pytest.raises(lc.DatasetCorruptError, match=r"a stored sample does not decode"):
            read()
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'img', row 1: .*Cannot decode the image"):
        lc.from_arrow(_table(PNG, bad), str(tmp_path / "strict"), verify=True, progressbar=False)
    assert not lc.exists(str(tmp_path / "strict"))
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 1 of 2 rows"):
        kept = lc.from_arrow(_table(PNG, bad), str(tmp_path / "strict"), verify=True, skip_errors=True,
                             progressbar=False)  # fmt: skip
    assert [kept.img[i].tobytes() for i in range(len(kept))] == [PNG]


def test_from_parquet_checks_structure_by_default_and_decodes_with_verify(tmp_path: Path) -> None:
    """The same choice through a Parquet file (read in the process by default: no workers)."""
    path = tmp_path / "t.parquet"
    pq.write_table(_table(PNG, JPEG[:-2], _png_with_bad_pixels(PNG)), path)
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'img', row 1: .*EOI"):
        lc.from_parquet(path, str(tmp_path / "a"), progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 1 of 3 rows"):
        lenient = lc.from_parquet(path, str(tmp_path / "a"), skip_errors=True, progressbar=False)
    assert len(lenient) == 2
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 2 of 3 rows"):
        strict = lc.from_parquet(path, str(tmp_path / "b"), skip_errors=True, verify=True, num_workers=2,
                                 progressbar=False)  # fmt: skip
    assert [strict.img[i].tobytes() for i in range(len(strict))] == [PNG]


@pytest.mark.parametrize(
    ("arr", "fmt", "params"),
    [
        (_pixels((5, 4)), "PNG", {}),
        (_pixels((5, 4, 3)), "PNG", {}),
        (_pixels((5, 4, 4)), "PNG", {}),
        (_pixels((6, 3)), "JPEG", {}),
        (_pixels((6, 3, 3)), "JPEG", {}),
    ],
)
def test_the_shape_from_the_structure_is_the_decoded_shape(
    arr: np.ndarray, fmt: str, params: dict[str, object]
) -> None:
    data = _encoded(arr, fmt, **params)
    assert check_structure(data) == decode_image(data).shape


def test_a_palette_png_is_shaped_as_decoded_with_and_without_transparency() -> None:
    image = Image.fromarray(_pixels((5, 4, 3))).convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    for transparency in (None, 0):
        buf = io.BytesIO()
        image.save(buf, format="PNG", **({} if transparency is None else {"transparency": transparency}))
        assert check_structure(buf.getvalue()) == decode_image(buf.getvalue()).shape


def _damage(data: bytes, draw: st.DrawFn) -> bytes:
    """``data`` cut short, with bytes flipped or overwritten, or spliced with itself."""
    way = draw(st.sampled_from(["truncate", "flip", "overwrite", "splice", "append"]))
    if way == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    if way == "append":
        return data + draw(st.binary(min_size=1, max_size=64))
    out = bytearray(data)
    if way == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(out) - 1))
            out[i] ^= draw(st.integers(1, 255))
    elif way == "overwrite":
        i = draw(st.integers(0, len(out) - 1))
        chunk = draw(st.binary(min_size=1, max_size=16))
        out[i : i + len(chunk)] = chunk
    else:
        a, b = sorted(draw(st.lists(st.integers(0, len(out)), min_size=2, max_size=2)))
        out = out[:a] + out[b:] + out[a:b]
    return bytes(out)


@SETTINGS
@given(st.sampled_from(sorted(FILES)), st.data())
def test_near_valid_files_pass_or_raise_a_library_error(fmt: str, data: st.DataObject) -> None:
    """Every damaged variant of a valid file: the check returns (a shape, or None for a WebP) or raises
    InvalidArgumentError; an ImageBytes checked unverified raises InvalidSampleError. Never a raw error."""
    damaged = _damage(FILES[fmt], data.draw)
    try:
        shape = check_structure(damaged)
    except lc.InvalidArgumentError:
        shape = "refused"
    else:
        assert shape is None or (len(shape) in (2, 3) and all(d > 0 for d in shape))
    try:
        ImageBytes(damaged, verify=False).check()
    except lc.InvalidSampleError:
        pass  # refused by the structure, or by Pillow's header (a WebP's, a mode that is not 8-bit)
    else:
        assert shape != "refused"
    if fmt == "jpeg":  # the frame header comes from the same walk: read where the check passes, else refused
        try:
            frame = jpeg_frame(damaged)
        except lc.InvalidArgumentError:
            assert shape == "refused" or not damaged.startswith(b"\xff\xd8")
        else:
            assert frame.shape == shape
            assert all(0 <= h < 16 and 0 <= v < 16 for _, h, v in frame.components)


@SETTINGS
@given(st.binary(max_size=512))
def test_random_bytes_raise_a_library_error(blob: bytes) -> None:
    for data in (
        blob,
        b"\x89PNG\r\n\x1a\n" + blob,
        b"\xff\xd8" + blob,
        b"RIFF" + blob[:4] + b"WEBP" + blob[4:],
    ):
        try:
            check_structure(data)
        except lc.InvalidArgumentError:
            pass


@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.parametrize("fmt", ["png", "jpeg", "webp"])
def test_a_shape_the_table_gives_is_held_against_the_file(fmt: str, verify: bool) -> None:
    """A shape the table supplies (a WebP struct's ``shape`` field) that is not the file's size is
    refused by either check, a WebP's too (its structure check says no size: its header is read)."""
    lying = ImageBytes(FILES[fmt], None, (2, 2, 3), (None, None, 3), verify=verify)
    with pytest.raises(lc.InvalidSampleError, match=r"it is 9x7, not \(2, 2, 3\)"):
        lying.check()
    assert ImageBytes(FILES[fmt], None, (9, 7, 3), (None, None, 3), verify=verify).check().shape == (9, 7, 3)


def test_a_webp_struct_whose_shape_lies_is_refused_by_its_row(tmp_path: Path) -> None:
    """The WebP struct's ``shape`` field says 2x2 for an 8x8 image: refused at the ingest (by default,
    without decoding), naming the column and the row, rather than stored and read back as corrupt."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", htype="image", sample_compression="webp")
    ds.x.extend([np.full((8, 8, 3), 9, np.uint8), np.full((6, 4, 1), 9, np.uint8)])
    table = ds.to_arrow()
    column = table.column("x").combine_chunks()
    lie = pa.array([[2, 2, 3], [6, 4, 1]], pa.list_(pa.int64()))
    cells = pa.StructArray.from_arrays(
        [column.field("bytes"), column.field("path"), lie], fields=list(column.type)
    )
    lying = pa.Table.from_arrays([cells], schema=table.schema)
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'x', row 0: .*it is 8x8, not \(2, 2, 3\)"):
        lc.from_arrow(lying, str(tmp_path / "back"), progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="Skipped 1 of 2 rows"):
        back = lc.from_arrow(lying, str(tmp_path / "back"), skip_errors=True, progressbar=False)
    assert back.x[0].numpy().tolist() == np.full((6, 4, 1), 9, np.uint8).tolist()
