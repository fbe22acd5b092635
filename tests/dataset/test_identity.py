"""Dataset identity: a random id made at creation, kept by every version, new when the path is remade."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import lakecompute as lc
from lakecompute.storage import open_backend
from lakecompute.versioned import Manifest
from lakecompute.versioned._keys import version_key
from lakecompute.versioned._reads import read_manifest


def _as_before_ids(path: str, versions: int) -> None:
    """Rewrite a dataset's manifests and root marker as a version of lakecompute without ids wrote them."""
    for v in range(versions):
        key = Path(path) / version_key(v)
        body = json.loads(key.read_bytes())
        del body["dataset_id"]
        key.write_bytes(json.dumps(body).encode())
    root = Path(path) / "zarr.json"
    marker = json.loads(root.read_bytes())
    del marker["attributes"]["lakecompute"]["dataset_id"]
    root.write_bytes(json.dumps(marker).encode())


def _manifest_json(path: str, version: int) -> dict[str, object]:
    data = (Path(path) / version_key(version)).read_bytes()
    loaded: dict[str, object] = json.loads(data)
    return loaded


def test_id_is_random_hex_and_kept_by_every_version(tmp_path: Path) -> None:
    """A new dataset gets a 32-hex id that every later version's manifest records unchanged."""
    path = str(tmp_path / "ds")
    ds = lc.empty(path)
    assert re.fullmatch(r"[0-9a-f]{32}", ds.id)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend([1, 2, 3])
    ds.info["k"] = 1
    ds.compact()
    assert ds.version >= 4
    for v in range(ds.version + 1):
        assert _manifest_json(path, v)["dataset_id"] == ds.id
    assert lc.load(path).id == ds.id
    assert lc.load(path, version=0).id == ds.id


def test_id_new_when_overwritten_or_recreated(tmp_path: Path) -> None:
    """Overwriting, or deleting and creating again, gives the path a dataset with another id."""
    path = str(tmp_path / "ds")
    first = lc.empty(path).id
    second = lc.empty(path, overwrite=True).id
    lc.delete(path)
    third = lc.empty(path).id
    assert len({first, second, third}) == 3


def test_id_differs_between_datasets_and_like(tmp_path: Path) -> None:
    """Two datasets, and a dataset made with lc.like from another, have different ids."""
    a = lc.empty(str(tmp_path / "a"))
    a.create_tensor("x")
    b = lc.like(str(tmp_path / "b"), a)
    assert a.id != b.id


def test_copies_are_new_datasets_with_ids_of_their_own(tmp_path: Path) -> None:
    """lc.copy and view.save make new datasets: each has an id of its own (not the source's), kept by its
    later versions, and the source keeps its id."""
    src = lc.empty(str(tmp_path / "src"))
    src.create_tensor("x", dtype="int64")
    src.x.extend(list(range(6)))
    copied = lc.copy(str(tmp_path / "src"), str(tmp_path / "copy"), progressbar=False)
    saved = src[1:4].save(str(tmp_path / "saved"), progressbar=False)
    assert len({src.id, copied.id, saved.id}) == 3
    copied.x.append(6)
    assert lc.load(str(tmp_path / "copy")).id == copied.id
    assert lc.load(str(tmp_path / "saved")).x.numpy().tolist() == [1, 2, 3]
    assert lc.load(str(tmp_path / "src")).id == src.id


def test_legacy_dataset_id_derived_then_recorded(tmp_path: Path) -> None:
    """A dataset whose manifests predate ids gets one derived from its first manifest, recorded by the
    next commit, and kept after vacuum removes that first manifest."""
    path = str(tmp_path / "old")
    ds = lc.empty(path)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend([1, 2])
    _as_before_ids(path, ds.version + 1)
    old = lc.load(path)
    derived = old.id
    assert re.fullmatch(r"legacy-[0-9a-f]{32}", derived)
    assert lc.load(path).id == derived  # deterministic
    old.x.append(3)  # the next commit records it
    assert _manifest_json(path, old.version)["dataset_id"] == derived
    old.vacuum(grace_seconds=0, keep_versions=1)
    assert lc.load(path).id == derived
    assert lc.load(path).x.numpy().tolist() == [1, 2, 3]


