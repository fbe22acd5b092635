"""Normalising user indices (ints, slices, lists, boolean masks) against a length."""

from __future__ import annotations

from typing import Any

import numpy as np

from lakecompute.errors import InvalidTypeError, SampleIndexError

__all__ = ["Positions", "compose", "parse_index"]

#: A selection of positions: one position (an int), a ``range`` (slices stay lazy), or an array.
Positions = int | range | np.ndarray


def _check_int(i: int, length: int, what: str) -> int:
    j = i + length if i < 0 else i
    if not 0 <= j < length:
        raise SampleIndexError(f"Index {i} is out of range for {what} of length {length}.")
    return j


def parse_index(key: Any, length: int, what: str = "a dataset") -> Positions:
    """Turn ``key`` into positions within ``0..length``."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return _check_int(int(key), length, what)
    if isinstance(key, slice):
        return range(*key.indices(length))
    if isinstance(key, range):
        key = np.asarray(key, dtype=np.int64)
    if isinstance(key, (list, tuple, np.ndarray)):
        arr = np.asarray(key)
        if arr.dtype == bool:
            if arr.shape != (length,):
                raise SampleIndexError(
                    f"A boolean mask must have one entry per sample: expected {length}, "
                    f"got shape {arr.shape}."
                )
            return np.flatnonzero(arr)
        if arr.size == 0:
            return np.empty(0, dtype=np.int64)
        if arr.dtype.kind not in "iu" or arr.ndim != 1:
            raise InvalidTypeError(
                "Expected an int, a slice, a list of ints or a boolean mask. "
                f"Got {arr.dtype} of shape {arr.shape}."
            )
        out = arr.astype(np.int64)
        out = np.where(out < 0, out + length, out)
        bad = (out < 0) | (out >= length)
        if bad.any():
            first = int(arr[np.argmax(bad)])
            raise SampleIndexError(f"Index {first} is out of range for {what} of length {length}.")
        return out
    raise InvalidTypeError(
        f"Expected an int, a slice, a list of ints or a boolean mask as index. Got {type(key).__name__}."
    )


def compose(outer: range | np.ndarray, key: Any, what: str = "a view") -> Positions:
    """Index into a selection: positions of the underlying data."""
    inner = parse_index(key, len(outer), what)
    if isinstance(inner, int):
        return int(outer[inner])
    if isinstance(outer, range) and isinstance(inner, range):
        return outer[inner.start : inner.stop : inner.step] if len(inner) else range(0)
    return np.asarray(outer, dtype=np.int64)[np.asarray(inner, dtype=np.int64)]
