"""When several samples are one array: the rule every read path that hands out a batch asks."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lakecompute.errors import RaggedShapeError

__all__ = ["StackedList", "Staging", "stack_samples", "stacked", "stacked_list"]


def stacked(values: Sequence[Any], staging: Staging | None = None) -> np.ndarray | None:
    """``values`` as one array when they are numbers (not bools), or numeric arrays all of one shape and
    one dtype (stacking changes no value's dtype: in an eval the first value decides a new tensor's);
    else None, and the caller keeps them as a list (a loader's batch), checks them one by one (the eval
    drain) or refuses (`stack_samples`). Arrays are stacked into the array ``staging`` gives for their
    shape and dtype, where it gives one (a worker's page-locked memory, see
    `lakecompute.schedulers.pinned_staging`).

    Example:
        >>> stacked([np.zeros(2), np.ones(2)]).shape, stacked([np.zeros(2), np.ones(3)]), stacked(["a"])
        ((2, 2), None, None)
    """
    if not values:
        return np.empty((0,))
    first = values[0]
    if isinstance(first, np.ndarray):
        return _stack_arrays(values, first, staging) if first.dtype.kind in "biufc" else None
    if not isinstance(first, (np.generic, int, float)) or isinstance(first, (bool, str)):
        return None
    try:
        arr = np.asarray(values)
    except ValueError:  # an array among the numbers: not one shape
        return None
    return arr if arr.ndim == 1 and arr.dtype.kind in "biufc" else None


_SHAPE, _DTYPE = operator.attrgetter("shape"), operator.attrgetter("dtype")


class StackedList(list):  # type: ignore[type-arg]
    """Samples that stack, stacked already: a list of the rows of their stacked array, which
    `stack_samples` hands out as it is, while the list still holds those rows.

    An eval's reader threads stack a batch's images so that the thread running the function does not:
    there, stacking 64 224x224 images copies 9.6 MB and takes the GIL back 64 times, behind a model's
    kernel launches. It pickles as a plain list.
    """

    __slots__ = ("_array", "_rows")
    _array: np.ndarray
    _rows: tuple[np.ndarray, ...]

    def stacked(self) -> np.ndarray | None:
        """The stacked array, if the list still holds its rows (None once an item was replaced)."""
        rows = self._rows
        if len(self) == len(rows) and all(map(operator.is_, self, rows)):
            return self._array
        return None

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


#: Gives the array a batch of ``shape`` and ``dtype`` is stacked into, or None for a new one.
Staging = Callable[[tuple[int, ...], np.dtype], "np.ndarray | None"]


def stacked_list(values: list[Any], staging: Staging | None = None) -> list[Any]:
    """``values`` as a `StackedList` when they are arrays that stack (`stacked`, into what ``staging``
    gives), else ``values``."""
    if not values or not isinstance(values[0], np.ndarray):
        return values
    array = stacked(values, staging)
    if array is None:
        return values
    rows = tuple(array)
    out = StackedList(rows)
    out._array, out._rows = array, rows
    return out


def _stack_arrays(values: Sequence[Any], first: np.ndarray, staging: Staging | None) -> np.ndarray | None:
    # The checks run in C (map over the values, a set of what they give): a Python loop over 8,192 small
    # images costs as much as stacking them.
    types = set(map(type, values))
    exact = types == {np.ndarray}
    if not exact and not all(issubclass(t, np.ndarray) for t in types):
        return None
    if set(map(_DTYPE, values)) != {first.dtype}:
        return None
    if exact and first.shape:
        return _join(values, first, staging)
    if set(map(_SHAPE, values)) != {first.shape}:
        return None
    # np.array is np.stack without its per-array expand_dims: 10x faster on scalars.
    return np.array(values, dtype=first.dtype) if exact else np.stack(values)


def _join(values: Sequence[np.ndarray], first: np.ndarray, staging: Staging | None) -> np.ndarray | None:
    """Arrays of one dtype and rank >= 1 stacked when they have one shape: the same first dimension (len:
    no shape tuple made per value), and the same others, which np.concatenate requires (it refuses any
    other). The result is np.stack's, without its per-array expand_dims: 1.5x faster on small images.
    With ``staging``, every shape is checked first, to ask it for the array of the result's shape."""
    shape = (len(values), *first.shape)
    try:
        if set(map(len, values)) != {len(first)}:
            return None
        out = None
        if staging is not None and set(map(_SHAPE, values)) == {first.shape}:
            out = staging(shape, first.dtype)
        flat = None if out is None else out.reshape((len(values) * len(first), *first.shape[1:]))
        joined = np.concatenate(values, out=flat)
    except (TypeError, ValueError):  # a 0-d value (no len), another rank, or other trailing dimensions
        return None
    return joined.reshape(shape) if out is None else out


def stack_samples(values: Sequence[Any], tensor: str) -> np.ndarray:
    """Samples of ``tensor`` stacked into one array (what ``numpy()`` gives for several samples).

    Raises:
        RaggedShapeError: the samples have different shapes.
    """
    out = values.stacked() if isinstance(values, StackedList) else None
    if out is None:
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
