"""Bad inputs get a LakeComputeError saying what to do: NUL and over-long paths, a 0-d array as input,
a manifest that is a directory."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

OPENERS: list[Callable[[str], Any]] = [lc.load, lc.empty, lc.exists, lc.delete]


@lc.compute
def write_one(sample_in: Any, sample_out: Any) -> None:
    """Write 1 to x."""
    sample_out.x.append(1)


@pytest.mark.parametrize("opener", OPENERS, ids=lambda f: f.__name__)
def test_location_with_nul_is_refused(tmp_path: Path, opener: Callable[[str], Any]) -> None:
    """A path with a NUL character raises InvalidArgumentError saying to remove it."""
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Invalid dataset path 'x\\x00y': it contains a NUL.*Remove it"
    ):
        opener("x\x00y")


@pytest.mark.parametrize("opener", OPENERS, ids=lambda f: f.__name__)
def test_location_too_long_is_refused(tmp_path: Path, opener: Callable[[str], Any]) -> None:
    """A 5,000-character path raises InvalidArgumentError with the limit, and creates nothing."""
    path = str(tmp_path / ("a" * 200)) + "/b" * 2400
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Dataset path too long .*at most 3776 fit.*shorter path"
    ):
        opener(path)
    assert not (tmp_path / ("a" * 200)).exists()


def test_location_with_long_folder_name_is_refused(tmp_path: Path) -> None:
    """A folder name over 255 bytes is refused before any file is touched."""
    with pytest.raises(
        lc.InvalidArgumentError, match=r"a folder name in it is 300 bytes, at most 255 fit in one name"
    ):
        lc.empty(str(tmp_path / ("a" * 300)))


def test_location_s3_prefix_too_long_is_refused() -> None:
    """An s3:// prefix leaving no room for the dataset's keys (S3 keys hold 1024 bytes) is refused."""
    with pytest.raises(lc.InvalidArgumentError, match=r"its key prefix is 900 bytes, at most 704 fit"):
        lc.exists("s3://bucket/" + "k" * 900)


@pytest.mark.parametrize("bad", [5, b"/tmp/x", None])
def test_location_of_wrong_type_is_refused(bad: Any) -> None:
    """A path that is not str or os.PathLike raises InvalidTypeError naming what was given."""
    with pytest.raises(lc.InvalidTypeError, match=r"Expected a dataset path as str"):
        lc.load(bad)


def test_eval_zero_d_array_input_is_refused(tmp_path: Path) -> None:
    """A 0-d array as data_in raises InvalidTypeError saying to pass a 1-d array or a list."""
    out = lc.empty(str(tmp_path / "out"))
    out.create_tensor("x", dtype="int64")
    with pytest.raises(
        lc.InvalidTypeError, match=r"data_in is a 0-d array \(array\(5\)\).*Pass a 1-d array or a list"
    ):
        write_one().eval(np.array(5), out, progressbar=False)
    assert len(lc.load(str(tmp_path / "out"), read_only=True).x) == 0


@pytest.mark.parametrize("key", ["versions/0000000002.json", "versions/LATEST"])
def test_manifest_that_is_a_directory_is_corrupt(tmp_path: Path, key: str) -> None:
    """A version file replaced by a directory raises DatasetCorruptError naming it, not IsADirectoryError.

    ``versions/LATEST`` is a hint that opening a dataset with branch refs does not need (it loads and
    commits); it is read for a dataset without refs, written before branches (its ``refs/`` removed here).
    """
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("x", dtype="int64")
    ds.x.append(1)
    target = tmp_path / "ds" / key
    os.remove(target)
    target.mkdir()
    if key.endswith("LATEST"):
        again = lc.load(str(tmp_path / "ds"))
        again.x.append(2)
        assert lc.load(str(tmp_path / "ds")).x.numpy().tolist() == [1, 2]
        shutil.rmtree(tmp_path / "ds" / "refs")
    with pytest.raises(
        lc.DatasetCorruptError, match=rf"cannot read '{key}' \(it is a directory.*Restore the file"
    ) as info:
        lc.load(str(tmp_path / "ds"))
    assert info.value.file == key
    shutil.rmtree(target)