def test_legacy_id_differs_after_recreate(tmp_path: Path) -> None:
    """Two legacy datasets made one after the other at one path derive different ids."""
    path = str(tmp_path / "old")
    ids = []
    for _ in range(2):
        lc.empty(path, overwrite=True)
        _as_before_ids(path, 1)
        ids.append(lc.load(path).id)
    assert ids[0] != ids[1]


@pytest.mark.parametrize("bad", ["", "x" * 32, "ABCDEF" * 6, 12, None])
def test_damaged_dataset_id_is_corrupt(tmp_path: Path, bad: object) -> None:
    """A manifest whose dataset_id is not an id reads as DatasetCorruptError naming the field."""
    path = str(tmp_path / "ds")
    lc.empty(path)
    key = Path(path) / version_key(0)
    body = json.loads(key.read_bytes())
    body["dataset_id"] = bad
    key.write_bytes(json.dumps(body).encode())
    if bad == "":
        # An empty id is what a manifest without one parses to: a legacy dataset, not damage.
        assert lc.load(path).id.startswith("legacy-")
        return
    with pytest.raises(lc.DatasetCorruptError, match="dataset_id"):
        lc.load(path)


def test_manifest_round_trips_dataset_id() -> None:
    """A manifest's dataset_id survives to_bytes/from_bytes; one without it stays without it."""
    with_id = Manifest(version=0, dataset_id="0" * 32)
    assert Manifest.from_bytes(with_id.to_bytes()).dataset_id == "0" * 32
    without = Manifest(version=0)
    assert b"dataset_id" not in without.to_bytes()
    assert Manifest.from_bytes(without.to_bytes()).dataset_id == ""


def test_read_manifest_keeps_id(tmp_path: Path) -> None:
    """read_manifest returns the id version 0 was created with."""
    path = str(tmp_path / "ds")
    ds = lc.empty(path)
    assert read_manifest(open_backend(path), 0).dataset_id == ds.id


def test_stale_handle_cannot_commit_into_a_recreated_dataset(tmp_path: Path) -> None:
    """A handle of a dataset overwritten since (its next version number free in the new one) refuses to
    commit there, naming both ids; the new dataset is untouched."""
    path = str(tmp_path / "ds")
    old = lc.empty(path)
    old.create_tensor("x", dtype="int64")
    for v in range(4):
        old.x.append(v)
    new = lc.empty(path, overwrite=True)
    new.create_tensor("x", dtype="int64")
    assert new.version < old.version
    with pytest.raises(lc.DatasetReplacedError) as info:
        old.x.append(99)
    assert (info.value.expected_id, info.value.found_id) == (old.id, new.id)
    back = lc.load(path)
    assert (back.id, back.version, len(back.x)) == (new.id, new.version, 0)
    assert sorted(p.name for p in (tmp_path / "ds" / "versions").glob("*.json")) == [
        f"{v:010d}.json" for v in range(new.version + 1)
    ]


def test_stale_handle_cannot_commit_into_a_deleted_dataset(tmp_path: Path) -> None:
    """After lc.delete, a handle's write raises DatasetNotFoundError and leaves nothing at the path."""
    path = str(tmp_path / "ds")
    ds = lc.empty(path)
    ds.create_tensor("x", dtype="int64")
    lc.delete(path)
    with pytest.raises(lc.DatasetNotFoundError, match="was deleted or is being replaced"):
        ds.x.append(1)
    assert not lc.exists(path)
    assert not (tmp_path / "ds" / "versions").exists()


def test_root_marker_names_the_dataset(tmp_path: Path) -> None:
    """The root group's marker (zarr.json, read by plain zarr as attributes) records the dataset id."""
    path = str(tmp_path / "ds")
    ds = lc.empty(path)
    attributes = json.loads((tmp_path / "ds" / "zarr.json").read_bytes())["attributes"]
    assert attributes["lakecompute"] == {"format": 1, "dataset_id": ds.id}
