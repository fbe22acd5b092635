"""Metadata handed out is the caller's own: changing it never changes the dataset; explicit info updates
commit (tensor info like ds.info), are checked like a manifest read back, and never vanish silently."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.datasets import evals_of
from lakecompute.testing.detection import write_coco_folder
from lakecompute.testing.internals import whole_manifest


def _stored(path: Path) -> dict[str, Any]:
    """Every piece of metadata of the latest version, read from its manifest file."""
    ds = lc.load(str(path))
    body = whole_manifest(path, ds.version)
    return {"info": body.get("info", {}), "tensors": {k: v["info"] for k, v in body["tensors"].items()}}


def _detection(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog", "bird"])
    ds.create_tensor("boxes", htype="bbox", format="xywh", normalized=False)
    ds.create_tensor("points", htype="keypoints", keypoint_names=["nose", "tail"], skeleton=[[1, 2]])
    ds.create_tensor("extra", dtype="int64", notes={"tags": ["a", "b"], "nested": {"k": [1, 2]}})
    ds.info.update(source="test", tags=["x", "y"], nested={"deep": [1, {"z": [2]}]})
    ds.append({
        "labels": 2,
        "boxes": np.array([[1, 2, 3, 4]], np.float32),
        "points": np.array([[1, 1, 2], [3, 3, 2]], np.float32),
        "extra": 7,
    })  # fmt: skip
    return ds


def _mutate(value: Any) -> None:
    """Change a JSON value read from metadata every way a list or dict can be changed in place."""
    if isinstance(value, list):
        value.append("mutated")
        value.reverse()
        for item in value:
            _mutate(item)
    elif isinstance(value, dict):
        for item in list(value.values()):
            _mutate(item)
        value["mutated"] = True


def test_mutating_every_metadata_read_changes_nothing_stored(tmp_path: Path) -> None:
    """Class names, keypoint names, skeleton, box layout, extra info, dataset info, tensor.meta and a
    view's info, all changed in place, then an unrelated append: the stored metadata is as before and the
    label still reads as the same class."""
    ds = _detection(tmp_path / "ds")
    before = _stored(tmp_path / "ds")
    reads = [
        ds.labels.info.class_names,
        ds.labels.info["class_names"],
        ds.points.info.keypoint_names,
        ds.points.info.skeleton,
        ds.extra.info.notes,
        ds.info.tags,
        ds.info["nested"],
        ds.extra.meta,
        ds[0:1].info.tags,
        ds[0:1].labels.info.class_names,
        ds[0].labels.info.class_names,
    ]
    ds.labels.info.class_names.sort()
    for value in reads:
        _mutate(value)
    for info in (ds.labels.info, ds.boxes.info, ds.points.info, ds.info, ds.extra.info):
        dict.__setitem__(info, "sneaked", 1)  # even past the commit methods: it is a copy
    ds.extra.append(8)  # an unrelated commit
    assert _stored(tmp_path / "ds") == before
    assert ds.labels.info.class_names == ["cat", "dog", "bird"]
    assert ds.labels.info.class_names[int(ds.labels[0].numpy())] == "bird"
    reloaded = lc.load(str(tmp_path / "ds"))
    assert reloaded.info.tags == ["x", "y"]
    assert reloaded.points.info.skeleton == [[1, 2]]


def test_coco_categories_read_are_copies(tmp_path: Path) -> None:
    """ingest_coco's categories and file info, read and changed, stay as stored."""
    images, annotations = write_coco_folder(tmp_path / "coco", n=2)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    before = _stored(tmp_path / "ds")
    for tensor in ds.tensors.values():
        for value in tensor.info.values():
            _mutate(value)
    for value in ds.info.values():
        _mutate(value)
    with ds:
        ds.info["touched"] = 1  # a commit of something else
    after = _stored(tmp_path / "ds")
    assert after["tensors"] == before["tensors"]
    assert {k: v for k, v in after["info"].items() if k != "touched"} == before["info"]


@lc.compute
def _doubled(x: Any, sample_out: Any) -> None:
    sample_out.y.append(2 * int(x))


