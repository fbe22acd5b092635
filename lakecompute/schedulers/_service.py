"""Helper processes that answer requests as they come: the processed scheduler's `Pool` behind futures.

`ProcessedScheduler` runs a known stream of tasks to its end. A reader that wants some work done in
other processes now and then (decoding a block's images, `lakecompute.htypes`) needs a service instead:
`Service.submit` a task, get a ``Future``. It runs on the same `Pool`, so its processes keep the
scheduler's guarantees: they start from the fork server (a worker with CUDA or threads is never
forked), lead their own process group, end when the process that started them dies, forward their
stderr, and a death is a `WorkerDiedError` that says how (its last stderr lines, a crash's dump),
given to every request outstanding and to every later one.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import multiprocess

from lakecompute.schedulers._base import TaskFn
from lakecompute.schedulers._pool import Pool
from lakecompute.schedulers._transport import load_result, rebuild_exception
from lakecompute.threads import start_thread

__all__ = ["Service"]


@contextlib.contextmanager
def _children_allowed() -> Iterator[None]:
    """Let this process start the helpers even if it is itself a daemonic worker (an eval's): multiprocess
    refuses children to daemonic processes so that none is orphaned when they are terminated; the
    helpers cannot be (they end with their parent, see `Pool`), and the flag is this process's again
    once they have started."""
    me = multiprocess.current_process()
    daemonic = me.daemon
    if daemonic:
        me.daemon = False
    try:
        yield
    finally:
        if daemonic:
            me.daemon = True


class Service:
    """``processes`` helper processes running ``fn(task, progress)`` for each submitted task.

    Args:
        fn: a module-level function (sent by reference).
        processes: how many helper processes.
        preload: modules the fork server imports once, before it starts them.
    """

    def __init__(self, fn: TaskFn[Any, Any], processes: int, preload: tuple[str, ...] = ()) -> None:
        self._pool = Pool("forkserver", preload, processes, fn)
        self._lock = threading.Lock()
        self._outstanding: dict[int, tuple[Any, Future[Any]]] = {}
        self._positions = itertools.count()
        self._error: BaseException | None = None
        self._stopping = False
        with _children_allowed():
            self._pool.start()
        self._thread = start_thread("service", self._dispatch)

    def submit(self, task: Any) -> Future[Any]:
        """Queue ``task``; its future gets the result, the task's exception, or the service's failure."""
        future: Future[Any] = Future()
        with self._lock:
            if self._error is not None:
                future.set_exception(self._error)
                return future
            position = next(self._positions)
            self._outstanding[position] = (task, future)
        self._pool.submit(position, task)
        return future

    def stop(self) -> None:
        """Let the helpers finish what they run and exit; fail what is still outstanding."""
        self._stopping = True
        self._pool.retire()
        self._thread.join()
        self._pool.stop(graceful=True)
        self._fail(RuntimeError("the helper processes were stopped"))

    def _dispatch(self) -> None:
        pool = self._pool
        try:
            while True:
                dead = pool.wait()
                for message in pool.drain():
                    self._handle(message)
                if dead is not None:
                    if self._stopping:
                        return
                    with self._lock:
                        outstanding = {p: task for p, (task, _) in self._outstanding.items()}
                    raise pool.died_error(dead, outstanding)
        except BaseException as exc:  # given to the requests, raised where they are waited on
            self._fail(exc)

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind in ("done", "error"):
            with self._lock:
                _, future = self._outstanding.pop(message[2])
            if kind == "done":
                future.set_result(load_result(message[3], "helper process"))
            else:
                future.set_exception(rebuild_exception(message[3]))
        elif kind == "start-failed":
            raise self._pool.start_failed_error(message[1], message[2])

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = exc
            waiting = [future for _, future in self._outstanding.values()]
            self._outstanding.clear()
        for future in waiting:
            future.set_exception(exc)
