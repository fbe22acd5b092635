"""The dataset API: empty/load/dataset/like/exists/delete, paths, summary, repr, __all__, no pickles."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.specs import htype_declaration
from tests.dataset.conftest import CLASS_NAMES, make_mixed, row, snapshot
from tests.helpers import make_numbers, wait_until

NUMERIC_ZARR_TYPES = {
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
}  # fmt: skip

PUBLIC_NAMES = [
    "CommitConflictError",
    "ComputeFunction",
    "Dataset",
    "DatasetCorruptError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "DatasetReplacedError",
    "DatasetView",
    "EvalConflictError",
    "EvalResult",
    "Expr",
    "ExpressionError",
    "FailedSample",
    "FingerprintError",
    "ForkInTaskError",
    "ImageFile",
    "InvalidArgumentError",
    "InvalidSampleError",
    "InvalidTypeError",
    "LakeComputeError",
    "LakeComputeWarning",
    "LeaseExpiredError",
    "MergeConflictError",
    "Pipeline",
    "RaggedShapeError",
    "ReadOnlyError",
    "RefExistsError",
    "RefNotFoundError",
    "RemoteError",
    "Row",
    "SampleIndexError",
    "StorageError",
    "Tensor",
    "TensorDiff",
    "TensorDoesNotExistError",
    "TensorExistsError",
    "TensorView",
    "TransformError",
    "UnpicklableTaskError",
    "VersionDiff",
    "WorkerDiedError",
    "__version__",
    "col",
    "compose",
    "compute",
    "copy",
    "dataset",
    "delete",
    "empty",
    "exists",
    "expr",
    "from_arrow",
    "from_csv",
    "from_numpy",
    "from_pandas",
    "from_parquet",
    "ingest_classification",
    "ingest_coco",
    "ingest_yolo",
    "like",
    "load",
    "read",
    "read_parquet",
    "worker_device",
]


def test_all_is_pinned_and_sorted() -> None:
    """lc.__all__ is exactly the pinned, sorted public surface, and every name in it exists."""
    assert lc.__all__ == PUBLIC_NAMES
    assert sorted(lc.__all__) == lc.__all__
    for name in lc.__all__:
        assert hasattr(lc, name), name


def test_empty_creates_and_refuses_existing(ds_path: str) -> None:
    """empty() creates a dataset at version 0; a second empty() raises DatasetExistsError naming the path."""
    ds = lc.empty(ds_path)
    assert ds.version == 0
    assert len(ds) == 0
    assert ds.tensors == {}
    assert lc.exists(ds_path)
    with pytest.raises(lc.DatasetExistsError, match=r"already exists .*overwrite=True") as info:
        lc.empty(ds_path)
    assert info.value.path == ds_path
    assert isinstance(info.value, FileExistsError)


def test_empty_overwrite_replaces(ds_path: str) -> None:
    """empty(overwrite=True) replaces an existing dataset with an empty one, dropping all its versions."""
    make_mixed(ds_path, n=2)
    ds = lc.empty(ds_path, overwrite=True)
    assert ds.version == 0
    again = lc.load(ds_path)
    assert again.tensors == {}
    assert [e["version"] for e in again.log()] == [0]


def test_load_opens_latest_and_read_only(ds_path: str) -> None:
    """load() opens the latest version; read_only=True gives a handle that reads the same content."""
    ds = make_mixed(ds_path, n=3)
    loaded = lc.load(ds_path)
    assert loaded.version == ds.version
    assert not loaded.read_only
    ro = lc.load(ds_path, read_only=True)
    assert ro.read_only
    assert snapshot(ro) == snapshot(ds)


def test_dataset_creates_then_loads(ds_path: str) -> None:
    """lc.dataset() creates an empty dataset when none exists and loads the existing one otherwise."""
    assert not lc.exists(ds_path)
    first = lc.dataset(ds_path)
    first.create_tensor("x", dtype="int8")
    first.x.extend([1, 2])
    second = lc.dataset(ds_path)
    assert second.x.numpy().tolist() == [1, 2]
    assert second.version == first.version


def test_like_copies_tensors_without_samples(tmp_path: Path) -> None:
    """like() makes a dataset with the same tensor names, htypes, dtypes, compressions and class names."""
    src = make_mixed(tmp_path / "src", n=3)
    out = lc.like(str(tmp_path / "out"), src)
    again = lc.load(str(tmp_path / "out"))
    assert list(again.tensors) == list(src.tensors)
    for name, t in src.tensors.items():
        o = again[name]
        assert len(o) == 0
        assert (o.htype, o.sample_compression, o.chunk_compression) == (
            t.htype,
            t.sample_compression,
            t.chunk_compression,
        )
        if htype_declaration(t.htype).dtype is not None:  # not decided by the data (generic)
            assert o.dtype == t.dtype
    assert again.labels.info.class_names == CLASS_NAMES
    assert again.u.dtype == np.uint8
    assert out.version == again.version
    again.append(row(0))
    assert snapshot(lc.load(str(tmp_path / "out")))["caption"] == ["caption 0 é"]


def test_like_from_view_and_overwrite(tmp_path: Path) -> None:
    """like() accepts a view as its source and replaces an existing dataset with overwrite=True."""
    src = make_mixed(tmp_path / "src", n=3)
    make_mixed(tmp_path / "out", n=1)
    with pytest.raises(lc.DatasetExistsError):
        lc.like(str(tmp_path / "out"), src[0:2])
    out = lc.like(str(tmp_path / "out"), src[0:2], overwrite=True)
    assert list(out.tensors) == list(src.tensors)
    assert len(out.caption) == 0


def test_exists_and_delete(ds_path: str, tmp_path: Path) -> None:
    """exists() tells datasets from other paths; delete() removes a dataset, missing_ok tolerates none."""
    assert not lc.exists(ds_path)
    assert not lc.exists(str(tmp_path))
    make_mixed(ds_path, n=1)
    assert lc.exists(ds_path)
    lc.delete(ds_path)
    assert not lc.exists(ds_path)
    with pytest.raises(lc.DatasetNotFoundError, match=r"No lakecompute dataset at"):
        lc.load(ds_path)
    with pytest.raises(lc.DatasetNotFoundError):
        lc.delete(ds_path)
    lc.delete(ds_path, missing_ok=True)


@pytest.mark.slow
def test_delete_then_empty_in_the_same_process_after_a_lease_renewal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer of this process that committed (its lease still renewed, as after every commit) does not
    bring the deleted folder back: after a renewal period, nothing is at the path and lc.empty takes it."""
    from lakecompute.versioned import Lease
    from lakecompute.versioned._leases import RENEW_SECONDS

    other = make_numbers(tmp_path / "other", 10)  # a lease the keeper renews on every pass
    path = str(tmp_path / "gone")
    ds = lc.empty(path)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(10))
    lc.delete(path)
    ticks: Counter[int] = Counter()
    tick = Lease.tick

    def counted(lease: Lease) -> None:
        tick(lease)
        ticks[id(lease)] += 1

    monkeypatch.setattr(Lease, "tick", counted)
    # A lease renewed twice since the delete: the keeper has made a whole pass over its leases since.
    wait_until(lambda: max(ticks.values(), default=0) >= 2, 4 * RENEW_SECONDS + 60, "two renewal passes")
    assert not os.path.exists(path)
    assert len(other.x) == 10
    again = lc.empty(path)
    assert len(again.tensors) == 0


