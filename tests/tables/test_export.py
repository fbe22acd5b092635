"""Exports of datasets and views as tables: ``to_arrow``, ``to_arrow_reader``, ``to_pandas``, ``to_parquet``
and ``to_hf``, each read back with the library that reads it."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakecompute as lc
from lakecompute.tables._rows import Buffers
from tests.tables.conftest import NAMES, image, make_photos


def test_to_arrow_types_each_htype_by_its_mapping(photos: lc.Dataset) -> None:
    """Images are Hugging Face's {bytes, path} struct of the stored PNG bytes, class labels int64 with
    the names in the features, boxes lists of 4, an embedding a fixed-size list, text and json strings."""
    table = photos.to_arrow()
    schema = table.schema
    assert schema.names == ["images", "labels", "boxes", "emb", "caption", "meta"]
    assert schema.field("images").type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    assert schema.field("labels").type == pa.int64()
    assert schema.field("boxes").type == pa.list_(pa.list_(pa.float32(), 4))
    assert schema.field("emb").type == pa.list_(pa.float32(), 4)
    assert schema.field("caption").type == pa.string() == schema.field("meta").type
    cells = table.column("images").to_pylist()
    assert [c["bytes"] for c in cells] == [photos.images[i].tobytes() for i in range(len(photos))]
    assert {c["path"] for c in cells} == {None}
    assert table.column("labels").to_pylist() == [i % 3 for i in range(12)]
    assert table.column("boxes").to_pylist()[2] == [[2.0] * 4, [2.0] * 4]
    assert table.column("caption").to_pylist()[3] == "photo 3 é"
    assert [json.loads(m) for m in table.column("meta").to_pylist()][1] == {"i": 1, "tags": ["x"]}
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert features["images"] == {"_type": "Image"}
    assert features["labels"] == {"names": NAMES, "_type": "ClassLabel"}
    layout = json.loads(schema.field("boxes").metadata[b"lakecompute"])
    assert (layout["htype"], layout["info"]["format"], layout["dims"]) == ("bbox", "xywh", [None, 4])


def test_a_view_exports_its_rows_in_its_order(photos: lc.Dataset) -> None:
    view = photos[[7, 2, 9]]
    table = view.to_arrow(["labels", "caption"])
    assert table.schema.names == ["labels", "caption"]
    assert table.column("caption").to_pylist() == ["photo 7 é", "photo 2 é", "photo 9 é"]
    frame = photos[5:1:-2].to_pandas("emb")
    assert [v.tolist() for v in frame["emb"]] == [[5.0, 6.0, 7.0, 8.0], [3.0, 4.0, 5.0, 6.0]]


def test_the_reader_streams_batches_bounded_by_rows_and_bytes(photos: lc.Dataset) -> None:
    """Batches of at most batch_size rows; with a byte budget below one image, a row each; in order."""
    reader = photos.to_arrow_reader(batch_size=5)
    assert isinstance(reader, pa.RecordBatchReader)
    sizes = [len(b) for b in reader]
    assert sizes == [5, 5, 2]
    small = list(photos.to_arrow_reader(batch_size=5, tensors="images", max_bytes=1))
    assert [len(b) for b in small] == [1] * 12
    got = [c["bytes"] for b in small for c in b.column(0).to_pylist()]
    assert got == [photos.images[i].tobytes() for i in range(12)]


def test_to_pandas_gives_what_the_dataset_reads(photos: lc.Dataset) -> None:
    frame = photos.to_pandas()
    assert list(frame.columns) == ["images", "labels", "boxes", "emb", "caption", "meta"]
    assert frame["labels"].dtype == np.uint32
    assert frame["labels"].tolist() == [i % 3 for i in range(12)]
    assert frame["boxes"][2].shape == (2, 4)
    assert frame["boxes"][0].shape == (0, 4)
    assert frame["meta"][3] == {"i": 3, "tags": ["x"]}
    assert frame["images"][4]["bytes"] == photos.images[4].tobytes()
    batches = list(photos.to_pandas(["caption"], batched=True, batch_size=5))
    assert [len(b) for b in batches] == [5, 5, 2]
    assert batches[1]["caption"].tolist()[0] == "photo 5 é"
    assert list(batches[2].index) == [10, 11]


def test_to_parquet_writes_a_file_others_read(photos: lc.Dataset, tmp_path: Path) -> None:
    """The file holds the schema of to_arrow, a row group per batch; a binary file object works too."""
    path = tmp_path / "out.parquet"
    photos.to_parquet(path, row_group_size=5, progressbar=False)
    parquet = pq.ParquetFile(path)
    assert parquet.metadata.num_row_groups == 3
    table = parquet.read()
    assert table.equals(photos.to_arrow())
    assert table.schema.field("labels").metadata == photos.to_arrow().schema.field("labels").metadata
    buffer = io.BytesIO()
    photos[:3].to_parquet(buffer, progressbar=False)
    assert pq.read_table(io.BytesIO(buffer.getvalue())).column("caption").to_pylist()[2] == "photo 2 é"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_raw_images_are_written_as_png_and_come_back_as_arrays(tmp_path: Path) -> None:
    ds = lc.empty(str(tmp_path / "raw"), overwrite=True)
    ds.create_tensor("im", htype="image")
    ds.im.extend([np.zeros((3, 4, 1), np.uint8), np.full((3, 4, 1), 9, np.uint8)])
    cell = ds.to_arrow().column("im").to_pylist()[1]
    assert cell["bytes"].startswith(b"\x89PNG")
    back = lc.from_arrow(ds.to_arrow(), str(tmp_path / "back"), progressbar=False)
    assert back.im.sample_compression is None
    assert np.array_equal(back.im.numpy(), ds.im.numpy())
    assert back.im.numpy().shape == (2, 3, 4, 1)


def test_to_hf_is_a_typed_datasets_dataset(photos: lc.Dataset) -> None:
    datasets = pytest.importorskip("datasets")
    hf = photos[:4].to_hf()
    assert isinstance(hf, datasets.Dataset)
    assert len(hf) == 4
    assert hf.features["images"] == datasets.Image()
    assert hf.features["labels"] == datasets.ClassLabel(names=NAMES)
    assert hf[1]["labels"] == 1
    assert np.array_equal(np.asarray(hf[3]["images"]), image(3))
    # The same rows make a dataset of the same fingerprint: an eval over it is recognised when run again.
    out = lc.empty(str(photos.path) + "-out", overwrite=True)
    out.create_tensor("labels", dtype="int64")
    keep_labels().eval(hf, out, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        keep_labels().eval(photos[:4].to_hf(), out, progressbar=False)
    assert out.labels.numpy().tolist() == [0, 1, 2, 0]


@lc.compute
def keep_labels(row: dict[str, object], out: object) -> None:
    out.labels.append(row["labels"])  # type: ignore[attr-defined]


def test_exports_refuse_what_is_not_one_table(tmp_path: Path) -> None:
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("a")
    ds.create_tensor("b")
    ds.a.extend([1, 2, 3])
    ds.b.extend([1, 2])
    with pytest.raises(lc.InvalidArgumentError, match=r"differ in length .*\(ds\[:2\]\)"):
        ds.to_arrow()
    assert ds[:2].to_arrow().num_rows == 2
    with pytest.raises(lc.TensorDoesNotExistError, match="'c'"):
        ds.to_pandas(["a", "c"])
    with ds:
        ds.a.append(4)
        with pytest.raises(lc.InvalidArgumentError, match="uncommitted changes"):
            ds.to_parquet(tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()
    with pytest.raises(lc.InvalidArgumentError, match="local file"):
        ds[:2].to_parquet("s3://bucket/x.parquet")


@pytest.mark.parametrize(
    ("mode", "error", "message"),
    [
        ("w", lc.InvalidArgumentError, r"binary mode \('wb'\)"),
        ("closed", lc.InvalidArgumentError, "closed file"),
        ("rb", lc.InvalidArgumentError, "not open for writing"),
        ("none", lc.InvalidTypeError, "a path or a binary file object. Got int"),
    ],
)
def test_to_parquet_refuses_a_file_it_cannot_write_to(
    tmp_path: Path, mode: str, error: type[Exception], message: str
) -> None:
    """A text-mode, closed or read-only file object is refused by the library before anything is written
    (pyarrow raised its own TypeError or ValueError)."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("a")
    ds.a.extend([1, 2, 3])
    path = tmp_path / "x.parquet"
    path.write_bytes(b"before")
    if mode == "none":
        with pytest.raises(error, match=message):
            ds.to_parquet(3)  # type: ignore[arg-type]
        return
    with open(path, "rb" if mode == "rb" else ("w" if mode == "w" else "wb")) as file:
        if mode == "closed":
            file.close()
        with pytest.raises(error, match=message):
            ds.to_parquet(file)
    assert path.read_bytes() == (b"" if mode in ("w", "closed") else b"before")


