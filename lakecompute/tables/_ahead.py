"""An export's next group read and encoded on a thread while the current one is written (reading's chunk
reads, checksums and copies and Parquet's writing release the GIL, so the two overlap)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, Final, TypeVar

from lakecompute.threads import start_thread

__all__ = ["ahead"]

T = TypeVar("T")

_END: Final = object()
_POLL: Final = 0.1  # seconds between the producer's looks at whether the consumer has gone


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _put(ready: queue.Queue[Any], item: Any, gone: threading.Event) -> bool:
    """Hand ``item`` over (waiting while the consumer holds the one before); False if it has gone."""
    while not gone.is_set():
        try:
            ready.put(item, timeout=_POLL)
            return True
        except queue.Full:
            continue
    return False


def _produce(items: Iterator[Any], ready: queue.Queue[Any], gone: threading.Event) -> None:
    try:
        for item in items:
            if not _put(ready, item, gone):
                return
            del item
        _put(ready, _END, gone)
    except BaseException as exc:  # raised again in the consumer
        _put(ready, _Failed(exc), gone)


def ahead(items: Iterator[T]) -> Iterator[T]:
    """``items``, each made on a thread while the consumer works on the one before (one item ahead:
    memory holds at most the item in use, the next one, and the one being made).

    An exception in the producer is raised in the consumer, in order; a consumer that stops early stops
    the producer at its next item.
    """
    ready: queue.Queue[Any] = queue.Queue(maxsize=1)
    gone = threading.Event()
    thread = start_thread("export-ahead", _produce, items, ready, gone)
    try:
        while True:
            got = ready.get()
            if got is _END:
                return
            if isinstance(got, _Failed):
                raise got.exc
            yield got
            del got
    finally:
        gone.set()  # a producer waiting to hand over an item stops at once; one reading, after its item
        thread.join()
