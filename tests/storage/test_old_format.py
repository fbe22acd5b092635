"""Datasets written before issue 39 open as they are: every version, branch, tag and eval record of one
written by that tree (``tests/storage/old_format``, see its ``make_dataset.py``) reads as that tree read
it, and writing to it migrates it one version at a time (its files are never rewritten)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import open_backend
from lakecompute.versioned._keys import version_key
from lakecompute.versioned._reads import read_header, read_manifest

HERE = Path(__file__).resolve().parent / "old_format"
EXPECTED: dict[str, Any] = json.loads((HERE / "expected.json").read_text())


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the committed dataset (the test data itself is never written)."""
    path = tmp_path / "old"
    shutil.copytree(HERE / "dataset", path)
    return path


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((path / "versions").glob("*.json"))}


def test_every_version_of_an_old_dataset_reads_as_it_did(old: Path) -> None:
    """Each version's tensors, info, branch, parents and message; the refs and the id."""
    for version, want in EXPECTED["versions"].items():
        ds = lc.load(str(old), version=int(version))
        assert ds.id == EXPECTED["id"]
        assert (ds.x.numpy().tolist() if "x" in ds.tensors else None) == want["x"], version
        assert (ds.name.text() if "name" in ds.tensors else None) == want["name"], version
        assert dict(ds.info) == want["info"]
        assert len(ds.digest) == 64  # made from the content: the old manifests record none
    log = {e["version"]: e for e in lc.load(str(old)).log(all_branches=True)}
    assert sorted(log) == sorted(int(v) for v in EXPECTED["versions"])
    for version, want in EXPECTED["versions"].items():
        entry = log[int(version)]
        assert (entry["branch"], entry["parents"], entry["message"]) == (
            want["branch"],
            want["parents"],
            want["message"],
        )
    refs = EXPECTED["refs"]
    assert lc.load(str(old)).version == refs["main"]
    assert lc.load(str(old), branch="exp").version == refs["exp"]
    assert lc.load(str(old), version="v1").version == refs["v1"]
    evals = [e["eval"] for e in log.values() if "eval" in e]
    assert [(e["label"], e["status"], e["done"]) for e in evals] == [("square", "done", 3)]


def test_the_digest_of_an_old_version_is_stable(old: Path) -> None:
    """Made from the content, the same at every read and in every process (a pickled handle checks it)."""
    import pickle

    ds = lc.load(str(old), version=EXPECTED["refs"]["v1"])
    again = pickle.loads(pickle.dumps(ds))
    assert again.digest == ds.digest == lc.load(str(old), version="v1").digest
    assert lc.load(str(old)).digest != ds.digest


def test_writing_to_an_old_dataset_migrates_it_one_version_at_a_time(old: Path) -> None:
    """Commits on main and on exp land in the newer form (digest recorded); the old files stay byte for
    byte as they were; every version, old and new, reads; branch, merge, restore and vacuum work."""
    before = _files(old)
    main = lc.load(str(old))
    main.append({"x": 8, "name": "new on main"})
    exp = lc.load(str(old), branch="exp")
    exp.x[1] = -1
    backend = open_backend(str(old))
    for ds in (main, exp):
        stored = json.loads((old / version_key(ds.version)).read_bytes())
        assert stored["digest"] == ds.digest
        assert read_header(backend, ds.version).digest == ds.digest
    after = _files(old)
    assert {name: after[name] for name in before} == before
    assert main.merge("exp") == main.version
    merged = lc.load(str(old))
    assert merged.x.numpy().tolist() == [0, -1, -2, 3, 4, 1, 4, 9, 7, 8, 100]  # main's new rows first
    assert merged.name.text()[-2:] == ["new on main", "on exp"]
    merged.restore("v1")
    assert lc.load(str(old)).x.numpy().tolist() == [0, 1, -2, 3, 4]
    for version, want in EXPECTED["versions"].items():
        if want["x"] is not None:
            assert lc.load(str(old), version=int(version)).x.numpy().tolist() == want["x"]
    lc.load(str(old)).vacuum(grace_seconds=0)
    assert read_manifest(backend, EXPECTED["refs"]["v1"]).tensors["x"].length == 5
    assert np.array_equal(lc.load(str(old), version="v1").x.numpy(), [0, 1, -2, 3, 4])
