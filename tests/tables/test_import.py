"""Tables into datasets: ``lc.from_arrow``, ``from_pandas``, ``from_parquet`` and ``from_csv``, with the
tables users have (our own exports, Hugging Face's Parquet, a CSV of image paths) and the hostile ones."""

from __future__ import annotations

import io
import json
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import lakecompute as lc
from tests.dataset.conftest import snapshot
from tests.tables.conftest import NAMES, image


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _same(a: lc.Dataset, b: lc.Dataset) -> None:
    """The same tensors (htype, dtype, compressions, info) and the same samples; encoded images as the
    same bytes."""
    assert list(a.tensors) == list(b.tensors)
    for name, t in a.tensors.items():
        u = b[name]
        assert (u.htype, u.dtype, u.sample_compression, u.chunk_compression) == (
            t.htype, t.dtype, t.sample_compression, t.chunk_compression,
        )  # fmt: skip
        assert dict(u.info) == dict(t.info)
        if t.sample_compression is not None:
            assert [u[i].tobytes() for i in range(len(u))] == [t[i].tobytes() for i in range(len(t))]
    assert snapshot(a) == snapshot(b)


def test_our_parquet_file_comes_back_exactly_on_two_workers(
    photos: lc.Dataset, photos_parquet: Path, tmp_path: Path
) -> None:
    back = lc.from_parquet(photos_parquet, str(tmp_path / "back"), num_workers=2, progressbar=False)
    _same(photos, back)
    assert back.boxes.info.format == "xywh"
    assert back.labels.info.class_names == NAMES


def test_arrow_and_pandas_round_trips_are_exact(photos: lc.Dataset, tmp_path: Path) -> None:
    _same(photos, lc.from_arrow(photos.to_arrow(), str(tmp_path / "a"), progressbar=False))
    _same(photos, lc.from_pandas(photos.to_pandas(), str(tmp_path / "p"), progressbar=False))
    view = photos[[3, 0]]
    back = lc.from_arrow(view.to_arrow(), str(tmp_path / "v"), progressbar=False)
    assert back.caption.data() == ["photo 3 é", "photo 0 é"]


def test_hugging_face_parquet_is_read_by_its_features(tmp_path: Path) -> None:
    """A file Hugging Face wrote: Image() becomes an image tensor of the same PNG bytes, ClassLabel a
    class_label tensor with its names, a Sequence of floats a generic tensor."""
    datasets = pytest.importorskip("datasets")
    blobs = [_png(image(i)) for i in range(5)]
    features = datasets.Features(
        {
            "img": datasets.Image(),
            "label": datasets.ClassLabel(names=NAMES),
            "score": datasets.Sequence(datasets.Value("float32")),
        }
    )
    rows = {
        "img": [{"bytes": b, "path": None} for b in blobs],
        "label": [0, 2, 1, 1, 0],
        "score": [[0.5]] * 5,
    }
    hf = datasets.Dataset.from_dict(rows, features=features)
    path = tmp_path / "hf.parquet"
    hf.to_parquet(str(path))
    ds = lc.from_parquet(path, str(tmp_path / "ds"), progressbar=False)
    assert (ds.img.htype, ds.img.sample_compression) == ("image", "png")
    assert [ds.img[i].tobytes() for i in range(5)] == blobs
    assert ds.label.htype == "class_label"
    assert ds.label.info.class_names == NAMES
    assert ds.label.numpy().tolist() == [0, 2, 1, 1, 0]
    assert ds.score.dtype == np.float32
    assert ds.score[0].numpy().tolist() == [0.5]


def _image_folder(root: Path, n: int = 6) -> list[bytes]:
    (root / "imgs" / "sub").mkdir(parents=True)
    blobs = []
    for i in range(n):
        data = _png(image(i))
        (root / "imgs" / "sub" / f"{i}.png").write_bytes(data)
        blobs.append(data)
    return blobs


