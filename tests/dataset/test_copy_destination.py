"""Copies resolve their destination before deleting anything: a destination that is, is inside or
contains the source (through a symbolic link, another spelling, a nested path) or holds the same dataset is
refused, and the source stays whole (with overwrite=True a copy onto a link to its source used to wipe it)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

N = 12


def _source(path: Path | str) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("img", htype="image", sample_compression="png")
        ds.extend({"x": np.arange(N), "img": [np.full((4, 4), i, np.uint8) for i in range(N)]})
    return ds


def _intact(path: Path | str, version: int) -> None:
    again = lc.load(str(path))
    assert again.version == version
    np.testing.assert_array_equal(again.x.numpy(), np.arange(N))
    assert int(again.img[N - 1].numpy()[0, 0]) == N - 1
    assert len(again.log()) == version + 1


COPIES: dict[str, Callable[[lc.Dataset, str], Any]] = {
    "lc.copy": lambda ds, dest: lc.copy(ds, dest, overwrite=True, progressbar=False),
    "view.save": lambda ds, dest: ds[0:5].save(dest, overwrite=True, progressbar=False),
    "lc.like": lambda ds, dest: lc.like(dest, ds, overwrite=True),
}


@pytest.mark.parametrize("how", sorted(COPIES))
def test_copy_onto_a_symlink_to_the_source_is_refused(tmp_path: Path, how: str) -> None:
    """dest is a symbolic link to the source's folder: refused naming both real paths; the source whole."""
    ds = _source(tmp_path / "src")
    link = tmp_path / "link"
    os.symlink(tmp_path / "src", link)
    with pytest.raises(lc.InvalidArgumentError, match=r"the destination is the source") as info:
        COPIES[how](ds, str(link))
    assert str(tmp_path / "src") in str(info.value)
    _intact(tmp_path / "src", ds.version)


@pytest.mark.parametrize("how", sorted(COPIES))
def test_copy_into_a_folder_inside_the_source_is_refused(tmp_path: Path, how: str) -> None:
    """dest inside the source's folder (also reached through a link to it) is refused."""
    ds = _source(tmp_path / "src")
    os.symlink(tmp_path / "src", tmp_path / "link")
    for dest in (tmp_path / "src" / "sub", tmp_path / "link" / "tensors" / "new"):
        with pytest.raises(lc.InvalidArgumentError, match=r"the destination is inside the source"):
            COPIES[how](ds, str(dest))
        assert not dest.exists()
    _intact(tmp_path / "src", ds.version)


def test_copy_onto_a_folder_that_contains_the_source_is_refused(tmp_path: Path) -> None:
    """dest is a folder holding the source (through a link too): refused before anything is deleted."""
    ds = _source(tmp_path / "outer" / "src")
    os.symlink(tmp_path / "outer", tmp_path / "outer-link")
    for dest in (tmp_path / "outer", tmp_path / "outer-link"):
        with pytest.raises(lc.InvalidArgumentError, match=r"the destination contains the source"):
            lc.copy(ds, str(dest), overwrite=True, progressbar=False)
    _intact(tmp_path / "outer" / "src", ds.version)


def test_copy_onto_the_source_spelled_otherwise_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path, a trailing slash and file:// all name the source: refused."""
    ds = _source(tmp_path / "src")
    monkeypatch.chdir(tmp_path)
    for dest in ("src", "./src/", f"file://{tmp_path / 'src'}", str(tmp_path / "x" / ".." / "src")):
        with pytest.raises(lc.InvalidArgumentError, match=r"the destination is the source"):
            lc.copy(ds, dest, overwrite=True, progressbar=False)
    _intact(tmp_path / "src", ds.version)


def test_copy_onto_a_cp_r_copy_of_the_source_is_refused_naming_delete(tmp_path: Path) -> None:
    """A folder holding the same dataset (same id: a cp -r copy) is refused, pointing at lc.delete."""
    ds = _source(tmp_path / "src")
    shutil.copytree(tmp_path / "src", tmp_path / "twin")
    with pytest.raises(lc.InvalidArgumentError, match=r"holds the same dataset \(id ") as info:
        lc.copy(ds, str(tmp_path / "twin"), overwrite=True, progressbar=False)
    assert "lc.delete(" in str(info.value)
    _intact(tmp_path / "twin", ds.version)
    lc.delete(str(tmp_path / "twin"))
    copied = lc.copy(ds, str(tmp_path / "twin"), progressbar=False)
    assert copied.id != ds.id
    np.testing.assert_array_equal(copied.x.numpy(), np.arange(N))


def test_copy_next_to_the_source_still_works(tmp_path: Path) -> None:
    """A sibling whose name starts with the source's (src2 beside src) is apart: the copy is made."""
    ds = _source(tmp_path / "src")
    (tmp_path / "src2").mkdir()
    copied = lc.copy(ds, str(tmp_path / "src2"), overwrite=True, progressbar=False)
    np.testing.assert_array_equal(copied.x.numpy(), np.arange(N))
    _intact(tmp_path / "src", ds.version)


def test_memory_copy_onto_itself_or_inside_is_refused() -> None:
    """mem:// locations: the same name (however spelled) or a name under it is refused."""
    ds = _source("mem://copy-dest-src")
    for dest in ("mem://copy-dest-src", "mem://copy-dest-src/", "mem://copy-dest-src/inner"):
        with pytest.raises(lc.InvalidArgumentError, match=r"the destination is (inside )?the source"):
            lc.copy(ds, dest, overwrite=True, progressbar=False)
    _intact("mem://copy-dest-src", ds.version)
    lc.copy(ds, "mem://copy-dest-src2", overwrite=True, progressbar=False)
