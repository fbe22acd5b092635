"""When several samples are one array: the rule every read path that hands out a batch asks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lakecompute.errors import RaggedShapeError

__all__ = ["stack_samples", "stacked"]


def stacked(values: Sequence[Any]) -> np.ndarray | None:
    """``values`` as one array when they are numbers (not bools) or numeric arrays, all of one shape;
    else None, and the caller keeps them as a list (a loader's batch) or refuses (`stack_samples`).

    Example:
        >>> stacked([np.zeros(2), np.ones(2)]).shape, stacked([np.zeros(2), np.ones(3)]), stacked(["a"])
        ((2, 2), None, None)
    """
    if not values:
        return np.empty((0,))
    first = values[0]
    if not isinstance(first, (np.ndarray, np.generic, int, float)) or isinstance(first, bool):
        return None
    arrays = [np.asarray(v) for v in values]
    if arrays[0].dtype.kind not in "biufc" or len({a.shape for a in arrays}) > 1:
        return None
    return np.stack(arrays)


def stack_samples(values: Sequence[Any], tensor: str) -> np.ndarray:
    """Samples of ``tensor`` stacked into one array (what ``numpy()`` gives for several samples).

    Raises:
        RaggedShapeError: the samples have different shapes.
    """
    out = stacked(values)
    if out is not None:
        return out
    shapes = {np.shape(v) for v in values}
    if len(shapes) > 1:
        raise RaggedShapeError(
            f"Samples of tensor {tensor!r} have different shapes ({len(shapes)} distinct, e.g. "
            f"{sorted(shapes)[:3]}), so they cannot be stacked into one array. "
            "Use .numpy(aslist=True) to get a list of arrays."
        )
    return np.stack([np.asarray(v) for v in values])  # one shape, but not numbers: as numpy stacks them