def test_a_csv_of_image_paths_and_labels(tmp_path: Path) -> None:
    """The documented ingest: paths relative to the CSV's folder become an image tensor of the files'
    own bytes, label names a class_label tensor (the sorted distinct names), numbers a generic one."""
    blobs = _image_folder(tmp_path)
    labels = ["dog", "cat", "dog", "bird", "cat", "dog"]
    lines = ["file,label,weight"] + [f"imgs/sub/{i}.png,{lab},{i / 2}" for i, lab in enumerate(labels)]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    ds = lc.from_csv(
        tmp_path / "train.csv",
        str(tmp_path / "ds"),
        htypes={"file": "image", "label": "class_label"},
        num_workers=2,
        progressbar=False,
    )
    assert (ds.file.htype, ds.file.sample_compression) == ("image", "png")
    assert [ds.file[i].tobytes() for i in range(6)] == blobs
    assert ds.label.info.class_names == ["bird", "cat", "dog"]
    assert [ds.label.info.class_names[i] for i in ds.label.numpy()] == labels
    assert ds.weight.numpy().tolist() == [i / 2 for i in range(6)]


@pytest.mark.parametrize("bad", ["../outside.png", "ABSOLUTE", "link.png"])
def test_image_paths_stay_in_the_folder(tmp_path: Path, bad: str) -> None:
    """``..``, an absolute path and a symbolic link out of the folder are refused, naming the column, the
    row and the rule; nothing is left at the destination; skip_errors skips that row and lists it."""
    _image_folder(tmp_path)
    (tmp_path / "outside.png").write_bytes(_png(image(9)))
    os.symlink(tmp_path / "outside.png", tmp_path / "imgs" / "link.png")
    bad = str(tmp_path / "outside.png") if bad == "ABSOLUTE" else bad
    table = pa.table({"file": ["sub/0.png", bad, "sub/2.png"]})
    dest = str(tmp_path / "ds")
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Column 'file', row 1: .*(outside the folder|absolute)"
    ):
        lc.from_arrow(
            table, dest, htypes={"file": "image"}, images_folder=tmp_path / "imgs", progressbar=False
        )
    assert not lc.exists(dest)
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 1 of 3 rows .*\n  row 1: Column 'file'"):
        ds = lc.from_arrow(
            table, dest, htypes={"file": "image"}, images_folder=tmp_path / "imgs", skip_errors=True,
            progressbar=False,
        )  # fmt: skip
    assert len(ds) == 2


def _from_paths(tmp_path: Path, paths: Any, skip: bool = False) -> lc.Dataset:
    table = pa.table({"file": pa.array(paths, pa.string())})
    return lc.from_arrow(
        table, str(tmp_path / "ds"), htypes={"file": "image"}, images_folder=tmp_path / "imgs",
        skip_errors=skip, overwrite=True, progressbar=False,
    )  # fmt: skip


def test_an_image_path_without_an_ending_is_read_by_its_bytes(tmp_path: Path) -> None:
    """A path need not end in an image ending: a PNG named ``img_0001`` is stored as its bytes."""
    blobs = _image_folder(tmp_path)
    (tmp_path / "imgs" / "img_0001").write_bytes(blobs[3])
    ds = _from_paths(tmp_path, ["img_0001", "sub/1.png"])
    assert ds.file.sample_compression == "png"
    assert [ds.file[i].tobytes() for i in range(2)] == [blobs[3], blobs[1]]


_NOT_AN_IMAGE = [
    ("b.gif", r"the image file .*b.gif. is a GIF file; image paths name files of the formats"),
    ("sub", r"cannot read the image file .*sub"),
]


