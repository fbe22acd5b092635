"""Version metadata is frozen: a manifest and its tensor states are values, changed only by building new
ones (a transaction's head), and a manifest file is the same bytes whichever way it is encoded."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.htypes import parse_tensor_spec
from lakecompute.storage import open_backend
from lakecompute.versioned import Manifest, TensorState
from lakecompute.versioned._keys import version_key
from lakecompute.versioned._reads import read_manifest


def _dataset(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path))
    with ds:
        ds.create_tensor("x", dtype="int16")
        ds.create_tensor("img", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["a", "é"])
        ds.create_tensor("g")
    ds.extend(
        {
            "x": np.arange(6, dtype=np.int16).reshape(3, 2),
            "img": [np.zeros((4, 4), np.uint8)] * 3,
            "labels": [0, 1, "é"],
            "g": [1, 2.5, 3],
        }
    )
    ds.info["source"] = "tests ✓"
    return ds


def test_manifest_and_tensor_state_refuse_mutation(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds")
    manifest = read_manifest(open_backend(ds.path), ds.version)
    state = manifest.tensors["x"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.time = 0.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.tensors = {}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.ndim = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.fragments = ()  # type: ignore[misc]
    assert isinstance(state.fragments, tuple)
    assert state.length == 3


def test_a_commit_leaves_the_version_it_built_on_unchanged(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds")
    before = read_manifest(open_backend(ds.path), ds.version)
    ds.extend({"x": np.ones((2, 2), np.int16)}, skip_ok=True)
    after = read_manifest(open_backend(ds.path), ds.version)
    assert after.tensors["x"].length == 5
    assert after.tensors["img"] == before.tensors["img"]  # untouched tensors are carried over as they were


def test_manifest_bytes_are_the_json_of_the_whole_body(tmp_path: Path) -> None:
    """The per-tensor encoding is byte for byte what encoding the whole body at once gives (the format
    existing datasets were written in)."""
    ds = _dataset(tmp_path / "ds")
    backend = open_backend(ds.path)
    for version in (0, 1, ds.version):
        raw = backend.read(version_key(version))
        assert raw is not None
        manifest = Manifest.from_bytes(raw)
        assert manifest.to_bytes() == raw
        body = {
            "format": "lakecompute/1",
            "version": manifest.version,
            "parent": manifest.parent,
            "time": manifest.time,
            "message": manifest.message,
            "dataset_id": manifest.dataset_id,
            "digest": manifest.digest,
            "tensors": {k: t.to_json() for k, t in manifest.tensors.items()},
            "evals": manifest.evals,
        }
        if manifest.info:
            body["info"] = manifest.info
        for key, value in (("branch", manifest.branch), ("line", manifest.line), ("reach", manifest.reach)):
            if value:  # the place in the history: absent in a dataset's first version
                body[key] = value
        assert raw == json.dumps(body, separators=(",", ":")).encode("utf-8")


def test_a_tensor_state_built_anew_is_encoded_anew() -> None:
    spec = parse_tensor_spec("x", "generic", "int8", None, None)
    state = TensorState(spec, {}, 1)
    text = state.entry_text()
    assert text.startswith('"x":')
    renamed = dataclasses.replace(state, spec=dataclasses.replace(spec, name="y"))
    assert renamed.entry_text().startswith('"y":')
    assert state.entry_text() == text
