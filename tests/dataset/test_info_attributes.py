"""Attribute assignment on `info` (Deep Lake 3's `ds.info.key = "v"`, `ds.labels.info.class_names = [...]`)
commits like `info.update(...)` or raises; it never does nothing. Reading stays as it was."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc


def _ds(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
        ds.create_tensor("x", dtype="int64")
        ds.extend({"labels": [0, 1], "x": [5, 6]})
    return ds


def test_dataset_info_attribute_assignment_commits(tmp_path: Path) -> None:
    """ds.info.key = "v" writes one version; the handle, a fresh load and attribute reads all see it."""
    ds = _ds(tmp_path / "ds")
    before = ds.version
    ds.info.source = "COCO val2017"
    assert ds.version == before + 1
    assert ds.info.source == "COCO val2017"
    assert lc.load(str(tmp_path / "ds")).info == {"source": "COCO val2017"}
    assert [e["message"] for e in ds.log()][-1] == "update info"


def test_tensor_info_attribute_assignment_commits(tmp_path: Path) -> None:
    """ds.<tensor>.info.key = "v" commits like ds.<tensor>.info.update(key="v")."""
    ds = _ds(tmp_path / "ds")
    before = ds.version
    ds.x.info.units = "mm"
    assert ds.version == before + 1
    assert lc.load(str(tmp_path / "ds")).x.info == {"units": "mm"}


def test_class_names_assignment_commits_and_is_checked(tmp_path: Path) -> None:
    """ds.labels.info.class_names = [...] renames and adds classes (committed, read back through labels);
    fewer names than the stored labels need is refused with the update's own check, nothing written."""
    ds = _ds(tmp_path / "ds")
    ds.labels.info.class_names = ["cat", "hound", "bird"]
    again = lc.load(str(tmp_path / "ds"))
    assert again.labels.info.class_names == ["cat", "hound", "bird"]
    assert again.labels.info.class_names[int(again.labels[1].numpy())] == "hound"
    version = again.version
    with pytest.raises(lc.InvalidArgumentError, match="would go from 3 names to 1"):
        ds.labels.info.class_names = ["cat"]
    assert lc.load(str(tmp_path / "ds")).version == version


def test_held_info_object_refreshes_and_stays_the_callers_own(tmp_path: Path) -> None:
    """An info object kept by the caller sees its own assignment; changing a value read from it (a list)
    still changes nothing stored."""
    ds = _ds(tmp_path / "ds")
    info = ds.labels.info
    info.class_names = ["cat", "dog", "emu"]
    assert info.class_names == ["cat", "dog", "emu"]
    info.class_names.append("zebra")  # a read value: the caller's own copy
    assert lc.load(str(tmp_path / "ds")).labels.info.class_names == ["cat", "dog", "emu"]


def test_attribute_assignments_inside_with_make_one_commit(tmp_path: Path) -> None:
    """Inside `with ds:` attribute assignments join the block's single commit."""
    ds = _ds(tmp_path / "ds")
    before = ds.version
    with ds:
        ds.info.a = 1
        ds.info.b = [1, 2]
        ds.x.info.units = "s"
    assert ds.version == before + 1
    again = lc.load(str(tmp_path / "ds"))
    assert again.info == {"a": 1, "b": [1, 2]}
    assert again.x.info == {"units": "s"}


def test_attribute_delete_commits(tmp_path: Path) -> None:
    """del ds.info.key commits the removal; a missing key is an AttributeError naming the keys there."""
    ds = _ds(tmp_path / "ds")
    ds.info.update(a=1, b=2)
    del ds.info.a
    assert lc.load(str(tmp_path / "ds")).info == {"b": 2}
    with pytest.raises(AttributeError, match=r"has no 'zz'; it has \['b'\]"):
        del ds.info.zz


@pytest.mark.parametrize("name", ["update", "keys", "items", "pop", "copy"])
def test_key_named_like_a_dict_method_is_refused_as_an_attribute(tmp_path: Path, name: str) -> None:
    """info.update = ... cannot be a key by attribute: InvalidArgumentError naming info[...] as the way, and
    nothing is written; info[name] = value still works."""
    ds = _ds(tmp_path / "ds")
    before = ds.version
    with pytest.raises(lc.InvalidArgumentError, match=rf"info\['{name}'\] = value"):
        setattr(ds.info, name, 3)
    assert lc.load(str(tmp_path / "ds")).version == before
    ds.info[name] = 3
    assert lc.load(str(tmp_path / "ds")).info[name] == 3


def test_view_info_attribute_assignment_is_read_only(tmp_path: Path) -> None:
    """A view's info (and its tensors') refuses attribute assignment with ReadOnlyError."""
    ds = _ds(tmp_path / "ds")
    with pytest.raises(lc.ReadOnlyError):
        ds[0:1].info.source = "x"
    with pytest.raises(lc.ReadOnlyError):
        ds[0:1].labels.info.class_names = ["a", "b", "c"]
    assert lc.load(str(tmp_path / "ds")).info == {}


def test_old_version_info_attribute_assignment_is_read_only(tmp_path: Path) -> None:
    """An old version opened read-only refuses it too (never a silent no-op)."""
    ds = _ds(tmp_path / "ds")
    ds.x.append(np.int64(7))
    old = lc.load(str(tmp_path / "ds"), version=ds.version - 1)
    with pytest.raises(lc.ReadOnlyError):
        old.info.source = "x"