@pytest.mark.parametrize(("bad", "why"), _NOT_AN_IMAGE)
def test_a_path_to_a_gif_or_a_folder_is_refused_by_its_row_or_skipped(
    tmp_path: Path, bad: str, why: str
) -> None:
    """A GIF (which the folder ingests do not read either) and a folder are refused naming the column,
    the row and the rule, or skipped and listed with skip_errors."""
    blobs = _image_folder(tmp_path)
    Image.fromarray(image(2)).save(tmp_path / "imgs" / "b.gif")
    with pytest.raises(lc.InvalidArgumentError, match=rf"Column 'file', row 1: {why}"):
        _from_paths(tmp_path, ["sub/0.png", bad])
    with pytest.warns(lc.LakeComputeWarning, match=rf"Skipped 1 of 2 rows .*\n  row 1: Column 'file': {why}"):
        ds = _from_paths(tmp_path, ["sub/0.png", bad], skip=True)
    assert [ds.file[i].tobytes() for i in range(len(ds))] == [blobs[0]]


def test_a_path_column_of_no_readable_path_or_no_rows(tmp_path: Path) -> None:
    """No path inside the folder: each row refused by its rule, or all skipped (an empty dataset); no
    rows at all: an empty image tensor."""
    _image_folder(tmp_path)
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'file', row 0: .*absolute path"):
        _from_paths(tmp_path, ["/etc/passwd", "../x.png"])
    with pytest.warns(
        lc.LakeComputeWarning, match=r"(?s)Skipped 2 of 2 rows .*\n  row 1: Column 'file': .*outside"
    ):
        ds = _from_paths(tmp_path, ["/etc/passwd", "../x.png"], skip=True)
    assert (len(ds), ds.file.htype) == (0, "image")
    ds = _from_paths(tmp_path, [])
    assert (len(ds), ds.file.htype, ds.file.sample_compression) == (0, "image", "png")


