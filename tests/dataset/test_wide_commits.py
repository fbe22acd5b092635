"""Commits into many tensors: their buffers are written side by side (each tensor its own slot), and
what a fresh handle reads back is what was written, in order, for every kind of tensor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import lakecompute as lc


def _wide(path: Path, n: int) -> lc.Dataset:
    ds = lc.empty(str(path))
    with ds:
        for i in range(n):
            ds.create_tensor(f"x{i}", dtype="int32")
        ds.create_tensor("img", htype="image", sample_compression="png")
        ds.create_tensor("txt", htype="text")
        ds.create_tensor("ragged")
    return ds


def _row(k: int, n: int) -> dict[str, list[object]]:
    row: dict[str, list[object]] = {f"x{i}": [np.int32(k * 100 + i)] for i in range(n)}
    row["img"] = [np.full((3, 4), k, np.uint8)]
    row["txt"] = [f"row {k}"]
    row["ragged"] = [np.arange(k + 1, dtype=np.float32)]
    return row


def test_single_commits_into_many_tensors_read_back(tmp_path: Path) -> None:
    ds = _wide(tmp_path / "ds", 12)
    for k in range(5):
        ds.extend(_row(k, 12))
    with ds:
        for k in range(5, 8):
            ds.extend(_row(k, 12))
    again = lc.load(ds.path)
    assert again.version == ds.version
    for i in range(12):
        assert again[f"x{i}"].numpy().tolist() == [k * 100 + i for k in range(8)]
    assert [int(a[0, 0]) for a in again.img.numpy(aslist=True)] == list(range(8))
    assert again.txt.text() == [f"row {k}" for k in range(8)]
    assert [len(a) for a in again.ragged.numpy(aslist=True)] == [k + 1 for k in range(8)]
    assert again.ragged.dtype == np.float32


def test_a_commit_into_one_of_many_tensors_changes_only_that_one(tmp_path: Path) -> None:
    ds = _wide(tmp_path / "ds", 20)
    ds.extend(_row(0, 20))
    before = {name: t.meta for name, t in lc.load(ds.path).tensors.items()}
    ds.extend({"x3": [np.int32(-1)]}, skip_ok=True)
    after = lc.load(ds.path)
    assert after.x3.numpy().tolist() == [3, -1]
    assert {name: t.meta for name, t in after.tensors.items() if name != "x3"} == {
        name: meta for name, meta in before.items() if name != "x3"
    }
    assert len(after.x0) == 1


@lc.compute
def _spread(sample_in: Any, sample_out: Any) -> None:
    n = int(sample_in)
    sample_out.append({f"y{i}": np.full(i + 1, n * 10 + i, np.int64) for i in range(6)})


def test_an_eval_writes_many_tensors_from_worker_processes(tmp_path: Path) -> None:
    out = lc.empty(str(tmp_path / "out"))
    with out:
        for i in range(6):
            out.create_tensor(f"y{i}")
    _spread().eval(list(range(40)), out, num_workers=2, scheduler="processed", progressbar=False)
    again = lc.load(out.path)
    for i in range(6):
        assert again[f"y{i}"].numpy().tolist() == [[n * 10 + i] * (i + 1) for n in range(40)]
        assert again[f"y{i}"].ndim == 1
