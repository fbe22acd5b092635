"""A loader state is bound to what it read: the dataset (by id), its version and the view's selection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

N = 40


def _numbers(path: Path, offset: int = 0) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(offset, offset + N))
    return ds


def _state_after(data: Any, steps: int = 2) -> dict[str, Any]:
    loader = data.batches(4, shuffle=True, seed=1)
    for _, _batch in zip(range(steps), loader, strict=False):
        pass
    state: dict[str, Any] = json.loads(json.dumps(loader.state_dict()))
    return state


def _rest(data: Any, state: dict[str, Any]) -> list[int]:
    loader = data.batches(4, shuffle=True, seed=1)
    loader.load_state_dict(state)
    return [int(v) for b in loader for v in b["x"]]


def test_random_split_state_refused_by_the_other_split(tmp_path: Path) -> None:
    """A state saved on train of random_split([0.5, 0.5]) does not load into a loader over val (same
    length): InvalidArgumentError naming both selections; the same split made again accepts it."""
    ds = _numbers(tmp_path / "ds")
    train, val = ds.random_split([0.5, 0.5], seed=7)
    assert len(train) == len(val)
    state = _state_after(train)
    loader = val.batches(4, shuffle=True, seed=1)
    with pytest.raises(lc.InvalidArgumentError) as info:
        loader.load_state_dict(state)
    message = str(info.value)
    assert f"selection={state['dataset']['selection']!r}" in message
    assert f"(this loader: {loader.state_dict()['dataset']['selection']!r})" in message
    assert state["dataset"]["selection"].startswith("20 rows #")
    again, _ = lc.load(str(tmp_path / "ds")).random_split([0.5, 0.5], seed=7)
    rest = _rest(again, state)
    assert len(rest) == 20 - 8
    assert set(rest) <= {int(v) for v in train.x.numpy()}


def test_filter_state_refused_by_another_filter(tmp_path: Path) -> None:
    """Two filter views of the same length (even and odd x): a state of one is refused by the other."""
    ds = _numbers(tmp_path / "ds")
    even = ds.filter(ds.x.numpy() % 2 == 0)
    odd = ds.filter(ds.x.numpy() % 2 == 1)
    state = _state_after(even)
    with pytest.raises(lc.InvalidArgumentError, match="selection="):
        _rest(odd, state)
    assert set(_rest(ds.filter(ds.x.numpy() % 2 == 0), state)) <= set(range(0, N, 2))


def test_slice_state_refused_by_another_slice(tmp_path: Path) -> None:
    """ds[0:20] and ds[20:40]: same length, other rows; the state names the slice in words."""
    ds = _numbers(tmp_path / "ds")
    state = _state_after(ds[0:20])
    assert state["dataset"]["selection"] == "rows 0:20"
    with pytest.raises(lc.InvalidArgumentError, match=r"selection='rows 0:20' \(this loader: 'rows 20:40'\)"):
        _rest(ds[20:40], state)


def test_state_of_a_recreated_dataset_is_refused(tmp_path: Path) -> None:
    """The dataset made again at the path (same version number and length, other content): refused,
    naming the dataset ids."""
    old = _numbers(tmp_path / "ds")
    state = _state_after(old)
    new = _numbers(tmp_path / "ds", offset=100)
    assert (new.version, len(new)) == (old.version, len(old))
    with pytest.raises(lc.InvalidArgumentError, match=rf"dataset_id={old.id!r} \(this loader: {new.id!r}\)"):
        _rest(new, state)


def test_state_of_a_moved_dataset_loads(tmp_path: Path) -> None:
    """The same dataset under another path (a copied folder: same id) still accepts its state."""
    import shutil

    ds = _numbers(tmp_path / "ds")
    state = _state_after(ds)
    shutil.copytree(tmp_path / "ds", tmp_path / "moved")
    moved = lc.load(str(tmp_path / "moved"))
    assert moved.id == ds.id
    full = _rest(ds, state)
    assert _rest(moved, state) == full
    assert len(full) == N - 8


def test_loader_workers_refuse_a_replaced_dataset(tmp_path: Path) -> None:
    """A loader built before its dataset was made again reads nothing of the new one: its workers'
    snapshot raises DatasetReplacedError."""
    old = _numbers(tmp_path / "ds")
    loader = old.batches(4)
    _numbers(tmp_path / "ds", offset=100)
    with pytest.raises(lc.DatasetReplacedError, match="expected dataset id"):
        next(iter(loader))