def test_rows_that_break_a_rule_are_named_or_skipped(tmp_path: Path) -> None:
    """A null, an image that does not decode, a label out of range: each fails naming column, row and
    rule; with skip_errors the good rows are kept and the bad ones listed."""
    good = _png(image(1))
    table = pa.table(
        {
            "img": pa.array([{"bytes": good, "path": None}, {"bytes": b"\x89PNG broken", "path": None}] * 2),
            "n": pa.array([1, 2, None, 4]),
        }
    )
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'img', row 1: .*image"):
        lc.from_arrow(table, str(tmp_path / "a"), progressbar=False)
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'n', row 2: the value is null"):
        lc.from_arrow(table, str(tmp_path / "a"), columns=["n"], progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 3 of 4 rows") as caught:
        ds = lc.from_arrow(table, str(tmp_path / "a"), skip_errors=True, progressbar=False)
    assert [w for w in caught if "row 2: Column 'n'" in str(w.message)]
    assert ds.n.numpy().tolist() == [1]
    assert ds.img[0].tobytes() == good
    labels = pa.table({"y": pa.array([0, 7], pa.int64())})
    named = {"y": {"htype": "class_label", "class_names": NAMES}}
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'y', row 1: class index 7 is out of range"):
        lc.from_arrow(labels, str(tmp_path / "b"), htypes=named, progressbar=False)
    assert not lc.exists(str(tmp_path / "b"))


def _png_declaring(width: int, height: int) -> bytes:
    """A PNG whose chunks are whole (their CRCs right) and whose header declares ``width`` x ``height``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    pixels = chunk(b"IDAT", zlib.compress(b"\0" * 16))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + pixels + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("first", "why"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"garbage" * 5, "(damaged or incomplete|Cannot decode)"),
        (_png_declaring(20_000, 20_000), "(20000x20000|400000000) pixels.*decompression bomb"),
    ],
    ids=["damaged", "bomb"],
)
@pytest.mark.parametrize("verify", [False, True])
def test_a_bad_first_image_is_named_by_its_row_or_skipped(
    tmp_path: Path, first: bytes, why: str, verify: bool
) -> None:
    """The first image is also the one the ingest reads to plan its tensor: a bad one (a damaged file, a
    header that declares a decompression bomb) is reported by its row like any other, never as a bare
    error before the rows, and skip_errors skips it."""
    good = _png(image(1))
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"img": pa.array([{"bytes": first, "path": None}, {"bytes": good, "path": None}])}), path
    )
    with pytest.raises(lc.InvalidArgumentError, match=rf"Column 'img', row 0: .*{why}"):
        lc.from_parquet(path, str(tmp_path / "a"), verify=verify, progressbar=False)
    assert not lc.exists(str(tmp_path / "a"))
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 1 of 2 rows"):
        ds = lc.from_parquet(path, str(tmp_path / "b"), verify=verify, skip_errors=True, progressbar=False)
    assert [ds.img[i].tobytes() for i in range(len(ds))] == [good]


def test_metadata_that_lies_is_refused(photos: lc.Dataset, tmp_path: Path) -> None:
    """Hugging Face features that say Image over an int column, and a lakecompute layout over another type,
    are refused naming the column, before anything is written."""
    hf = {"info": {"features": {"x": {"_type": "Image"}}}}
    table = pa.table({"x": [1, 2]}).replace_schema_metadata({"huggingface": json.dumps(hf)})
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'x': .*Image, but the column holds int64"):
        lc.from_arrow(table, str(tmp_path / "a"), progressbar=False)
    layout = photos.to_arrow().schema.field("images").metadata
    lying = pa.table({"images": pa.array(["not", "images"])})
    lying = lying.cast(pa.schema([pa.field("images", pa.string(), metadata=layout)]))
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'images': .*image tensor .* holds string"):
        lc.from_arrow(lying, str(tmp_path / "b"), progressbar=False)
    garbage = pa.schema([pa.field("images", pa.string(), metadata={"lakecompute": "{not json"})])
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Column 'images': its lakecompute metadata is not valid"
    ):
        lc.from_arrow(lying.cast(garbage), str(tmp_path / "c"), progressbar=False)
    assert not any(lc.exists(str(tmp_path / d)) for d in "abc")


def test_a_csv_with_a_ragged_row(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("a,b\n1,2\n3,4,5\n6,7\n")
    with pytest.raises(lc.InvalidArgumentError, match=r"line 3: 3 fields, the header has 2"):
        lc.from_csv(path, str(tmp_path / "ds"), progressbar=False)
    assert not lc.exists(str(tmp_path / "ds"))
    with pytest.warns(lc.LakeComputeWarning, match=r"(?s)Skipped 1 rows .*line 3"):
        ds = lc.from_csv(path, str(tmp_path / "ds"), skip_errors=True, progressbar=False)
    assert ds.a.numpy().tolist() == [1, 6]


def test_a_csv_is_read_in_its_encoding(tmp_path: Path) -> None:
    """UTF-8 by default (a byte-order mark skipped), another codec by name; text that is not in the
    encoding is refused naming its column, not stored as bytes or refused as 'not JSON'."""
    latin = tmp_path / "latin.csv"
    latin.write_bytes("name,n\ncafé,1\nnaïve,2\n".encode("latin-1"))
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'name' of the CSV file .* not utf-8 text"):
        lc.from_csv(latin, str(tmp_path / "a"), progressbar=False)
    assert not lc.exists(str(tmp_path / "a"))
    ds = lc.from_csv(latin, str(tmp_path / "b"), encoding="latin-1", progressbar=False)
    assert (list(ds.name.text()), ds.n.numpy().tolist()) == (["café", "naïve"], [1, 2])
    bom = tmp_path / "bom.csv"
    bom.write_text("name,n\ncafé,1\n", encoding="utf-8-sig")
    assert list(lc.from_csv(bom, str(tmp_path / "c"), progressbar=False).tensors) == ["name", "n"]
    with pytest.raises(lc.InvalidArgumentError, match=r"encoding must name a text encoding.*'klingon'"):
        lc.from_csv(bom, str(tmp_path / "d"), encoding="klingon", progressbar=False)


def test_pandas_columns_become_what_pandas_users_expect(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "kind": pd.Categorical(["dog", "cat", "dog"], categories=["cat", "dog"]),
            "x": np.array([1.5, np.nan, 2.0], np.float32),
            "note": ["a", "b", "c"],
            "vec": [np.zeros(2), np.ones(2), np.arange(2.0)],
            "extra": [{"k": 1}, {"k": 2}, {"k": [3]}],
        },
        index=[10, 20, 30],
    )
    ds = lc.from_pandas(frame, str(tmp_path / "ds"), progressbar=False)
    assert ds.kind.htype == "class_label"
    assert ds.kind.info.class_names == ["cat", "dog"]
    assert ds.kind.numpy().tolist() == [1, 0, 1]
    assert ds.x.dtype == np.float32
    assert np.isnan(ds.x[1].numpy())
    assert ds.note.htype == "text"
    assert ds.vec.numpy().shape == (3, 2)
    assert ds.extra.htype == "json"
    assert ds.extra[2].data() == {"k": [3]}


def test_a_sparse_pandas_column_is_read_as_its_values(tmp_path: Path) -> None:
    """A sparse column becomes a tensor of its dense values, of its subtype (before: a raw TypeError)."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {"x": pd.arrays.SparseArray([0, 1, 0, 3]), "y": pd.arrays.SparseArray([0.5, np.nan] * 2)}
    )
    ds = lc.from_pandas(frame, str(tmp_path / "ds"), progressbar=False)
    assert (ds.x.dtype, ds.x.numpy().tolist()) == (np.int64, [0, 1, 0, 3])
    assert ds.y.dtype == np.float64
    assert ds.y.numpy()[::2].tolist() == [0.5, 0.5]
    assert np.isnan(ds.y.numpy()[1::2]).all()


