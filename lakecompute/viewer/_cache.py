"""A cache bounded in bytes, shared by the server's threads: thumbnails, and the rows expressions keep."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LruCache"]

V = TypeVar("V")


class LruCache(Generic[V]):
    """Values by key, each with its size; the least recently used go first beyond ``max_bytes``.

    Every key names a value that never changes (stored data is immutable, and keys carry the dataset id
    and version), so nothing is ever invalidated, only dropped for room. Thread-safe.

    Args:
        max_bytes: the total size kept at most; a value larger than that alone is not kept.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """The value kept under ``key``, or None."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: V, nbytes: int) -> None:
        """Keep ``value`` (of ``nbytes`` bytes) under ``key``, dropping the least recently used for room."""
        if nbytes > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            self._items[key] = (value, nbytes)
            self.nbytes += nbytes
            while self.nbytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self.nbytes -= dropped

    def __len__(self) -> int:
        return len(self._items)
