"""Dataset identity: a random id made at creation, kept by every version, new when the path is remade."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import lakecompute as lc
from lakecompute.storage import Manifest, open_backend, read_manifest, version_key


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


def test_legacy_dataset_id_derived_then_recorded(tmp_path: Path) -> None:
    """A dataset whose manifests predate ids gets one derived from its first manifest, recorded by the
    next commit, and kept after vacuum removes that first manifest."""
    path = str(tmp_path / "old")
    ds = lc.empty(path)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend([1, 2])
    for v in range(ds.version + 1):  # rewrite the manifests as a version without ids wrote them
        key = Path(path) / version_key(v)
        body = json.loads(key.read_bytes())
        del body["dataset_id"]
        key.write_bytes(json.dumps(body).encode())
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
        key = Path(path) / version_key(0)
        body = json.loads(key.read_bytes())
        del body["dataset_id"]
        key.write_bytes(json.dumps(body).encode())
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
