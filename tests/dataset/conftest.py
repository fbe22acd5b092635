"""Shared helpers for the dataset-layer tests: a small dataset of every htype and content snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.specs import htype_declaration

CLASS_NAMES = ["cat", "dog", "bird"]


def snapshot(ds: Any) -> dict[str, list[Any]]:
    """Return every tensor's samples as plain Python values (lists, str, JSON values)."""
    out: dict[str, list[Any]] = {}
    for name, tensor in ds.tensors.items():
        if len(tensor) == 0:
            out[name] = []
        elif not htype_declaration(tensor.htype).numeric:
            out[name] = list(tensor.data())  # text or json values
        else:
            out[name] = [np.asarray(a).tolist() for a in tensor.numpy(aslist=True)]
    return out


def row(i: int) -> dict[str, Any]:
    """Return sample ``i`` of the ``mixed`` dataset: every value derived from ``i``."""
    return {
        "u": np.array([i % 256, (2 * i) % 256], dtype=np.uint8),
        "img": np.full((4, 5, 3), i % 256, dtype=np.uint8),
        "raw": np.full((3, 3), (7 * i) % 256, dtype=np.uint8),
        "labels": i % len(CLASS_NAMES),
        "meta": {"i": i, "tags": ["a"] * (i % 3)},
        "caption": f"caption {i} é",
        "g": np.arange(i % 4 + 1, dtype=np.int64) + i,
    }


def make_mixed(path: str | Path, n: int = 3) -> lc.Dataset:
    """Create a dataset with one tensor of each kind holding ``row(0..n-1)``."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("u", dtype="uint8")
    ds.create_tensor("img", htype="image", sample_compression="png")
    ds.create_tensor("raw", htype="image")
    ds.create_tensor("labels", htype="class_label", class_names=CLASS_NAMES)
    ds.create_tensor("meta", htype="json")
    ds.create_tensor("caption", htype="text")
    ds.create_tensor("g")
    if n:
        with ds:
            for i in range(n):
                ds.append(row(i))
    return ds


@pytest.fixture
def mixed(tmp_path: Path) -> lc.Dataset:
    """A dataset on disk with tensors of every htype and three committed samples."""
    return make_mixed(tmp_path / "mixed")


@pytest.fixture
def ds_path(tmp_path: Path) -> str:
    """A fresh local dataset location."""
    return str(tmp_path / "ds")
