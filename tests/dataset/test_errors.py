"""Bad input gets a clear error and loses nothing: the dataset holds exactly what it held before."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.dataset.conftest import CLASS_NAMES, make_mixed, row, snapshot

BadWrite = Callable[[lc.Dataset], Any]

# (call, error type, message pattern, tensor named by the error or None)
BAD_WRITES = [
    pytest.param(
        lambda ds: ds.u.append([300, 1]),
        lc.InvalidSampleError,
        r"value 300 does not fit dtype uint8",
        "u",
        id="uint8-overflow-append",
    ),
    pytest.param(
        lambda ds: ds.u.extend(np.array([[1, 2], [300, 3]])),
        lc.InvalidSampleError,
        r"value 300 does not fit dtype uint8 \(range 0\.\.255\)",
        "u",
        id="uint8-overflow-extend-array",
    ),
    pytest.param(
        lambda ds: ds.u.extend([[1, 2], [-1, 3]]),
        lc.InvalidSampleError,
        r"value -1 does not fit dtype uint8",
        "u",
        id="uint8-negative-extend-list",
    ),
    pytest.param(
        lambda ds: ds.append({**row(50), "u": [1, 300]}),
        lc.InvalidSampleError,
        r"value 300 does not fit",
        "u",
        id="uint8-overflow-in-row",
    ),
    pytest.param(
        lambda ds: ds.u.append([1.5, 2.0]),
        lc.InvalidSampleError,
        r"float64 cannot be stored as uint8 without losing information",
        "u",
        id="float-into-uint8",
    ),
    pytest.param(
        lambda ds: ds.img.append(np.zeros((4, 5, 3), dtype=np.float32)),
        lc.InvalidSampleError,
        r"expected a uint8 image\. Got a float image \(float32\)",
        "img",
        id="float-image-png",
    ),
    pytest.param(
        lambda ds: ds.raw.extend(np.zeros((2, 3, 3), dtype=np.float64)),
        lc.InvalidSampleError,
        r"Got a float image \(float64\)",
        "raw",
        id="float-image-raw-extend",
    ),
    pytest.param(
        lambda ds: ds.img.append(np.zeros((5,), dtype=np.uint8)),
        lc.InvalidSampleError,
        r"expected an image of shape HxW or HxWxC .* Got shape \(5,\)",
        "img",
        id="image-rank-1",
    ),
    pytest.param(
        lambda ds: ds.raw.append(np.zeros((2, 3, 3, 3), dtype=np.uint8)),
        lc.InvalidSampleError,
        r"HxW or HxWxC .* Got shape \(2, 3, 3, 3\)",
        "raw",
        id="image-rank-4",
    ),
    pytest.param(
        lambda ds: ds.img.append(np.zeros((4, 5), dtype=np.uint8)),
        lc.InvalidSampleError,
        r"same number of dimensions: expected 3, got 2",
        "img",
        id="image-rank-differs-from-tensor",
    ),
    pytest.param(
        lambda ds: ds.labels.append("fish"),
        lc.InvalidSampleError,
        r"class name 'fish' is not in class_names \['cat', 'dog', 'bird'\]",
        "labels",
        id="label-unknown-name",
    ),
    pytest.param(
        lambda ds: ds.labels.extend(["cat", "fish"]),
        lc.InvalidSampleError,
        r"class name 'fish'",
        "labels",
        id="label-unknown-name-extend",
    ),
    pytest.param(
        lambda ds: ds.labels.append(3),
        lc.InvalidSampleError,
        r"class index 3 is out of range for 3 class_names",
        "labels",
        id="label-index-too-big",
    ),
    pytest.param(
        lambda ds: ds.labels.extend(np.array([0, -1])),
        lc.InvalidSampleError,
        r"class index -1 is out of range",
        "labels",
        id="label-index-negative",
    ),
    pytest.param(
        lambda ds: ds.meta.append({"s": {1, 2}}),
        lc.InvalidSampleError,
        r"value is not JSON-serialisable \(Object of type set",
        "meta",
        id="json-set",
    ),
    pytest.param(
        lambda ds: ds.meta.append(float("nan")),
        lc.InvalidSampleError,
        r"not JSON-serialisable",
        "meta",
        id="json-nan",
    ),
    pytest.param(
        lambda ds: ds.meta.extend([{"ok": 1}, object()]),
        lc.InvalidSampleError,
        r"not JSON-serialisable",
        "meta",
        id="json-object-in-extend",
    ),
    pytest.param(
        lambda ds: ds.caption.append(5),
        lc.InvalidSampleError,
        r"expected str for a text tensor\. Got int",
        "caption",
        id="text-not-str",
    ),
    pytest.param(
        lambda ds: ds.g.append(np.zeros((2, 2), dtype=np.int64)),
        lc.InvalidSampleError,
        r"same number of dimensions: expected 1, got 2",
        "g",
        id="generic-rank",
    ),
    pytest.param(
        lambda ds: ds.u.__setitem__(0, [300, 0]),
        lc.InvalidSampleError,
        r"value 300 does not fit",
        "u",
        id="setitem-overflow",
    ),
    pytest.param(
        lambda ds: ds.u.__setitem__(99, [1, 1]),
        lc.SampleIndexError,
        r"Index 99 is out of range for tensor 'u' of length \d",
        None,
        id="setitem-past-end",
    ),
    pytest.param(
        lambda ds: ds.append({"u": [1, 1]}),
        lc.InvalidArgumentError,
        r"append\(\) is missing tensors \[",
        None,
        id="append-missing-tensors",
    ),
    pytest.param(
        lambda ds: ds.append({**row(50), "nope": 1}),
        lc.TensorDoesNotExistError,
        r"Tensor 'nope' does not exist",
        None,
        id="append-unknown-tensor",
    ),
    pytest.param(
        lambda ds: ds.extend({**{k: [v, v] for k, v in row(50).items()}, "caption": ["one"]}),
        lc.InvalidArgumentError,
        r"extend\(\) needs the same number of samples for every tensor",
        None,
        id="extend-unequal-lengths",
    ),
    pytest.param(
        lambda ds: ds.extend({**{k: [v] for k, v in row(50).items()}, "u": 5}),
        lc.InvalidTypeError,
        r"extend\(\) takes a sequence of samples for each tensor\. Got int for 'u'",
        None,
        id="extend-scalar-not-sequence",
    ),
    pytest.param(
        lambda ds: ds.create_tensor("u"),
        lc.TensorExistsError,
        r"Tensor 'u' already exists",
        None,
        id="duplicate-tensor",
    ),
    pytest.param(
        lambda ds: ds.create_tensor("q", htype="video"),
        lc.InvalidArgumentError,
        r"Unknown htype 'video' for tensor 'q'\. Expected one of \['generic', 'image'",
        None,
        id="unknown-htype",
    ),
    pytest.param(
        lambda ds: ds.create_tensor("q", htype="image", sample_compression="bmp"),
        lc.InvalidArgumentError,
        r"Unknown sample compression 'bmp'\. Expected one of None, 'jpeg', 'png', 'webp'",
        None,
        id="unknown-sample-compression",
    ),
    pytest.param(
        lambda ds: ds.create_tensor("q", chunk_compression="brotli"),
        lc.InvalidArgumentError,
        r"Unknown chunk compression 'brotli'\. Expected one of None, 'gzip', 'lz4', 'zstd'",
        None,
        id="unknown-chunk-compression",
    ),
    pytest.param(
        lambda ds: ds.create_tensor("q", dtype="notadtype"),
        lc.InvalidArgumentError,
        r"Unknown dtype 'notadtype'",
        None,
        id="unknown-dtype",
    ),
    pytest.param(
        lambda ds: ds.create_tensor("q", htype="image", dtype="float32"),
        lc.InvalidArgumentError,
        r"image tensor 'q' must have dtype uint8\. Got float32",
        None,
        id="image-dtype",
    ),
    pytest.param(
        lambda ds: ds.create_tensor("q", htype="text", class_names=["a"]),
        lc.InvalidArgumentError,
        r"class_names is for htypes \['class_label', 'segment_mask'\]",
        None,
        id="class-names-on-text",
    ),
]

INVALID_NAMES = [
    "",
    "a/b",
    "/abs",
    "..",
    "../up",
    "a..b/c",
    ".hidden",
    "-dash",
    "sp ace",
    "x\n",
    "x\n\n",
    "\nx",
]


def _expected_after(before: dict[str, list[Any]], rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    out = {k: list(v) for k, v in before.items()}
    for r in rows:
        for k, v in r.items():
            out[k].append(np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
    return out


@pytest.mark.parametrize(("bad", "error", "pattern", "tensor"), BAD_WRITES)
def test_write_bad_input_raises_clear_error_and_loses_nothing(
    mixed: lc.Dataset, bad: BadWrite, error: type[Exception], pattern: str, tensor: str | None
) -> None:
    """A refused call raises a clear error; the dataset (also reopened) holds what it held."""
    before = snapshot(mixed)
    version = mixed.version
    with pytest.raises(error, match=pattern) as info:
        bad(mixed)
    assert isinstance(info.value, lc.LakeComputeError)
    if tensor is not None:
        assert info.value.tensor == tensor  # type: ignore[attr-defined]
    assert mixed.version == version
    assert snapshot(mixed) == before
    assert snapshot(lc.load(mixed.path)) == before
    mixed.append(row(3))
    assert snapshot(lc.load(mixed.path)) == _expected_after(before, [row(3)])


@pytest.mark.parametrize(("bad", "error", "pattern", "tensor"), BAD_WRITES)
def test_write_bad_input_inside_with_block_continues(
    mixed: lc.Dataset, bad: BadWrite, error: type[Exception], pattern: str, tensor: str | None
) -> None:
    """Inside ``with ds:`` a caught error drops only the failing call; the block goes on and commits."""
    before = snapshot(mixed)
    version = mixed.version
    with mixed:
        mixed.append(row(3))
        with pytest.raises(error, match=pattern):
            bad(mixed)
        mixed.append(row(4))
        assert len(mixed) == 5
    want = _expected_after(before, [row(3), row(4)])
    assert mixed.version == version + 1
    assert snapshot(mixed) == want
    assert snapshot(lc.load(mixed.path)) == want


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_create_tensor_invalid_name_refused(mixed: lc.Dataset, name: str) -> None:
    """Empty names, '/', '..', a leading '.' or '-', spaces and newlines (even trailing) are refused."""
    tensors = list(mixed.tensors)
    version = mixed.version
    with pytest.raises(lc.InvalidArgumentError, match=r"Invalid tensor name .*use letters, digits") as info:
        mixed.create_tensor(name)
    assert repr(name) in str(info.value)
    assert isinstance(info.value, ValueError)
    assert list(mixed.tensors) == tensors
    assert list(lc.load(mixed.path).tensors) == tensors
    assert mixed.version == version


def test_create_tensor_non_str_name_refused(mixed: lc.Dataset) -> None:
    """A tensor name that is not a str raises InvalidTypeError (a TypeError)."""
    with pytest.raises(lc.InvalidTypeError, match=r"Expected a tensor name as str\. Got int: 3"):
        mixed.create_tensor(3)  # type: ignore[arg-type]


def test_create_tensor_duplicate_names_the_tensor(mixed: lc.Dataset) -> None:
    """TensorExistsError carries the tensor's name and leaves the tensor's spec untouched."""
    with pytest.raises(lc.TensorExistsError, match="already exists") as info:
        mixed.create_tensor("labels", htype="text")
    assert info.value.name == "labels"
    assert lc.load(mixed.path).labels.htype == "class_label"


def test_jpeg_rgba_refused(ds_path: str) -> None:
    """JPEG cannot hold an alpha channel: an RGBA image is refused with a hint, nothing is stored."""
    ds = lc.empty(ds_path)
    ds.create_tensor("images", htype="image", sample_compression="jpeg")
    with pytest.raises(lc.InvalidSampleError, match=r"JPEG cannot store an alpha channel") as info:
        ds.images.append(np.zeros((4, 4, 4), dtype=np.uint8))
    assert info.value.tensor == "images"
    assert len(lc.load(ds_path).images) == 0


def test_read_only_dataset_refuses_writes(mixed: lc.Dataset) -> None:
    """A dataset opened with read_only=True refuses every write with ReadOnlyError and keeps its data."""
    before = snapshot(mixed)
    ro = lc.load(mixed.path, read_only=True)
    assert ro.read_only
    calls: list[Callable[[], Any]] = [
        lambda: ro.append(row(9)),
        lambda: ro.extend({k: [v] for k, v in row(9).items()}),
        lambda: ro.u.append([1, 2]),
        lambda: ro.u.extend([[1, 2]]),
        lambda: ro.u.__setitem__(0, [1, 2]),
        lambda: ro.create_tensor("new"),
        lambda: ro.delete_tensor("u"),
        lambda: ro.commit(),
        lambda: ro.compact(),
        lambda: ro.vacuum(),
        lambda: ro.__enter__(),
    ]
    for call in calls:
        with pytest.raises(
            lc.ReadOnlyError, match=r"was opened read-only\. Open it with lc\.load\(path\) to write"
        ):
            call()
    assert snapshot(lc.load(mixed.path)) == before


def test_old_version_refuses_writes(mixed: lc.Dataset) -> None:
    """A dataset opened with version= is read-only and says how to write."""
    old = lc.load(mixed.path, version=2)
    assert old.read_only
    with pytest.raises(lc.ReadOnlyError, match=r"Version 2 of .* old versions are read-only"):
        old.u.append([1, 2])
    with pytest.raises(PermissionError, match=r"old versions are read-only") as info:
        old.create_tensor("x")
    assert isinstance(info.value, lc.ReadOnlyError)


def test_view_refuses_writes(mixed: lc.Dataset) -> None:
    """Views, tensor selections and rows refuse writes with ReadOnlyError; the dataset is unchanged."""
    before = snapshot(mixed)
    view = mixed[0:2]
    with pytest.raises(lc.ReadOnlyError, match=r"Dataset views are read-only"):
        view.append(row(9))
    with pytest.raises(lc.ReadOnlyError, match=r"Dataset views are read-only"):
        view.extend({k: [v] for k, v in row(9).items()})
    with pytest.raises(lc.ReadOnlyError, match=r"Dataset views are read-only"):
        view.create_tensor("x")
    with pytest.raises(lc.ReadOnlyError, match=r"Cannot write to a selection of tensor 'u'"):
        view.u[0] = [1, 1]
    with pytest.raises(lc.ReadOnlyError, match=r"Cannot write to a selection of tensor 'u'"):
        mixed.u[0:2][0] = [1, 1]
    with pytest.raises(lc.ReadOnlyError, match=r"Cannot append to a selection of tensor 'u'.*ds\.u\.append"):
        view.u.append([1, 1])
    with pytest.raises(lc.ReadOnlyError, match=r"Cannot extend a selection of tensor 'u'.*ds\.u\.extend"):
        mixed.u[0:2].extend([[1, 1]])
    with pytest.raises(lc.ReadOnlyError, match=r"Rows are read-only"):
        mixed[0].u = [1, 1]
    assert snapshot(mixed) == before
    assert snapshot(lc.load(mixed.path)) == before


@pytest.mark.parametrize(
    ("index", "what"),
    [(3, "a dataset"), (-4, "a dataset"), (100, "a dataset")],
)
def test_dataset_index_past_end_raises_index_error(mixed: lc.Dataset, index: int, what: str) -> None:
    """ds[i] past either end raises SampleIndexError, an IndexError naming the index and the length."""
    with pytest.raises(IndexError, match=rf"Index {index} is out of range for {what} of length 3") as info:
        mixed[index]
    assert isinstance(info.value, lc.SampleIndexError)


def test_tensor_index_past_end_raises_index_error(mixed: lc.Dataset) -> None:
    """Tensor indices, index lists and view indices past the end raise SampleIndexError."""
    with pytest.raises(lc.SampleIndexError, match=r"Index 3 is out of range for tensor 'u' of length 3"):
        mixed.u[3]
    with pytest.raises(lc.SampleIndexError, match=r"Index 7 is out of range"):
        mixed.u[[0, 7]]
    with pytest.raises(lc.SampleIndexError, match=r"Index -5 is out of range"):
        mixed[[-5]]
    with pytest.raises(lc.SampleIndexError, match=r"Index 2 is out of range .* of length 2"):
        mixed[0:2][2]
    with pytest.raises(lc.SampleIndexError, match=r"boolean mask must have one entry per sample: expected 3"):
        mixed[np.array([True, False])]


def test_unknown_tensor_raises_key_error(mixed: lc.Dataset) -> None:
    """ds['nope'] raises TensorDoesNotExistError, a KeyError listing the known tensors."""
    with pytest.raises(KeyError) as info:
        mixed["nope"]
    assert isinstance(info.value, lc.TensorDoesNotExistError)
    assert info.value.name == "nope"
    assert "Known tensors: ['caption', 'g', 'img', 'labels', 'meta', 'raw', 'u']" in str(info.value)
    with pytest.raises(AttributeError, match=r"no attribute or tensor 'nope'"):
        _ = mixed.nope


def test_load_missing_path_raises_not_found(tmp_path: Path) -> None:
    """Loading a path that does not exist raises DatasetNotFoundError naming the path."""
    path = str(tmp_path / "missing")
    with pytest.raises(
        lc.DatasetNotFoundError, match=r"No lakecompute dataset at .*missing.*does not exist"
    ) as info:
        lc.load(path)
    assert info.value.path == path
    assert isinstance(info.value, FileNotFoundError)
    assert not (tmp_path / "missing").exists()


def test_load_folder_that_is_not_a_dataset_raises_not_found(tmp_path: Path) -> None:
    """Loading a folder of other files or a plain zarr group raises DatasetNotFoundError, changing nothing."""
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(lc.DatasetNotFoundError, match=r"other than a lakecompute dataset \('notes.txt'\)"):
        lc.load(str(folder))
    import zarr

    zarr.create_group(str(tmp_path / "plain"))
    with pytest.raises(lc.DatasetNotFoundError, match=r"other than a lakecompute dataset \('zarr.json'\)"):
        lc.load(str(tmp_path / "plain"))
    with pytest.raises(lc.InvalidArgumentError, match=r"holds something other than a lakecompute dataset"):
        lc.empty(str(folder))
    assert (folder / "notes.txt").read_text() == "keep me"


def test_load_missing_version_raises_not_found(mixed: lc.Dataset) -> None:
    """load(version=N) for a version that was never committed raises DatasetNotFoundError."""
    with pytest.raises(lc.DatasetNotFoundError, match=r"It has no version 99"):
        lc.load(mixed.path, version=99)
    with pytest.raises(lc.InvalidTypeError, match=r"Expected version as an int or a tag name\. Got float"):
        lc.load(mixed.path, version=1.0)  # type: ignore[arg-type]
    with pytest.raises(lc.RefNotFoundError, match=r"has no branch or tag 'v1'"):
        lc.load(mixed.path, version="v1")


@pytest.mark.parametrize(
    "damage",
    [b"{not json", b"", b'{"format": "something-else"}', b"\x80\x04K\x01."],
    ids=["truncated", "empty", "foreign", "pickle-bytes"],
)
def test_load_damaged_manifest_names_file(tmp_path: Path, damage: bytes) -> None:
    """A damaged latest manifest raises DatasetCorruptError naming the file; version= opens older ones."""
    ds = make_mixed(tmp_path / "ds", n=2)
    before = snapshot(ds)
    good = ds.version
    ds.append(row(2))
    damaged = f"versions/{ds.version:010d}.json"
    (tmp_path / "ds" / damaged).write_bytes(damage)
    with pytest.raises(
        lc.DatasetCorruptError, match=rf"cannot read '{damaged}'.*lc\.load\(path, version=N\)"
    ) as info:
        lc.load(str(tmp_path / "ds"))
    assert info.value.file == damaged
    assert info.value.path == str(tmp_path / "ds")
    assert isinstance(info.value, lc.LakeComputeError)
    old = lc.load(str(tmp_path / "ds"), version=good)
    assert snapshot(old) == before


ERROR_BASES = [
    (lc.InvalidArgumentError, ValueError),
    (lc.InvalidTypeError, TypeError),
    (lc.InvalidSampleError, ValueError),
    (lc.DatasetExistsError, FileExistsError),
    (lc.DatasetNotFoundError, FileNotFoundError),
    (lc.TensorDoesNotExistError, KeyError),
    (lc.TensorExistsError, ValueError),
    (lc.RaggedShapeError, ValueError),
    (lc.ReadOnlyError, PermissionError),
    (lc.SampleIndexError, IndexError),
    (lc.CommitConflictError, RuntimeError),
]


@pytest.mark.parametrize(("error", "base"), ERROR_BASES, ids=lambda x: x.__name__)
def test_errors_derive_from_lakecompute_error_and_builtin(
    error: type[Exception], base: type[Exception]
) -> None:
    """Each dataset-layer error derives from LakeComputeError and from its nearest builtin."""
    assert issubclass(error, lc.LakeComputeError)
    assert issubclass(error, base)
    assert getattr(builtins, base.__name__) is base


def test_mixed_fixture_holds_expected_content(mixed: lc.Dataset) -> None:
    """The shared fixture holds rows 0..2 of every tensor, so the loses-nothing tests compare real data."""
    snap = snapshot(lc.load(mixed.path))
    assert snap["labels"] == [0, 1, 2]
    assert snap["caption"] == ["caption 0 é", "caption 1 é", "caption 2 é"]
    assert snap["g"] == [[0], [1, 2], [2, 3, 4]]
    assert len(CLASS_NAMES) == 3


def test_with_block_refused_call_leaves_empty_tensor_rank_open(ds_path: str) -> None:
    """A refused row inside ``with`` does not fix the rank of an empty generic tensor for later writes."""
    ds = lc.empty(ds_path)
    ds.create_tensor("g")
    ds.create_tensor("u", dtype="uint8")
    with ds:
        with pytest.raises(lc.InvalidSampleError, match=r"value 300 does not fit"):
            ds.append({"g": np.zeros((2, 2)), "u": 300})
        ds.append({"g": np.arange(3.0), "u": 1})
    ds.append({"g": np.arange(2.0), "u": 2})
    again = lc.load(ds_path)
    assert again.g.ndim == 1
    assert [a.tolist() for a in again.g.numpy(aslist=True)] == [[0.0, 1.0, 2.0], [0.0, 1.0]]
    assert again.u.numpy().tolist() == [1, 2]
