"""Tensor names are limited to what every backend can store, refused at create_tensor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc


def test_tensor_name_longest_allowed_compacts(tmp_path: Path) -> None:
    """A 128-character name is accepted and survives compact (which names a folder after it)."""
    name = "t" * 128
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor(name, dtype="int32")
    ds[name].extend(np.arange(5))
    ds.compact()
    assert lc.load(str(tmp_path / "ds"), read_only=True)[name].numpy().tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("length", [129, 300, 5000])
def test_tensor_name_too_long_is_refused(tmp_path: Path, length: int) -> None:
    """A name over 128 characters raises InvalidArgumentError saying the limit; nothing is created."""
    ds = lc.empty(str(tmp_path / "ds"))
    with pytest.raises(lc.InvalidArgumentError, match=rf"\({length} characters\).*at most 128.*shorter name"):
        ds.create_tensor("x" * length)
    assert list(lc.load(str(tmp_path / "ds"), read_only=True).tensors) == []


@pytest.mark.parametrize(
    "name", ["", "a/b", "a\x00b", ".", "..", ".hidden", "@x", "-x", "a b", "a\\b", "é", "a:b", "a.b"]
)
def test_tensor_name_unstorable_characters_refused(tmp_path: Path, name: str) -> None:
    """Names with separators, NUL, dots, a leading '@' or '-' or non-ASCII are refused with what to use."""
    ds = lc.empty(str(tmp_path / "ds"))
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Invalid tensor name .*use letters, digits, '_' and '-'"
    ):
        ds.create_tensor(name)
    assert list(ds.tensors) == []
