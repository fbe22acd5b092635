"""Everyday verbs on datasets and views: ``filter`` and ``random_split``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.parsing import parse_count

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.datasets._views import DatasetView

__all__ = ["filter_samples", "random_split"]


def filter_samples(data: Dataset | DatasetView, fn_or_mask: Any, options: dict[str, Any]) -> DatasetView:
    """The view of the samples of ``data`` that a mask or a function keeps (see ``Dataset.filter``)."""
    n = len(data)
    if callable(fn_or_mask):
        # The mask is computed in memory by tasks like an eval's (see lakecompute.compute._mask): nothing
        # is written, so nothing is left behind and every node of a cluster can take part.
        from lakecompute.datasets._upward import filter_mask

        mask = filter_mask(data, fn_or_mask, options) if n else np.zeros(0, dtype=bool)
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
    if isinstance(fractions, (str, bytes)) or not isinstance(fractions, Sequence | np.ndarray):
        raise InvalidTypeError(f"random_split() takes a list of fractions or sizes. Got {fractions!r:.80}.")
    values = list(fractions)
    numbers = all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
        for v in values
    )
    ints = numbers and all(isinstance(v, (int, np.integer)) for v in values)
    if ints and values and sum(values) == n and min(values) >= 0:
        return [int(v) for v in values]
    if (
        not values
        or not numbers
        or not all(math.isfinite(v) for v in values)
        or min(values) < 0
        or abs(sum(values) - 1.0) > 1e-9
    ):
        raise InvalidArgumentError(
            f"random_split() takes fractions that add up to 1 (e.g. [0.8, 0.2]) or sizes that add up to "
            f"the number of samples ({n}), all finite and >= 0. Got {values!r:.200}."
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