def test_decimal_numbers_of_an_extension_dtype_are_refused_by_column(tmp_path: Path) -> None:
    """pandas' decimal numbers (an Arrow-backed extension dtype whose numpy dtype is object) are refused
    naming the column, with nothing left at the destination."""
    import decimal

    pd = pytest.importorskip("pandas")
    column = pd.Series([decimal.Decimal("1.5")], dtype=pd.ArrowDtype(pa.decimal128(5, 2)))
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'x' cannot become a tensor: .*numeric dtype"):
        lc.from_pandas(pd.DataFrame({"x": column}), str(tmp_path / "ds"), progressbar=False)
    assert not lc.exists(str(tmp_path / "ds"))


@pytest.mark.parametrize("htypes", [["x"], ["ab"], "x", [("x", "text")]])
def test_htypes_that_is_not_a_dict_is_refused(tmp_path: Path, htypes: Any) -> None:
    """A list or a str for htypes is refused by its type (before: a raw ValueError, or ["ab"] read as
    {"a": "b"}); nothing is written."""
    table = pa.table({"x": [1]})
    with pytest.raises(lc.InvalidTypeError, match=r"htypes must be a dict of column name .* Got (list|str)"):
        lc.from_arrow(table, str(tmp_path / "ds"), htypes=htypes, progressbar=False)
    assert not lc.exists(str(tmp_path / "ds"))


def test_htypes_take_create_tensor_arguments(tmp_path: Path) -> None:
    table = pa.table({"b": pa.array([[[1, 2, 3, 4]], []], pa.list_(pa.list_(pa.float64())))})
    ds = lc.from_arrow(
        table, str(tmp_path / "ds"), htypes={"b": {"htype": "bbox", "format": "xywh", "dtype": "float64"}},
        progressbar=False,
    )  # fmt: skip
    assert (ds.b.htype, ds.b.info.format, ds.b.dtype) == ("bbox", "xywh", np.float64)
    assert ds.b[1].numpy().shape == (0, 4)
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'b' holds .*cannot become a text tensor"):
        lc.from_arrow(table, str(tmp_path / "x"), htypes={"b": "text"}, progressbar=False)
    with pytest.raises(lc.InvalidArgumentError, match=r"htypes names column\(s\) \['zz'\]"):
        lc.from_arrow(table, str(tmp_path / "x"), htypes={"zz": "text"}, progressbar=False)
    with pytest.raises(lc.InvalidArgumentError, match="Unknown htype 'picture'"):
        lc.from_arrow(table, str(tmp_path / "x"), htypes={"b": "picture"}, progressbar=False)