@pytest.mark.parametrize(
    ("export", "message"),
    [
        (lambda ds, tmp: ds.to_arrow_reader(0), r"batch_size >= 1\. Got 0"),
        (lambda ds, tmp: ds.to_arrow_reader(8, max_bytes=-1), r"max_bytes >= 1\. Got -1"),
        (lambda ds, tmp: ds.to_arrow_reader(2.5), r"batch_size to be an int\. Got float"),
        (lambda ds, tmp: ds.to_pandas(batched=True, batch_size=0), r"batch_size >= 1\. Got 0"),
        (lambda ds, tmp: ds.to_parquet(tmp / "x.parquet", row_group_size=0), r"row_group_size >= 1"),
        (lambda ds, tmp: ds.to_parquet(tmp / "x.parquet", row_group_bytes=0), r"row_group_bytes >= 1"),
    ],
    ids=["reader-rows", "reader-bytes", "reader-float", "pandas-batched", "parquet-rows", "parquet-bytes"],
)
def test_a_bad_batch_size_is_refused_at_the_call_by_its_name(
    tmp_path: Path, export: Any, message: str
) -> None:
    """The lazy exports (a reader, batched frames) check their counts when called, not when the first
    batch is taken; to_parquet names its own arguments and leaves no file."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("a")
    ds.a.extend([1, 2, 3])
    with pytest.raises((lc.InvalidArgumentError, lc.InvalidTypeError), match=message):
        export(ds, tmp_path)
    assert not (tmp_path / "x.parquet").exists()
    assert [b.num_rows for b in ds.to_arrow_reader(2)] == [2, 1]


def test_an_empty_dataset_exports_its_columns(tmp_path: Path) -> None:
    ds = make_photos(str(tmp_path / "ds"), n=0)
    table = ds.to_arrow()
    assert (table.num_rows, table.schema.names[:2]) == (0, ["images", "labels"])
    back = lc.from_arrow(table, str(tmp_path / "back"), progressbar=False)
    assert list(back.tensors) == list(ds.tensors)
    assert back.labels.info.class_names == NAMES


def test_import_lakecompute_loads_neither_pyarrow_nor_pandas() -> None:
    code = "import sys, lakecompute; print(sorted(m for m in ('pyarrow', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_htype_cannot_be_declared_without_its_arrow_mapping() -> None:
    """``arrow`` is a required field of the declaration, and every declared column kind has its encoder
    and its cell reader in lakecompute.tables."""
    from lakecompute.specs import HTYPES, ArrowMapping, HType
    from lakecompute.tables import COLUMN_CELLS, ENCODERS

    with pytest.raises(TypeError, match="arrow"):
        HType("video", "uint8")  # type: ignore[call-arg]
    assert HType("video", "uint8", arrow=ArrowMapping("numbers")).arrow.column == "numbers"
    kinds = {d.arrow.column for d in HTYPES.values()}
    assert kinds <= set(ENCODERS)
    assert kinds <= set(COLUMN_CELLS)


def test_a_damaged_dataset_fails_the_export_and_keeps_the_previous_file(tmp_path: Path) -> None:
    """A chunk damaged on disk is found while a later row group is read (on the export's reading thread):
    to_parquet raises DatasetCorruptError, the previous file stays, no temporary file is left."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    noise = [np.random.default_rng(i).integers(0, 256, (64, 64, 3), dtype=np.uint8) for i in range(200)]
    ds.images.extend(noise)
    chunks = sorted((tmp_path / "ds" / "segments").glob("*/data/c/*"), key=lambda p: int(p.name))
    last = chunks[-1]
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF
    last.write_bytes(bytes(data))
    target = tmp_path / "out" / "images.parquet"
    target.parent.mkdir()
    target.write_bytes(b"the previous export")
    with pytest.raises(lc.DatasetCorruptError, match="images"):
        lc.load(str(tmp_path / "ds")).to_parquet(target, row_group_bytes=64 << 10, progressbar=False)
    assert target.read_bytes() == b"the previous export"
    assert [p.name for p in target.parent.iterdir()] == ["images.parquet"]
    assert len(chunks) >= 3  # the damage is in a row group after the first few are written


def test_a_column_view_and_kept_objects_export_as_the_view_shows_them(tmp_path: Path) -> None:
    """``ds[["labels", "boxes"]]`` exports those columns; ``filter_labels`` exports the kept objects only
    (boxes with their labels), as the view reads them, and they come back so."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("boxes", htype="bbox")
    ds.create_tensor("categories", htype="class_label", class_names=["car", "bus"])
    ds.create_tensor("caption", htype="text")
    boxes = np.array([[0, 0, 2, 2], [1, 1, 3, 3], [2, 2, 4, 4]], np.float32)
    with ds:
        ds.append({"boxes": boxes, "categories": ["bus", "car", "car"], "caption": "a"})
        ds.append({"boxes": boxes[:1], "categories": ["bus"], "caption": "b"})
    assert ds[["categories", "caption"]].to_arrow().schema.names == ["categories", "caption"]
    view = ds.filter_labels(lc.col("categories") == "car", only_matches=False)
    table = view.to_arrow()
    assert table.column("categories").to_pylist() == [[0, 0], []]
    assert table.column("boxes").to_pylist()[0] == boxes[1:].tolist()
    back = lc.from_arrow(table, str(tmp_path / "back"), progressbar=False)
    assert back.boxes[1].numpy().shape == (0, 4)
    assert [b.shape for b in back.boxes.numpy(aslist=True)] == [(2, 4), (0, 4)]
    frame = view.to_pandas()
    assert frame["categories"][0].tolist() == [0, 0]
    assert frame["boxes"][1].shape == (0, 4)


def _noise_images(path: Path, n: int = 300) -> lc.Dataset:
    """``n`` PNGs of noise, ~25 KB each: several 1 MiB chunks, the middle ones read whole by an export."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    rngs = [np.random.default_rng(i) for i in range(n)]
    ds.images.extend([rng.integers(0, 256, (128, 64, 3), dtype=np.uint8) for rng in rngs])
    return ds


@pytest.mark.parametrize("damage", ["flip", "cut", "longer", "missing", "link"])
def test_a_chunk_read_whole_into_the_export_is_checked(tmp_path: Path, damage: str) -> None:
    """A chunk in the middle of a block (decoded straight into the export's reused buffer, not through
    the cache) with a byte flipped, cut short, one byte longer, missing or replaced by a link: the export
    raises DatasetCorruptError naming the tensor and chunk; to_parquet keeps the previous file."""
    _noise_images(tmp_path / "ds")
    chunks = sorted((tmp_path / "ds" / "segments").glob("*/data/c/*"), key=lambda p: int(p.name))
    assert len(chunks) >= 6
    chunk = chunks[3]
    data = chunk.read_bytes()
    if damage == "flip":
        chunk.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "cut":
        chunk.write_bytes(data[:-10])
    elif damage == "longer":
        chunk.write_bytes(data + b"\0")
    elif damage == "missing":
        chunk.unlink()
    else:
        (tmp_path / "elsewhere").write_bytes(data)
        chunk.unlink()
        chunk.symlink_to(tmp_path / "elsewhere")
    ds = lc.load(str(tmp_path / "ds"))
    target = tmp_path / "images.parquet"
    target.write_bytes(b"the previous export")
    why = {"flip": "checksum", "cut": "checksum", "longer": "checksum", "missing": "missing", "link": "link"}
    for export in (lambda: ds.to_parquet(target, progressbar=False), ds.to_arrow):
        with pytest.raises(lc.DatasetCorruptError, match=rf"data/c/{chunk.name}'.*images.*{why[damage]}"):
            export()
    assert target.read_bytes() == b"the previous export"


def test_the_export_buffers_are_handed_out_again_only_when_free() -> None:
    """`Buffers` hands a buffer out again once nothing but the pool refers to it (the Arrow buffer made
    of it gone), never while something does, and keeps at most its bytes."""
    pool = Buffers(4 << 20)
    first = pool.take(1 << 20)
    first[:3] = [1, 2, 3]
    column = pa.py_buffer(first[:3])  # as an exported block's Arrow column holds its blobs
    ids = {id(first)}
    del first
    second = pool.take(1 << 20)
    assert id(second) not in ids  # the Arrow buffer still reads the first
    ids.add(id(second))
    del second
    assert column.to_pybytes() == b"\x01\x02\x03"
    del column
    assert {id(pool.take(1 << 20)), id(pool.take(1 << 20))} <= ids
    assert len(pool) == 2
    assert pool.take(2 << 20).nbytes >= 2 << 20  # larger than any kept: a new one
    held = [pool.take(1 << 20) for _ in range(5)]  # all in use: each a new one, the last ones not kept
    assert len({id(b) for b in held}) == 5
    assert pool.nbytes <= 4 << 20


def test_to_parquet_row_groups_ramp_up_to_the_budget(tmp_path: Path) -> None:
    """The first row group holds about an eighth of row_group_bytes, each next twice the one before, up
    to the budget: the writer starts at once. The file reads back as the dataset."""
    ds = _noise_images(tmp_path / "ds", n=120)
    target = tmp_path / "images.parquet"
    budget = 1 << 20
    ds.to_parquet(target, row_group_bytes=budget, progressbar=False)
    meta = pq.ParquetFile(target).metadata
    sizes = [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
    assert sizes[0] < budget / 4 < sizes[2]
    assert sizes[0] < sizes[1] < sizes[2]
    assert all(s < 1.5 * budget for s in sizes)
    assert pq.read_table(target).equals(ds.to_arrow())


def test_to_hf_tells_diverged_copies_and_other_rows_apart(tmp_path: Path) -> None:
    """A folder copied and both committed to: one id and version, other content, other fingerprints."""
    pytest.importorskip("datasets")
    a = lc.empty(str(tmp_path / "a"), overwrite=True)
    a.create_tensor("labels", dtype="int64")
    a.extend({"labels": [1, 2, 3]})
    a.commit("c")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    b = lc.load(str(tmp_path / "b"))
    a.labels[0] = 10
    a.commit("a")
    b.labels[0] = 20
    b.commit("b")
    assert (a.id, a.version) == (b.id, b.version)
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("labels", dtype="int64")
    keep_labels().eval(a.to_hf(), out, progressbar=False)
    keep_labels().eval(b.to_hf(), out, progressbar=False)
    assert out.labels.numpy().tolist() == [10, 2, 3, 20, 2, 3]
    views = lc.empty(str(tmp_path / "views"), overwrite=True)
    views.create_tensor("labels", dtype="int64")
    for data in (a, a[[2, 1, 0]], a[[0, 1]]):  # another order or other rows: other inputs
        keep_labels().eval(data.to_hf(), views, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):  # it shows what a does
        keep_labels().eval(a[["labels"]].to_hf(), views, progressbar=False)
    assert views.labels.numpy().tolist() == [10, 2, 3, 3, 2, 10, 10, 2]


_EMPTY_EXTENTS = [
    ("generic", [np.zeros((0,), np.int32)] * 2),
    ("generic", [np.zeros((0, 3), np.int32)] * 2),
    ("generic", [np.zeros((3, 0), np.int32)] * 2),
    ("generic", [np.zeros((2, 0), np.int32), np.zeros((3, 0), np.int32)]),
    ("binary_mask", [np.zeros((4, 5, 0), bool)] * 2),
    ("bbox", [np.zeros((0, 4), np.float32)] * 2),
]


@pytest.mark.parametrize(("htype", "rows"), _EMPTY_EXTENTS)
def test_an_extent_of_0_in_every_row_is_written_as_a_list_parquet_reads_back(
    tmp_path: Path, htype: str, rows: list[np.ndarray]
) -> None:
    """A dimension that is 0 in every exported row (images without boxes, an empty mask stack) is a
    variable list, not a fixed-size list of size 0 (which Parquet readers refuse), and reads back exactly
    through pyarrow and from_parquet."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", htype=htype)
    ds.x.extend(rows)
    path = tmp_path / "x.parquet"
    ds.to_parquet(path, progressbar=False)
    assert pq.read_table(path).column("x").to_pylist() == [r.tolist() for r in rows]
    back = lc.from_parquet(path, str(tmp_path / "back"), progressbar=False)
    got = back.x.numpy(aslist=True)
    assert [(g.shape, g.dtype) for g in got] == [(r.shape, r.dtype) for r in rows]


def test_a_box_column_has_one_type_whatever_rows_are_exported(tmp_path: Path) -> None:
    """The column of a tensor of objects (boxes, labels per object, keypoints) has the tensor's type in
    every export, not its rows' (rows sharing an object count, or no rows at all): shards of one dataset
    are read back together as one."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("boxes", htype="bbox")
    ds.create_tensor("labels", htype="class_label", class_names=["a", "b"])
    ds.create_tensor("points", htype="keypoints")
    with ds:
        for i in range(4):
            k = 1 + i % 2
            ds.append({"boxes": np.full((k, 4), i, np.float32), "labels": [i % 2] * k,
                       "points": np.full((k, 2, 3), 2, np.float32)})  # fmt: skip
    shards = tmp_path / "shards"
    shards.mkdir()
    for name, rows in (("a", [0, 1]), ("b", [2]), ("c", [])):
        ds[rows].to_parquet(shards / f"{name}.parquet", ["boxes", "labels"], progressbar=False)
        ds[rows].to_parquet(tmp_path / f"points-{name}.parquet", "points", progressbar=False)
    schemas = [pq.read_schema(shards / f"{n}.parquet") for n in "abc"]
    assert {str(s.field("boxes").type) for s in schemas} == {
        "list<element: fixed_size_list<element: float>[4]>"
    }
    assert {str(s.field("labels").type) for s in schemas} == {"list<element: int64>"}
    points = {str(pq.read_schema(tmp_path / f"points-{n}.parquet").field("points").type) for n in "ab"}
    assert points == {"list<element: fixed_size_list<element: fixed_size_list<element: float>[3]>[2]>"}
    back = lc.from_parquet(str(shards), str(tmp_path / "back"), progressbar=False)
    assert [b.tolist() for b in back.boxes.numpy(aslist=True)] == [[[0.0] * 4], [[1.0] * 4] * 2, [[2.0] * 4]]
    assert [lab.tolist() for lab in back.labels.numpy(aslist=True)] == [[0], [1, 1], [0]]
