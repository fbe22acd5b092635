"""Where lakecompute starts threads: named daemon threads, bounded pools and a server's request threads.

Every thread the package starts is started here, so that what runs beside the caller's code can be
read in one place and found by name (``lakecompute-<name>`` in a debugger, ``py-spy`` or
``threading.enumerate()``): a worker's readers and writer (``compute``), the chunk writes of a flush
(``datasets``), the lease keeper (``versioned``), the S3 probe (``storage``), exports reading ahead
(``tables``), the viewer's server (``viewer``), a scheduler's workers and its pools' watchers
(``schedulers``). Processes are started only by the schedulers (``schedulers/_pool.py``); a worker's
helper processes are a scheduler ``Service``. ``tests/test_house.py`` checks both.

The threads are daemon threads: none keeps the interpreter alive, and each owner ends its own (a task
closes its readers, a viewer shuts its server down, a pool is used as a context manager).
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["PREFIX", "RequestThreads", "start_thread", "thread_pool"]

#: Every thread the package starts is named with this prefix.
PREFIX = "lakecompute-"


def start_thread(name: str, target: Callable[..., object], *args: Any) -> threading.Thread:
    """Start a daemon thread named ``lakecompute-<name>`` running ``target(*args)``.

    Args:
        name: what the thread does (``read-ahead-0``, ``leases``, ...), after the prefix.
        target: the thread's function.
        *args: its arguments.

    Returns:
        The thread, started (join it to wait for it).
    """
    thread = threading.Thread(target=target, args=args, name=PREFIX + name, daemon=True)
    thread.start()
    return thread


def thread_pool(threads: int, name: str) -> ThreadPoolExecutor:
    """A pool of at most ``threads`` threads named ``lakecompute-<name>_<n>``, for a ``with`` block
    (its threads end when the block does)."""
    return ThreadPoolExecutor(threads, thread_name_prefix=PREFIX + name)


class RequestThreads(socketserver.ThreadingMixIn):
    """A ``socketserver`` mixin: each request is answered on a daemon thread of its own (as the standard
    library's ``ThreadingHTTPServer``; the viewer's server is ``(RequestThreads, HTTPServer)``)."""

    daemon_threads = True
