"""State of which each process has its own: one helper instead of dicts keyed by ``os.getpid()``.

Some state belongs to a process, not to the program: open object-store clients and segments (remote
clients do not survive a fork), a worker's built functions, its decoding helpers, the lease keeper and
its thread, locks that another thread may hold when the process forks. A process forked from one that
has such state inherits a copy that is not its own: the threads behind it stayed in the parent, a lock
held at the fork is held forever.

`PerProcess` holds such a value: made on first use in each process, and made again in a forked child
on its first use there (the parent's copy is dropped, never used). One fork hook, registered here,
gives every instance a new lock in the child, so nothing waits on a lock the parent held.

Example:
    >>> import threading
    >>> lock = PerProcess(threading.Lock)
    >>> with lock.get():
    ...     pass
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerProcess"]

T = TypeVar("T")

_instances: weakref.WeakSet[PerProcess[object]] = weakref.WeakSet()


class PerProcess(Generic[T]):
    """A value of which each process has its own, made by ``make`` on first use in the process.

    Args:
        make: makes this process's value (called once per process, under the instance's lock).
    """

    __slots__ = ("__weakref__", "_lock", "_make", "_pid", "_value")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._pid = -1
        self._value: T | None = None
        self._lock = threading.Lock()
        _instances.add(self)  # type: ignore[arg-type]  # the set holds instances of any value type

    def get(self) -> T:
        """This process's value (made now, if this is its first use here)."""
        pid = os.getpid()
        if self._pid != pid:
            with self._lock:
                if self._pid != pid:
                    self._value = self._make()
                    self._pid = pid
        return self._value  # type: ignore[return-value]  # made above, for this process

    def peek(self) -> T | None:
        """This process's value if it was made here, else None (nothing is made)."""
        return self._value if self._pid == os.getpid() else None

    def forget(self) -> None:
        """Drop this process's value: the next `get` makes a new one."""
        with self._lock:
            self._pid, self._value = -1, None


def _after_fork_in_child() -> None:
    """In a forked child: every instance gets a new lock (the parent's may have been held at the fork);
    the values are the parent's and are made again on first use (their pid is not this process's)."""
    for instance in list(_instances):
        instance._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX; where processes cannot fork, there is nothing to reset
    os.register_at_fork(after_in_child=_after_fork_in_child)
