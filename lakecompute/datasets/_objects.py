"""The objects a view keeps: ``ds.filter_labels(...)`` drops objects from rows, not rows from the dataset.

A detection sample lists its objects across several tensors: the boxes, their class labels, their scores,
a mask's channels, keypoints, polygons, each with one entry per object along the axis its htype declares
(`lakecompute.specs.ObjectAxis`). An `ObjectGroup` is such a set of tensors and, for each row of a view,
which of the row's objects are kept; an `ObjectSelection` holds a view's groups (a view may filter the
objects of ground truth and of predictions separately). Every read of a view goes through it: values of
a group's tensors come back holding the kept objects only, in their order, so what a view shows, saves,
exports and loads is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lakecompute.errors import InvalidArgumentError

__all__ = ["ObjectGroup", "ObjectSelection"]


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _rows(rows: range | np.ndarray | Sequence[int]) -> np.ndarray:
    return np.asarray(rows, dtype=np.int64).reshape(-1)


@dataclass(frozen=True, slots=True, eq=False)
class ObjectGroup:
    """Per-object tensors filtered together, and the objects of each of a view's rows that are kept.

    Attributes:
        tensors: the group's tensors, by name, with the axis of their samples that lists objects (0, or -1
            for a ``H x W x K`` mask).
        offsets: row ``i``'s objects are ``keep[offsets[i]:offsets[i + 1]]`` (one more than the rows).
        keep: for every object of every row, whether the view keeps it.
        expression: the condition that chose them (for ``repr`` and saved views' records).
    """

    tensors: tuple[tuple[str, int], ...]
    offsets: np.ndarray
    keep: np.ndarray
    expression: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.tensors)

    def axis(self, name: str) -> int | None:
        """The objects' axis of tensor ``name``, or None when it is not in the group."""
        return next((axis for n, axis in self.tensors if n == name), None)

    def take(self, rows: range | np.ndarray | Sequence[int]) -> ObjectGroup:
        """The group for rows ``rows`` of the view (indices into it, any order, repeats)."""
        rows = _rows(rows)
        starts = self.offsets[rows]
        counts = self.offsets[rows + 1] - starts
        offsets = _offsets(counts)
        items = np.repeat(starts - offsets[:-1], counts) + np.arange(int(offsets[-1]), dtype=np.int64)
        return ObjectGroup(self.tensors, offsets, self.keep[items], self.expression)

    def kept(self, row: int) -> np.ndarray:
        """Which objects of view row ``row`` are kept."""
        kept: np.ndarray = self.keep[self.offsets[row] : self.offsets[row + 1]]
        return kept

    def kept_counts(self) -> np.ndarray:
        """How many objects each row keeps."""
        hits = np.zeros(len(self.keep) + 1, dtype=np.int64)
        np.cumsum(self.keep, out=hits[1:])
        counts: np.ndarray = hits[self.offsets[1:]] - hits[self.offsets[:-1]]
        return counts

    def then(self, keep: np.ndarray, expression: str) -> ObjectGroup:
        """This group after a further filter: ``keep`` says, for each object it keeps now, if it stays."""
        combined = self.keep.copy()
        combined[np.flatnonzero(self.keep)] = keep
        both = f"{self.expression} and {expression}" if self.expression else expression
        return ObjectGroup(self.tensors, self.offsets, combined, both)


@dataclass(frozen=True, slots=True, eq=False)
class ObjectSelection:
    """The object groups of a view (see `ObjectGroup`), and how its reads apply them."""

    groups: tuple[ObjectGroup, ...]

    def group(self, name: str) -> ObjectGroup | None:
        """The group tensor ``name`` is in, or None."""
        return next((g for g in self.groups if g.axis(name) is not None), None)

    def take(self, rows: range | np.ndarray | Sequence[int]) -> ObjectSelection:
        """The selection for rows ``rows`` of the view (indices into it)."""
        return ObjectSelection(tuple(g.take(rows) for g in self.groups))

    def with_group(self, group: ObjectGroup) -> ObjectSelection:
        """This selection with ``group`` in place of the group of the same tensors, or added to it.

        Raises:
            InvalidArgumentError: ``group`` shares some tensors with a group of this selection, not all.
        """
        kept = []
        for g in self.groups:
            if set(g.names) == set(group.names):
                continue
            shared = set(g.names) & set(group.names)
            if shared:
                raise InvalidArgumentError(
                    f"The view already filters the objects of {list(g.names)!r} together; filtering "
                    f"{list(group.names)!r} would split that group (both hold {sorted(shared)!r}). Name the "
                    "same tensors (tensors=...), or filter the dataset itself."
                )
            kept.append(g)
        return ObjectSelection((*kept, group))

    def describe(self) -> list[str]:
        """Each group's condition and tensors, in words."""
        return [f"{g.expression} [{', '.join(g.names)}]" for g in self.groups]

    # -- reads ------------------------------------------------------------------------------------
    def sample(self, name: str, row: int, value: Any) -> Any:
        """Sample ``value`` of tensor ``name`` at view row ``row``, holding the kept objects only."""
        group = self.group(name)
        if group is None:
            return value
        axis = group.axis(name)
        assert axis is not None
        return _objects(value, group.kept(row), axis, name)

    def samples(self, name: str, rows: range | np.ndarray | Sequence[int], values: Any) -> Any:
        """Samples ``values`` of tensor ``name`` at view rows ``rows`` (a list, or a stacked array), holding
        the kept objects only: a list (their objects no longer agree in number), or ``values`` itself
        for a tensor in no group."""
        group = self.group(name)
        if group is None:
            return values
        axis = group.axis(name)
        assert axis is not None
        return [
            _objects(v, group.kept(int(r)), axis, name)
            for v, r in zip(values, _rows(rows).tolist(), strict=True)
        ]

    def flat(
        self, name: str, rows: np.ndarray, shapes: np.ndarray, values: np.ndarray | list[Any] | None
    ) -> tuple[np.ndarray, np.ndarray | list[Any] | None]:
        """A column scan of tensor ``name`` at view rows ``rows`` (``(shapes, values)`` as
        `lakecompute.datasets.ColumnReader.scan` gives them) holding the kept objects only."""
        group = self.group(name)
        if group is None:
            return shapes, values
        axis = group.axis(name)
        assert axis is not None
        kept = group.take(rows)
        counts = shapes[:, axis] if len(shapes) else np.zeros(0, dtype=np.int64)
        if not np.array_equal(counts, np.diff(kept.offsets)):
            raise _changed(name)
        new_shapes = shapes.copy()
        new_shapes[:, axis] = kept.kept_counts()
        if values is None:
            return new_shapes, None
        if isinstance(values, list):
            return new_shapes, [_objects(v, kept.kept(i), axis, name) for i, v in enumerate(values)]
        if axis != 0:  # a mask's channels are read one sample at a time (masks are blobs: a list)
            raise AssertionError("per-object numbers list their objects first")
        per_object = (
            np.prod(shapes[:, 1:], axis=1, dtype=np.int64)
            if shapes.shape[1] > 1
            else np.ones(len(shapes), np.int64)
        )
        items = np.repeat(kept.keep, np.repeat(per_object, counts))
        return new_shapes, values[items]


def _changed(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Tensor {name!r} no longer lists the objects this view's filter_labels chose (the dataset was "
        "written since the view was made). Make the view again."
    )


def _objects(value: Any, keep: np.ndarray, axis: int, name: str) -> Any:
    """One sample with only the objects ``keep`` says (an array along ``axis``, or a list of objects)."""
    if isinstance(value, list):
        if len(value) != len(keep):
            raise _changed(name)
        return [v for v, k in zip(value, keep.tolist(), strict=True) if k]
    arr = np.asarray(value)
    if arr.ndim == 0 or arr.shape[axis] != len(keep):
        raise _changed(name)
    return np.compress(keep, arr, axis=axis)