def test_columns_no_tensor_can_hold_are_refused(tmp_path: Path) -> None:
    table = pa.table({"when": pa.array([0, 1], pa.timestamp("s"))})
    with pytest.raises(lc.InvalidArgumentError, match=r"Column 'when' holds timestamp\[s\]"):
        lc.from_arrow(table, str(tmp_path / "ds"), progressbar=False)
    with pytest.raises(lc.InvalidArgumentError, match="tensor name"):
        lc.from_arrow(pa.table({"a b": [1]}), str(tmp_path / "ds"), progressbar=False)


def test_a_parquet_file_is_checked_before_anything_is_written(photos_parquet: Path, tmp_path: Path) -> None:
    data = photos_parquet.read_bytes()
    for name, damaged in {
        "truncated": data[: len(data) // 2],
        "random": np.random.default_rng(0).bytes(4096),
        "tail-only": data[-2048:],
    }.items():
        path = tmp_path / f"{name}.parquet"
        path.write_bytes(damaged)
        with pytest.raises(lc.DatasetCorruptError, match=f"{name}.parquet"):
            lc.from_parquet(path, str(tmp_path / "ds"), progressbar=False)
        with pytest.raises(lc.DatasetCorruptError):
            lc.read_parquet(path)
        assert not lc.exists(str(tmp_path / "ds"))


def test_a_footer_that_claims_what_the_file_does_not_hold(photos_parquet: Path, tmp_path: Path) -> None:
    """A footer whose column chunks point past the file's end (a file cut short, then given its footer
    back) is refused before any row group is read."""
    data = photos_parquet.read_bytes()
    meta = pq.read_metadata(photos_parquet)
    footer = 8 + int.from_bytes(data[-8:-4], "little")
    first = meta.row_group(0).column(0)
    cut = first.data_page_offset + first.total_compressed_size // 2
    path = tmp_path / "lying.parquet"
    path.write_bytes(data[:cut] + data[-footer:])
    with pytest.raises(lc.DatasetCorruptError, match="footer does not fit the file"):
        lc.read_parquet(path)


def test_a_dictionary_encoded_column_is_read_as_its_values(tmp_path: Path) -> None:
    """A pandas category written to Parquet comes back dictionary-encoded: strings become text (not json
    of quoted strings), numbers numbers; htypes= makes class labels of it, the names sorted."""
    pd = pytest.importorskip("pandas")
    table = pa.table(
        {"s": pa.array(["y", "x", "y"]).dictionary_encode(), "n": pa.array([5, 7, 5]).dictionary_encode()}
    )
    ds = lc.from_arrow(table, str(tmp_path / "a"), progressbar=False)
    assert (ds.s.htype, list(ds.s.text())) == ("text", ["y", "x", "y"])
    assert (ds.n.htype, ds.n.numpy().tolist()) == ("generic", [5, 7, 5])
    labels = lc.from_arrow(table, str(tmp_path / "b"), htypes={"s": "class_label"}, progressbar=False)
    assert (labels.s.info.class_names, labels.s.numpy().tolist()) == (["x", "y"], [1, 0, 1])
    pd.DataFrame({"kind": pd.Categorical(["cat", "dog", "cat"])}).to_parquet(tmp_path / "c.parquet")
    back = lc.from_parquet(tmp_path / "c.parquet", str(tmp_path / "c"), progressbar=False)
    assert (back.kind.htype, list(back.kind.text())) == ("text", ["cat", "dog", "cat"])