def test_delete_refuses_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    """delete() refuses to remove a folder that holds no dataset, leaving its files."""
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(lc.DatasetNotFoundError):
        lc.delete(str(tmp_path))
    assert (tmp_path / "keep.txt").read_text() == "x"


def test_memory_path_roundtrip_and_isolation() -> None:
    """mem:// datasets work like local ones within the process, and different names are separate."""
    a, b = "mem://api-test-a", "mem://api-test-b"
    try:
        ds = lc.empty(a, overwrite=True)
        ds.create_tensor("t", htype="text")
        ds.t.extend(["x", "y"])
        assert lc.exists(a)
        assert not lc.exists(b)
        assert lc.load(a).t.text() == ["x", "y"]
        assert lc.load(a).path == a
        with pytest.raises(lc.DatasetExistsError):
            lc.empty(a)
        assert lc.dataset(a).version == ds.version
    finally:
        lc.delete(a, missing_ok=True)
    assert not lc.exists(a)


def test_file_url_path_is_the_same_dataset(tmp_path: Path) -> None:
    """A file:// URL and the plain path name the same dataset; ds.path is the location as given."""
    plain = str(tmp_path / "f")
    url = "file://" + plain
    ds = lc.empty(url)
    assert ds.path == url
    ds.create_tensor("x", dtype="int8")
    ds.x.append(3)
    assert lc.exists(plain)
    assert lc.load(plain).x.numpy().tolist() == [3]
    assert lc.load(url).path == url


def test_path_accepts_pathlike(tmp_path: Path) -> None:
    """A pathlib.Path works wherever a path string does."""
    p = tmp_path / "pl"
    lc.empty(p).create_tensor("x")
    assert lc.exists(p)
    assert list(lc.load(p).tensors) == ["x"]


