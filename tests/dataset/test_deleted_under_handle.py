"""A dataset deleted while a handle still writes to it stays deleted: the handle's commit is refused with
DatasetNotFoundError, and what its writes made again at the path (segment folders, their zarr metadata,
its lease) is removed with it, so that a dataset can be created there at once. Files of anyone else's
found at the path stay, as everywhere (overwrite-safety)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import open_backend
from tests.helpers import make_numbers


@lc.compute
def _double(x: int, out: Any) -> None:
    out.x.append(np.int64(2 * x))


def _write_in_a_block(ds: lc.Dataset) -> None:
    with ds:
        ds.x.extend(np.arange(300_000, dtype=np.int64))  # several chunks: new chunk folders made


def _write_one_call(ds: lc.Dataset) -> None:
    ds.x.append(np.int64(5))


def _eval_in_process(ds: lc.Dataset) -> None:
    _double().eval(list(range(2_000)), ds, num_workers=0, progressbar=False)


def _eval_on_workers(ds: lc.Dataset) -> None:
    _double().eval(list(range(2_000)), ds, num_workers=2, progressbar=False)


WRITES = {
    "with-block": _write_in_a_block,
    "one-call": _write_one_call,
    "eval-0-workers": _eval_in_process,
    "eval-2-workers": _eval_on_workers,
}


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
def test_writing_on_after_a_delete_leaves_nothing_at_the_path(tmp_path: Path, write: str) -> None:
    path = tmp_path / "ds"
    ds = make_numbers(path, 3)
    shutil.rmtree(path)  # deleted from outside, under the open handle
    with pytest.raises(lc.DatasetNotFoundError, match="was deleted or is being replaced"):
        WRITES[write](ds)
    assert not path.exists()
    fresh = make_numbers(path, 2)
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), [0, 1])
    assert list(fresh.tensors) == ["x"]


def test_files_put_at_the_path_after_the_delete_stay(tmp_path: Path) -> None:
    """Only what the handle wrote goes: someone's file put at the path meanwhile, and its folder, stay."""
    path = tmp_path / "ds"
    ds = make_numbers(path, 3)
    shutil.rmtree(path)
    path.mkdir()
    (path / "notes.txt").write_bytes(b"mine")
    with pytest.raises(lc.DatasetNotFoundError):
        _write_in_a_block(ds)
    assert sorted(p.name for p in path.iterdir()) == ["notes.txt"]
    assert (path / "notes.txt").read_bytes() == b"mine"


@pytest.mark.parametrize("url", ["mem://deleted-under-handle"])
def test_writing_on_after_a_delete_leaves_no_key_in_memory(url: str) -> None:
    ds = make_numbers(url, 3)
    backend = open_backend(url)
    backend.delete_tree("")
    with pytest.raises(lc.DatasetNotFoundError):
        _write_in_a_block(ds)
    assert backend.list("") == []
