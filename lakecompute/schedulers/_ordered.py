"""A reorder buffer: results that come in completion order, handed on in position order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["InOrder"]

ItemT = TypeVar("ItemT")


class InOrder(Generic[ItemT]):
    """Takes ``(position, item)`` pairs in any order (what `Scheduler.run` yields) and hands the items
    back in position order, each as soon as every position before it has come.

    Example:
        >>> order = InOrder[str]()
        >>> list(order.put(1, "b")), list(order.put(0, "a")), order.next
        ([], ['a', 'b'], 2)
    """

    __slots__ = ("_waiting", "next")

    def __init__(self, first: int = 0) -> None:
        self._waiting: dict[int, ItemT] = {}
        self.next = first
        """The position handed on next."""

    def put(self, position: int, item: ItemT) -> Iterator[ItemT]:
        """Take ``item`` at ``position`` (at once); then the items now ready, in position order, each
        leaving the buffer as it is taken."""
        self._waiting[position] = item
        return self._ready()

    def _ready(self) -> Iterator[ItemT]:
        while self.next in self._waiting:
            ready = self._waiting.pop(self.next)
            self.next += 1
            yield ready

    @property
    def waiting(self) -> int:
        """How many items wait for an earlier position."""
        return len(self._waiting)
