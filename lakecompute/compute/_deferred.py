"""Values of an eval's input that are read when the function first asks for them.

Dataset input hands the function a row per input; a tensor the function has not used yet is not read with
the block: each row holds a `Deferred` value of it instead, which reads the tensor's whole block (once)
when the function first asks for one of its values (`lakecompute.compute.DatasetSource`). They are tuples
built in C by ``map`` over pairs, like the rows that hold them, so nothing per sample costs a Python frame
until it is read.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import numpy as np

from lakecompute.htypes import Staging, stacked_list

__all__ = [
    "ColumnSource",
    "Deferred",
    "DeferredPart",
    "DeferredSample",
    "LazyColumn",
    "batch_part",
    "resolved",
    "stacked_part",
]


class Deferred(tuple):  # type: ignore[type-arg]
    """A value not read yet: a tensor the function may never use is read when it first asks for it (then
    for its whole block at once, see `lakecompute.compute.DatasetSource`). Made in C by ``map`` over
    pairs, like the rows that hold it: nothing per sample costs a Python frame until it is read."""

    __slots__ = ()

    def get(self) -> Any:
        """The value, read now (with the rest of its column's block, once)."""
        raise NotImplementedError

    def nbytes(self) -> int:
        """About how many bytes the value will hold, from its stored shape (nothing is read)."""
        raise NotImplementedError


class DeferredSample(Deferred):
    """Sample ``j`` of a column read on first use: ``DeferredSample((column, j))``."""

    __slots__ = ()

    def get(self) -> Any:
        return tuple.__getitem__(self, 0).sample(tuple.__getitem__(self, 1))

    def nbytes(self) -> int:
        return int(tuple.__getitem__(self, 0).nbytes(tuple.__getitem__(self, 1), 1))


class DeferredPart(Deferred):
    """A batch's part of a column read on first use: ``DeferredPart((column, at, size, staging))``."""

    __slots__ = ()

    def get(self) -> Any:
        column, at, size, staging = self
        return column.part(at, size, staging)

    def nbytes(self) -> int:
        column, at, size, _ = self
        return int(column.nbytes(at, size))


def resolved(value: Any) -> Any:
    """``value``, read now if it was deferred."""
    return value.get() if isinstance(value, Deferred) else value


class ColumnSource(Protocol):
    """What a `LazyColumn` reads through: the eval's dataset input (`lakecompute.compute.DatasetSource`)."""

    def read_column(self, name: str, start: int, stop: int) -> Any: ...

    def note_used(self, name: str) -> None: ...

    def stored_nbytes(self, name: str, start: int, stop: int) -> int: ...


class LazyColumn:
    """A tensor's column of one block, read when the function first asks for one of its values (then
    whole, once; the source then reads the tensor ahead with later blocks: ``note_used``)."""

    __slots__ = ("_lock", "_parts", "_source", "_values", "name", "start", "stop")

    def __init__(self, source: ColumnSource, name: str, start: int, stop: int) -> None:
        self._source = source
        self.name, self.start, self.stop = name, start, stop
        self._values: Any = None
        self._parts: dict[tuple[int, int], Any] = {}  # a batch's part is made once: numpy() is one array
        self._lock = threading.Lock()

    def values(self) -> Any:
        """The block's values of the tensor, read now (once)."""
        if self._values is None:
            with self._lock:  # a batch's rows may be taken on several threads
                if self._values is None:
                    self._values = self._source.read_column(self.name, self.start, self.stop)
                    self._source.note_used(self.name)
        return self._values

    def sample(self, j: int) -> Any:
        """Sample ``j`` of the block, as `lakecompute.compute._samples.column_rows` hands out samples."""
        values = self.values()
        if isinstance(values, np.ndarray) and values.ndim == 1:
            return values[j, ...]  # a 0-d array, as .numpy() gives it
        return values[j]

    def nbytes(self, at: int, size: int) -> int:
        """About how many bytes inputs ``at..at + size`` of the block hold decoded (nothing is read)."""
        return self._source.stored_nbytes(self.name, self.start + at, min(self.start + at + size, self.stop))

    def part(self, at: int, size: int, staging: Staging | None) -> Any:
        """Inputs ``at..at + size`` of the block, as a batch holds them (made once)."""
        part = self._parts.get((at, size))
        if part is None:
            part = self._parts[(at, size)] = stacked_part(self.values(), at, size, staging)
        return part


def batch_part(column: Any, at: int, size: int, staging: Staging | None) -> Any:
    """A batch's part of a column: deferred for a column read on first use, else `stacked_part`."""
    if isinstance(column, LazyColumn):
        return DeferredPart((column, at, size, staging))
    return stacked_part(column, at, size, staging)


def stacked_part(
    column: np.ndarray | list[Any], at: int, size: int, staging: Staging | None
) -> np.ndarray | list[Any]:
    """Inputs ``at..at + size`` of a column read for a batch: a view of a stacked column, or a list's
    part stacked ahead where its samples stack (`lakecompute.htypes.stacked_list`)."""
    part = column[at : at + size]
    return stacked_list(part, staging) if isinstance(part, list) else part