def test_mutating_records_log_and_tensor_listings_changes_nothing(tmp_path: Path) -> None:
    """The other reads that hand out containers (eval records and their outputs, the log's entries, the
    tensors mapping, a tensor's shape listing) are the caller's: changing them changes no later read."""
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("y", dtype="int64")
    _doubled().eval([1, 2, 3], out, progressbar=False)
    ds = lc.load(str(tmp_path / "out"))
    records, log, tensors = evals_of(ds).records(), ds.log(), ds.tensors
    first = {k: copy.deepcopy(v) for k, v in records.items()}
    first_log = copy.deepcopy(log)
    for record in records.values():
        _mutate(record.outputs)
    records.clear()
    for entry in log:
        _mutate(entry)
    tensors.clear()
    assert evals_of(ds).records() == first
    assert ds.log() == first_log
    assert list(ds.tensors) == ["y"]
    assert ds.y.numpy().tolist() == [2, 4, 6]


def test_tensor_info_update_commits_like_dataset_info(tmp_path: Path) -> None:
    """ds.<tensor>.info.update, [key] = and del each commit a version that a reload sees."""
    ds = _detection(tmp_path / "ds")
    version = ds.version
    ds.extra.info.update(units="mm", scale=2)
    assert ds.version == version + 1
    ds.extra.info["owner"] = "me"
    del ds.extra.info["scale"]
    reloaded = lc.load(str(tmp_path / "ds"))
    assert reloaded.extra.info["units"] == "mm"
    assert reloaded.extra.info.owner == "me"
    assert "scale" not in reloaded.extra.info
    assert reloaded.version == version + 3
    log = [entry["message"] for entry in reloaded.log()]
    assert log[-1] == "update info of extra"


def test_info_object_refreshes_and_keeps_other_writers_keys(tmp_path: Path) -> None:
    """An info object held for a while updates the info as it is now (it never writes back stale keys),
    and shows what was committed."""
    ds = _detection(tmp_path / "ds")
    held = ds.info
    ds.info["later"] = 1
    held.update(mine=2)
    assert lc.load(str(tmp_path / "ds")).info["later"] == 1
    assert held["mine"] == 2
    assert held["later"] == 1


def test_tensor_info_update_joins_the_with_block(tmp_path: Path) -> None:
    """Inside with ds:, a tensor info update is part of the block's commit, and rolls back with it."""
    ds = _detection(tmp_path / "ds")
    version = ds.version
    with ds:
        ds.extra.info["a"] = 1
        ds.extra.append(1)
    assert ds.version == version + 1

    def failing_block() -> None:
        with ds:
            ds.extra.info["b"] = 2
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing_block()
    assert "b" not in lc.load(str(tmp_path / "ds")).extra.info
    assert lc.load(str(tmp_path / "ds")).extra.info["a"] == 1


def test_class_names_change_only_through_an_explicit_update(tmp_path: Path) -> None:
    """info.update(class_names=...) renames and adds names (stored labels keep their index); fewer names,
    repeated names or non-strings are refused, and a new name can be appended as a label after adding it."""
    ds = _detection(tmp_path / "ds")
    with pytest.raises(lc.InvalidSampleError, match="not in class_names"):
        ds.labels.append("cow")
    ds.labels.info.update(class_names=["cat", "dog", "Bird", "cow"])
    ds.labels.append("cow")
    reloaded = lc.load(str(tmp_path / "ds"))
    names = reloaded.labels.info.class_names
    assert [names[int(v)] for v in reloaded.labels.numpy()] == ["Bird", "cow"]
    with pytest.raises(lc.InvalidArgumentError, match="would go from 4 names to 2"):
        ds.labels.info.update(class_names=["cat", "dog"])
    with pytest.raises(lc.InvalidArgumentError, match="must be distinct strings"):
        ds.labels.info["class_names"] = ["a", "a", "b", "c"]
    with pytest.raises(lc.InvalidArgumentError, match="must be distinct strings"):
        del ds.labels.info["class_names"]
    with pytest.raises(lc.InvalidArgumentError, match="class_names is for htypes"):
        ds.extra.info["class_names"] = ["x"]
    assert lc.load(str(tmp_path / "ds")).labels.info.class_names == ["cat", "dog", "Bird", "cow"]


