"""Helpers shared by the transform tests: schedulers to run with, small datasets, snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import lakecompute as lc
from lakecompute.specs import htype_declaration

DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@dataclass(frozen=True)
class Sched:
    """A scheduler and a worker count to run an eval with."""

    name: str
    num_workers: int

    @property
    def kw(self) -> dict[str, Any]:
        """The keyword arguments of ``eval`` that select this scheduler (progress bar off)."""
        return {"scheduler": self.name, "num_workers": self.num_workers, "progressbar": False}

    def __str__(self) -> str:
        return f"{self.name}-{self.num_workers}"


SCHEDULERS = [Sched("serial", 0), Sched("serial", 2), Sched("threaded", 2), Sched("processed", 2)]


def image(i: int, shape: tuple[int, ...] = (8, 6)) -> np.ndarray:
    """A small uint8 image whose pixels depend on ``i`` and on their position (so flips show)."""
    size = int(np.prod(shape))
    return ((np.arange(size, dtype=np.int64).reshape(shape) * 7 + i * 13) % 256).astype(np.uint8)


def make_images(path: Path, n: int = 12, shape: tuple[int, ...] = (8, 6)) -> lc.Dataset:
    """An MNIST-like dataset: ``images`` (png) and ``labels`` (class_label with digit names)."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    ds.create_tensor("labels", htype="class_label", class_names=DIGITS)
    if n:
        with ds:
            for i in range(n):
                ds.append({"images": image(i, shape), "labels": i % len(DIGITS)})
    return ds


def reference(path: Path, template: lc.Dataset, rows: list[dict[str, Any]]) -> lc.Dataset:
    """The expected result, written in a plain loop: ``rows`` appended to a dataset like ``template``."""
    ref = lc.like(str(path), template, overwrite=True)
    if rows:
        with ref:
            for row in rows:
                ref.append(row)
    return ref


def snapshot(ds: Any) -> dict[str, dict[str, Any]]:
    """Everything a user can compare of a dataset: per tensor htype, dtype, shape, class names, values."""
    out: dict[str, dict[str, Any]] = {}
    for name, tensor in ds.tensors.items():
        declared = htype_declaration(tensor.htype)
        if len(tensor) == 0:
            values: list[Any] = []
        elif not declared.numeric:
            values = list(tensor.data())  # text or json values
        else:
            values = [np.asarray(a).tolist() for a in tensor.numpy(aslist=True)]
        out[name] = {
            "htype": tensor.htype,
            "dtype": None if tensor.dtype is None else str(tensor.dtype),
            "shape": tuple(tensor.shape),
            "class_names": list(tensor.info.get("class_names") or []) if declared.class_named else None,
            "len": len(tensor),
            "values": values,
        }
    return out


def assert_same(ds: Any, ref: Any) -> None:
    """Assert that two datasets hold the same tensors with the same dtypes, shapes, class names and values."""
    got, want = snapshot(ds), snapshot(ref)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name


def read_lines(path: Path) -> list[str]:
    """The lines of a file appended to by workers (empty if nobody wrote it)."""
    return path.read_text().splitlines() if path.exists() else []