@pytest.mark.parametrize(
    ("path", "pattern"),
    [("", r"Expected a dataset path"), ("mem://", r"Expected mem://<name>"), ("ftp://x/y", r"Unsupported")],
)
def test_bad_path_raises_invalid_argument(path: str, pattern: str) -> None:
    """Empty paths, nameless mem:// and unknown schemes raise InvalidArgumentError with a hint."""
    with pytest.raises(lc.InvalidArgumentError, match=pattern):
        lc.empty(path)


def test_summary_lists_tensors(ds_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    """summary() prints one line per tensor with htype, dtype, shape, compression and length."""
    ds = make_mixed(ds_path, n=3)
    ds.summary()
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"Dataset(path={ds_path!r}, version={ds.version}, samples=3)"
    assert lines[1].split() == ["tensor", "htype", "dtype", "shape", "compression", "length"]
    by_name = {line.split()[0]: line.split() for line in lines[3:]}
    assert list(by_name) == list(ds.tensors)
    assert by_name["img"] == ["img", "image", "uint8", "(3,", "4,", "5,", "3)", "png", "3"]
    assert by_name["g"] == ["g", "generic", "int64", "(3,", "None)", "zstd", "3"]
    assert by_name["caption"][:3] == ["caption", "text", "object"]
    assert by_name["labels"][1] == "class_label"


def test_repr_names_path_version_tensors(ds_path: str) -> None:
    """repr() of datasets, views, rows and tensors says what they are."""
    ds = make_mixed(ds_path, n=3)
    assert repr(ds) == (
        f"Dataset(path={ds_path!r}, version={ds.version}, "
        "tensors=['u', 'img', 'raw', 'labels', 'meta', 'caption', 'g'], samples=3)"
    )
    assert "read_only=True" in repr(lc.load(ds_path, read_only=True))
    assert repr(ds[0:2]) == f"DatasetView(path={ds_path!r}, version={ds.version}, samples=2)"
    assert repr(ds[1]).startswith("Row(index=1, tensors=['u'")
    assert repr(ds.img) == "Tensor(name='img', htype='image', shape=(3, 4, 5, 3), dtype=uint8)"


def test_storage_holds_no_pickles(ds_path: str) -> None:
    """Every stored file is zarr (numeric arrays) or JSON: versions/*.json parse and no file is a pickle."""
    make_mixed(ds_path, n=5)
    lc.load(ds_path).compact()
    files = [os.path.join(d, f) for d, _, fs in os.walk(ds_path) for f in fs]
    assert len(files) > 10
    manifests = 0
    for f in files:
        rel = os.path.relpath(f, ds_path)
        data = Path(f).read_bytes()
        assert not data.startswith(b"\x80"), f"{rel} looks like a pickle"
        assert b"pickle" not in data.lower(), rel
        if rel.startswith("versions" + os.sep) and rel.endswith(".json"):
            body = json.loads(data)
            assert body["format"] == "lakecompute/1"
            manifests += 1
        elif rel == os.path.join("versions", "LATEST"):
            assert data.strip().isdigit()
        elif rel.startswith(os.path.join("refs", "lines")):
            assert data.replace(b" ", b"").isdigit(), rel  # a branch's move, or its head hint
        elif rel.startswith("refs" + os.sep) and rel.endswith(".json"):
            assert isinstance(json.loads(data), dict)  # a branch or tag ref
        elif rel.startswith("leases" + os.sep) and rel.endswith(".json"):
            assert json.loads(data)["lakecompute"] == "lease"  # a writer's lease (see vacuum)
        elif os.path.basename(f) == "zarr.json":
            meta = json.loads(data)
            assert meta["zarr_format"] == 3
            assert meta["node_type"] in ("group", "array")
            if meta["node_type"] == "array":
                assert meta["data_type"] in NUMERIC_ZARR_TYPES, rel
        else:
            parts = rel.split(os.sep)  # a chunk: <array>/c/<i>[/<j>...]
            assert "c" in parts, rel
            assert all(p.isdigit() for p in parts[parts.index("c") + 1 :]), rel
    assert manifests == lc.load(ds_path).version + 1


def test_dataset_opens_with_plain_zarr(ds_path: str) -> None:
    """The dataset is a zarr v3 group that plain zarr opens, with uint8 data and int64 index arrays."""
    import zarr

    make_mixed(ds_path, n=2)
    group = zarr.open_group(ds_path, mode="r", zarr_format=3)
    assert "lakecompute" in group.attrs
    segments = group["segments"]
    assert isinstance(segments, zarr.Group)
    arrays = [segments[name] for name in segments.group_keys()]
    assert arrays
    for seg in arrays:
        assert seg["data"].dtype == np.uint8
        assert seg["index"].dtype == np.int64