def test_box_layout_cannot_change_under_stored_boxes(tmp_path: Path) -> None:
    """A bbox tensor holding boxes refuses a new format or normalized (the boxes would change meaning);
    an empty one accepts it; keypoint names keep their count."""
    ds = _detection(tmp_path / "ds")
    with pytest.raises(lc.InvalidArgumentError, match=r"holds boxes in format='xywh'"):
        ds.boxes.info["format"] = "xyxy"
    with pytest.raises(lc.InvalidArgumentError, match="normalized"):
        ds.boxes.info.update(normalized=True)
    with pytest.raises(lc.InvalidArgumentError, match="format must be one of"):
        ds.boxes.info["format"] = "yxyx"
    with pytest.raises(lc.InvalidArgumentError, match=r"skeleton must be .* \(1\.\.1\)"):
        ds.points.info["keypoint_names"] = ["nose"]
    with pytest.raises(lc.InvalidArgumentError, match="keypoint_names must keep 2 names"):
        ds.points.info.update(keypoint_names=["nose"], skeleton=[])
    ds.points.info["keypoint_names"] = ["snout", "tail"]
    ds.create_tensor("empty_boxes", htype="bbox")
    ds.empty_boxes.info.update(format="cxcywh", normalized=True)
    back = lc.load(str(tmp_path / "ds"))
    assert (back.empty_boxes.info.format, back.empty_boxes.info.normalized) == ("cxcywh", True)
    assert back.boxes.info.format == "xywh"
    assert back.points.info.keypoint_names == ["snout", "tail"]


def test_view_tensor_info_is_read_only(tmp_path: Path) -> None:
    """A view's (or row's) tensor info refuses updates with ReadOnlyError, naming where to update."""
    ds = _detection(tmp_path / "ds")
    for info in (ds[0:1].extra.info, ds[0].extra.info):
        with pytest.raises(lc.ReadOnlyError, match=r"ds.<tensor>.info.update"):
            info["k"] = 1
    with pytest.raises(lc.ReadOnlyError, match="A view's info"):
        ds[0:1].info["k"] = 1


def test_read_only_handle_refuses_info_updates(tmp_path: Path) -> None:
    """Info updates on a read-only or old-version handle raise ReadOnlyError like any write."""
    _detection(tmp_path / "ds")
    for handle in (lc.load(str(tmp_path / "ds"), read_only=True), lc.load(str(tmp_path / "ds"), version=5)):
        with pytest.raises(lc.ReadOnlyError):
            handle.extra.info["k"] = 1
        with pytest.raises(lc.ReadOnlyError):
            handle.info["k"] = 1


def test_very_deep_info_value_is_refused_clearly(tmp_path: Path) -> None:
    """A 100,000-deep value in ds.info or a tensor's info is an InvalidArgumentError (no RecursionError),
    and nothing is committed."""
    ds = _detection(tmp_path / "ds")
    version = ds.version
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(lc.InvalidArgumentError, match="nested deeper than 64 levels"):
        ds.info["deep"] = deep
    with pytest.raises(lc.InvalidArgumentError, match="nested deeper than 64 levels"):
        ds.extra.info.update(deep=deep)
    with pytest.raises(lc.InvalidArgumentError, match="JSON values"):
        ds.info["nan"] = float("nan")
    with pytest.raises(lc.InvalidTypeError, match="keys are strings"):
        ds.extra.info.update({1: "x"})
    assert lc.load(str(tmp_path / "ds")).version == version


def test_info_pickles_and_copies_as_a_plain_dict(tmp_path: Path) -> None:
    """pickle and copy.deepcopy of an info give a plain dict of its values (nothing to commit through)."""
    ds = _detection(tmp_path / "ds")
    info = ds.labels.info
    for copied in (pickle.loads(pickle.dumps(info)), copy.deepcopy(info), copy.copy(info)):
        assert type(copied) is dict
        assert copied == dict(info)
    assert json.loads(json.dumps(ds.labels.info)) == {"class_names": ["cat", "dog", "bird"]}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=20,
)
NEAR_JSON = JSON | st.builds(set) | st.builds(object) | st.binary(max_size=3) | st.tuples(JSON, JSON)


@settings(max_examples=60, deadline=None)
@given(key=st.one_of(st.text(max_size=4), st.integers()), value=NEAR_JSON)
def test_info_update_takes_json_or_raises_a_library_error(key: Any, value: Any) -> None:
    """Any near-JSON value (NaN, sets, bytes, objects, tuples, non-string keys) is stored and read back
    equal to its JSON form, or refused with a LakeComputeError; never a raw exception."""
    ds = lc.empty("mem://info-property", overwrite=True)
    ds.create_tensor("x", dtype="int64")
    for info, read in ((ds.info, lambda: ds.info), (ds.x.info, lambda: ds.x.info)):
        try:
            info.update({key: value})
        except lc.LakeComputeError:
            continue
        assert read()[key] == json.loads(json.dumps(value))
