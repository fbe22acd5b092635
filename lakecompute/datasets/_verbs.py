"""Everyday verbs on datasets and views: ``filter``, ``random_split`` and the dataset's own ``info``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidTypeError, ReadOnlyError
from lakecompute.parsing import parse_count

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.datasets._views import DatasetView

__all__ = ["DatasetInfo", "filter_samples", "random_split"]


class DatasetInfo(Mapping[str, Any]):
    """A dataset's own metadata (``ds.info``): JSON values by key, read like a dict or by attribute.

    Setting a key (``ds.info["source"] = "COCO"``), ``update(...)`` and ``del`` write a new version of
    the dataset (or join its ``with`` block). A view's info is its dataset's, read-only.
    """

    def __init__(self, values: Mapping[str, Any], write: Callable[[dict[str, Any]], None] | None) -> None:
        self._values = dict(values)
        self._write = write

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"Dataset info has no {name!r}; it has {sorted(self._values)!r}.") from None

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __delitem__(self, key: str) -> None:
        values = dict(self._values)
        del values[key]
        self._store(values)

    def update(self, values: Mapping[str, Any] | None = None, **more: Any) -> None:
        """Set several keys at once, in one commit."""
        merged = {**self._values, **dict(values or {}), **more}
        for key in merged:
            if not isinstance(key, str):
                raise InvalidTypeError(f"Dataset info keys are strings. Got {key!r}.")
        try:
            json.dumps(merged, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"Dataset info holds JSON values (str, numbers, bools, None, lists, dicts): {exc}."
            ) from exc
        self._store(merged)

    def _store(self, values: dict[str, Any]) -> None:
        if self._write is None:
            raise ReadOnlyError("A view's info is its dataset's and is read-only; set it on the dataset.")
        self._write(values)
        self._values = values

    def __repr__(self) -> str:
        return f"DatasetInfo({self._values!r})"


def keep_row(sample_in: Any, sample_out: Any, fn: Callable[[Any], Any]) -> None:
    """The compute function of ``filter``: whether ``fn`` keeps the row (named for the progress bar)."""
    sample_out.append({"keep": bool(fn(sample_in))})


def _mask_of(data: Dataset | DatasetView, fn: Callable[[Any], Any], options: dict[str, Any]) -> np.ndarray:
    """``fn(row)`` for every row, computed by an eval (in parallel with ``num_workers``)."""
    import lakecompute as lc

    scratch = tempfile.mkdtemp(prefix="lakecompute-filter-")
    try:
        out = lc.empty(os.path.join(scratch, "mask"))
        out.create_tensor("keep", dtype="bool")
        # Over the rows the filter is defined on (len(data): every tensor holds them), as a view, so a
        # dataset whose tensors differ in length is filtered rather than refused as eval input.
        lc.compute(keep_row)(fn=fn).eval(data[: len(data)], out, **options)
        mask: np.ndarray = lc.load(os.path.join(scratch, "mask")).keep.numpy().astype(bool)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return mask


def filter_samples(data: Dataset | DatasetView, fn_or_mask: Any, options: dict[str, Any]) -> DatasetView:
    """The view of the samples of ``data`` that a mask or a function keeps (see ``Dataset.filter``)."""
    n = len(data)
    if callable(fn_or_mask):
        mask = _mask_of(data, fn_or_mask, options) if n else np.zeros(0, dtype=bool)
    else:
        mask = np.asarray(fn_or_mask)
        if mask.dtype != np.bool_ or mask.shape != (n,):
            raise InvalidArgumentError(
                f"filter() takes a function of a row, or a boolean mask of one value per sample ({n}). "
                f"Got {'an array of dtype ' + str(mask.dtype) + ' and shape ' + str(mask.shape)}."
            )
    view: DatasetView = data[np.flatnonzero(mask)]
    return view


def _sizes(fractions: Sequence[float], n: int) -> list[int]:
    values = list(fractions)
    ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values)
    if ints and values and sum(values) == n and min(values) >= 0:
        return [int(v) for v in values]
    if not values or min(values) < 0 or abs(sum(values) - 1.0) > 1e-9:
        raise InvalidArgumentError(
            f"random_split() takes fractions that add up to 1 (e.g. [0.8, 0.2]) or sizes that add up to "
            f"the number of samples ({n}). Got {values!r}."
        )
    sizes = [int(np.floor(f * n)) for f in values]
    for i in range(n - sum(sizes)):  # the remainder, one each, to the first splits (as torch does)
        sizes[i % len(sizes)] += 1
    return sizes


def random_split(data: Dataset | DatasetView, fractions: Sequence[float], seed: int) -> list[DatasetView]:
    """Views of disjoint random subsets of ``data`` (see ``Dataset.random_split``)."""
    seed = parse_count("seed", seed)
    n = len(data)
    sizes = _sizes(fractions, n)
    order = np.random.default_rng(seed).permutation(n)
    out = []
    start = 0
    for size in sizes:
        out.append(data[np.sort(order[start : start + size])])
        start += size
    return out
