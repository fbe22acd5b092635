"""The worker processes of one processed-scheduler run, and the channels to them (the parent's side).

`Pool` starts ``num_workers`` processes (by fork, from the fork server, or by spawn; never re-running
the parent's ``__main__``, see `children_skip_main`), queues pickled tasks to them, reads their messages
from one pipe per worker without ever blocking (`_frames`), notices a dead worker through its sentinel
and says what it was doing (`Pool.died_error`, with its last stderr lines, forwarded as it writes them by
`_StderrForwarder`), and stops them and every process they started. How tasks are fed and results
handed on is `ProcessedScheduler`'s (``_processed``).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any, Literal, cast

import multiprocess
import multiprocess.connection
import multiprocess.forkserver

from lakecompute.errors import InvalidTypeError, WorkerDiedError
from lakecompute.schedulers._base import TaskFn, describe_task
from lakecompute.schedulers._devices import Placement
from lakecompute.schedulers._frames import FrameReader
from lakecompute.schedulers._processed_worker import STOP_SIGNALS, worker_main
from lakecompute.schedulers._transport import (
    PickledError,
    dump,
    dump_task,
    load,
    rebuild_exception,
)
from lakecompute.threads import start_thread

__all__ = ["Pool", "StartMethod"]

StartMethod = Literal["fork", "forkserver", "spawn"]

# How long a worker that was asked to stop may take to exit before it is terminated, and how long a
# terminated worker may take before it is killed (seconds).
_GRACEFUL_EXIT_TIMEOUT = 5.0
_TERMINATE_TIMEOUT = 2.0
# How much of a worker's stderr is kept for error messages: its last bytes, then its last lines.
_TAIL_BYTES = 8192
_TAIL_LINES = 20
# How long the stderr forwarding thread may take to finish once the workers are gone (seconds).
_FORWARD_JOIN_TIMEOUT = 1.0


class Pool:
    """The worker processes of one run, and the channels to them."""

    # A class attribute, not a module global: still there when a module's globals are cleared at exit.
    _finalizing = staticmethod(sys.is_finalizing)

    def __init__(
        self,
        start_method: StartMethod,
        preload: tuple[str, ...],
        num_workers: int,
        fn: TaskFn[Any, Any],
        placement: Placement | None = None,
    ) -> None:
        self._start_method = start_method
        self._placement = placement
        self._preload = preload
        self._context = multiprocess.get_context(start_method)
        self._num_workers = num_workers
        self._fn = fn
        # Forked workers share the parent's __main__; the others never import it, so what was defined
        # there must travel by value.
        self._by_value = start_method != "fork"
        # Parent → workers. A Queue (with its feeder thread) so that putting a task never blocks the
        # parent, even when the pipe is full and every worker is busy. It only ever holds bytes that
        # were pickled here, so its feeder thread cannot fail to pickle (and silently drop) a task.
        self._tasks = self._context.Queue()
        # Worker → parent, one pipe each, written synchronously: a message is in the pipe before the
        # worker goes on, so nothing a worker sent is lost when it is killed right after. One pipe per
        # worker, so that a worker killed halfway through a message leaves a partial frame in its own
        # pipe only (see _frames), and no lock that a dead worker could hold.
        results = [self._context.Pipe(duplex=False) for _ in range(num_workers)]
        self._result_writers = [writer for _, writer in results]
        self._inboxes = [FrameReader(reader.fileno()) for reader, _ in results]
        self._result_readers = [reader for reader, _ in results]
        self._stderr = _StderrForwarder(self._context, num_workers)
        self._processes: list[Any] = []
        # Which task each worker is running: worker index → position.
        self._running: dict[int, int] = {}
        # Workers that reported that they started, and the process groups they lead.
        self._ready: set[int] = set()
        self._groups: set[int] = set()
        # Once every task is queued, one None per worker follows them (`retire`): a worker that finds
        # no task left exits while the others finish theirs; its exit is then no death (`retired`).
        self._retiring = False
        self._retired: set[int] = set()

    def start(self) -> None:
        """Start the worker processes."""
        payload = self._fn_payload()
        if self._start_method == "forkserver":
            # Set before the fork server starts (the first forkserver run of this process); started
            # here, so that the slow first start is not inside _children_skip_main below.
            multiprocess.forkserver.set_forkserver_preload(list(self._preload))
            multiprocess.forkserver.ensure_running()
        parent_pid = os.getpid()
        with _children_skip_main(self._by_value), _inherited_objects_frozen(self._start_method == "fork"):
            for index in range(self._num_workers):
                process = self._context.Process(
                    target=worker_main,
                    args=(
                        index,
                        parent_pid,
                        self._start_method == "forkserver",
                        payload,
                        self._tasks,
                        self._result_writers[index],
                        self._stderr.writers[index],
                        None if self._placement is None else self._placement.entry(index),
                        self._num_workers,
                    ),
                    name=f"lakecompute-worker-{index}",
                    # Daemonic: if the parent exits without stopping the pool, multiprocess terminates them.
                    daemon=True,
                )
                # SIGINT and SIGTERM wait (blocked) from the fork until the worker has set its own
                # handlers: one that arrived in between ran the parent's handlers in the child.
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
                try:
                    process.start()
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                # Only started processes: stop() terminates and joins what is in this list.
                self._processes.append(process)
        # The workers hold their ends; without these copies, a pipe whose worker is gone reads as closed.
        for writer in self._result_writers:
            writer.close()
        self._stderr.start()

    def _fn_payload(self) -> Any:
        """The task function as workers get it: itself when forked, else pickled by value here."""
        if not self._by_value:
            return self._fn
        try:
            return dump(self._fn, by_value=True)
        except Exception as exc:
            raise InvalidTypeError(
                f"The task function cannot be sent to worker processes started by {self._start_method!r}: "
                f"pickling it failed with {type(exc).__name__}: {exc}. Everything it refers to (the compute "
                "function, its arguments and the globals it uses) must pickle; or use start_method='fork' "
                "or scheduler='threaded'."
            ) from exc

    def submit(self, position: int, task: Any) -> None:
        """Pickle a task and queue it for the workers (UnpicklableTaskError if it cannot be pickled)."""
        self._tasks.put((position, dump_task(task, position, self._by_value)))

    def retire(self) -> None:
        """Every task has been submitted: queue one None per worker behind them, so that each worker
        exits when it finds no task left (its exit, CUDA's teardown included, overlaps the tasks still
        running) instead of when the run ends. Once only."""
        if not self._retiring:
            self._retiring = True
            for _ in self._processes:
                self._tasks.put(None)

    def retired(self, process: Any) -> bool:
        """Whether ``process`` exited because `retire` told it to: exit code 0, after it started, with
        no task of its own running. Call after `drain`, which reads what it sent before it exited.
        Such a worker is no longer waited on."""
        index = self._processes.index(process)
        if self._retiring and process.exitcode == 0 and index in self._ready and index not in self._running:
            self._retired.add(index)
            return True
        return False

    def wait(self) -> Any | None:
        """Block until a message arrives or a worker dies; return a dead worker process, if any."""
        live = [k for k in range(len(self._processes)) if k not in self._retired]
        sentinels = [self._processes[k].sentinel for k in live]
        multiprocess.connection.wait([*(self._inboxes[k].fd for k in live), *sentinels])
        for k in live:
            # Any other exit is a death: workers exit only when retire() or stop() asks them to.
            if self._processes[k].exitcode is not None:
                return self._processes[k]
        return None

    def drain(self) -> Iterator[tuple[Any, ...]]:
        """Yield the messages already in the result pipes: every complete one, without waiting for the
        rest of a partial one (its worker is still writing it, or died while writing it)."""
        for inbox in self._inboxes:
            for frame in inbox.read_available():
                yield self._note(cast(tuple[Any, ...], load(frame)))

    def _note(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """Keep track of what a message says about its worker; return the message."""
        kind, index = message[0], message[1]
        if kind == "ready":
            self._ready.add(index)
            if message[3]:
                self._groups.add(message[2])
        elif kind == "started":
            self._running[index] = message[2]
        elif kind in ("done", "error"):
            self._running.pop(index, None)
        return message

    def start_failed_error(self, index: int, error: PickledError) -> WorkerDiedError:
        """The error for a worker that could not start, with its own exception as the cause."""
        cause = rebuild_exception(error)
        process = self._processes[index]
        failure = error.chain[0]
        message = (
            f"Worker process {index} (pid {process.pid}) failed while starting, before it ran a task: "
            f"{failure.type_name.rpartition('.')[2]}: {failure.message}. Workers started by "
            f"{self._start_method!r} get the task function by pickling: what it uses must be importable "
            "in a new process (a module on sys.path, not a file loaded by path)."
        )
        tail = self._stderr.tail(index)
        return _with_tail(WorkerDiedError(message, task=None, exitcode=None), tail, cause)

    def died_error(self, process: Any, outstanding: dict[int, Any]) -> WorkerDiedError:
        """Build the error for a worker that died: what it was doing, how it died, its last stderr."""
        index = self._processes.index(process)
        code: int = process.exitcode
        how = _describe_exit(code)
        who = f"Worker process {index} (pid {process.pid}) died with {how}"
        tail = self._stderr.tail(index)
        position = self._running.get(index)
        if position is not None and position in outstanding:
            task = outstanding[position]
            message = (
                f"{who} while running task {describe_task(task)}. The task may have crashed the interpreter "
                "(for example a segfault in native code) or the system may have killed it (for example "
                "when out of memory); run it with num_workers=0 to debug it in this process."
            )
            return _with_tail(WorkerDiedError(message, task=task, exitcode=code), tail)
        if index not in self._ready:
            message = f"{who} while starting, before it ran a task."
        elif code < 0:
            message = (
                f"{who} while not running a task. Something outside lakecompute killed it "
                "(for example the out-of-memory killer)."
            )
        else:
            message = (
                f"{who} between tasks. Code that an earlier task left running in the worker (a thread, "
                "an exit hook) may have ended it."
            )
        return _with_tail(WorkerDiedError(message, task=None, exitcode=code), tail)

    def stop(self, graceful: bool) -> None:
        """Stop every worker and what it started, and release the channels; never blocks for long.

        At the interpreter's teardown (a run collected after the exit hooks), it does nothing: the
        modules it needs are being taken apart, and the workers exit with this process anyway."""
        if self._finalizing():
            return
        if graceful:
            # Workers are idle, waiting for tasks: one None each (if retire() has not queued them)
            # tells them to exit.
            self.retire()
            _join_all(self._processes, _GRACEFUL_EXIT_TIMEOUT)
        # terminate() sends SIGTERM (workers restore its default action at start-up); kill() is for a
        # worker stuck where SIGTERM cannot reach it.
        for process in self._processes:
            if process.exitcode is None:
                process.terminate()
        _join_all(self._processes, _TERMINATE_TIMEOUT)
        for process in self._processes:
            if process.exitcode is None:
                process.kill()
                process.join()
        self._kill_groups()
        for process in self._processes:
            # Release the sentinel's file descriptor now rather than when the object is collected.
            process.close()
        self._stderr.close()
        # The queue's feeder thread may still hold tasks nobody will read: drop them rather than
        # block the interpreter's exit flushing them.
        self._tasks.cancel_join_thread()
        self._tasks.close()
        for reader in self._result_readers:
            reader.close()
        for writer in self._result_writers:
            writer.close()

    def _kill_groups(self) -> None:
        """Kill what user code started in the workers (and forgot): the rest of each worker's group."""
        for group in self._groups:
            # The group id is the worker's pid, which is not handed out again while any process of the
            # group is alive; if the group is empty, nothing is left to kill.
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _join_all(processes: list[Any], timeout: float) -> None:
    """Join every process, all within ``timeout`` seconds together."""
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))


def _describe_exit(code: int) -> str:
    """``signal SIGKILL`` or ``exit code 3``."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def _with_tail(error: WorkerDiedError, tail: str, cause: BaseException | None = None) -> WorkerDiedError:
    """Append a worker's last stderr lines to the error's message."""
    text = f"Its stderr ended with:\n{tail}" if tail else "It wrote nothing to stderr."
    error.args = (f"{error.args[0]} {text}",)
    error.__cause__ = cause
    return error


@contextlib.contextmanager
def _children_skip_main(skip: bool) -> Iterator[None]:
    """Start processes whose bootstrap does not run the parent's ``__main__`` again (when ``skip``).

    multiprocess's spawn and forkserver children re-run the parent's main script (as ``__mp_main__``,
    before any of our code runs in them) so that objects pickled by reference to ``__main__`` resolve.
    A script without ``if __name__ == "__main__":`` would then run again in every worker: create
    datasets again, start evals of its own. Our workers get the task function by value instead, so the
    children are started while ``__main__`` looks like an interactive session's (no file, no spec), for
    which multiprocess leaves the child's ``__main__`` alone. Only ``Process.start()`` runs meanwhile,
    under a lock so that concurrent runs restore the real module.
    """
    if not skip:
        yield
        return
    with _MAIN_LOCK:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


_MAIN_LOCK = threading.Lock()


class _StderrForwarder:
    """Forwards what each worker writes to stderr to this process's stderr, keeping its last bytes.

    Each worker's file descriptor 2 is the write end of its own pipe; a daemon thread here copies the
    pipes to this process's descriptor 2 as data arrives, so output shows as it would without the pipes,
    and an error about a worker can quote the worker's last lines.
    """

    def __init__(self, context: Any, count: int) -> None:
        pipes = [context.Pipe(duplex=False) for _ in range(count)]
        self._readers = [reader for reader, _ in pipes]
        self.writers = [writer for _, writer in pipes]
        """The write ends, one per worker: passed to the workers, closed here once they started."""
        self._tails = [bytearray() for _ in range(count)]
        self._fatal: dict[int, bytes] = {}  # per worker: the last "Fatal Python error" line it wrote
        self._open = {reader.fileno(): index for index, reader in enumerate(self._readers)}
        # Serialises reads, so tail() can drain a pipe while the thread is also reading.
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = os.pipe()
        self._thread: threading.Thread | None = None
        for reader in self._readers:
            os.set_blocking(reader.fileno(), False)

    def start(self) -> None:
        """Close this process's copies of the write ends (the workers hold theirs) and start forwarding."""
        for writer in self.writers:
            writer.close()
        self._thread = start_thread("stderr-forwarder", self._forward)

    def _forward(self) -> None:
        while True:
            with self._lock:
                watched = list(self._open)
            if not watched:
                return
            try:
                ready = multiprocess.connection.wait([*watched, self._wake_read])
            except OSError:
                return  # closed under us by close() after its timeout
            if self._wake_read in ready:
                return
            with self._lock:
                for fd in ready:
                    self._read_available(cast(int, fd))

    def _read_available(self, fd: int) -> None:
        """Read what is in one pipe now (lock held); forward it and keep its tail."""
        index = self._open.get(fd)
        while index is not None:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not data:
                del self._open[fd]  # every write end is closed: the worker and its children are gone
                return
            _write_stderr(data)
            tail = self._tails[index]
            tail += data
            # A crash dump (faulthandler) names its cause on its first line; with many threads the dump
            # can outgrow the tail, so that line is kept as it goes by.
            fatal = tail.rfind(b"Fatal Python error")
            if fatal >= 0 and b"\n" in tail[fatal:]:
                self._fatal[index] = bytes(tail[fatal : tail.index(b"\n", fatal)])
            del tail[:-_TAIL_BYTES]

    def tail(self, index: int) -> str:
        """The last lines worker ``index`` wrote to stderr, indented, or '' if it wrote nothing."""
        with self._lock:
            self._read_available(self._readers[index].fileno())
            text = self._tails[index].decode(errors="replace")
            fatal = self._fatal.get(index, b"").decode(errors="replace")
        lines = [line for line in text.rstrip().splitlines() if line.strip()]
        shown = lines[-_TAIL_LINES:]
        # A crash dump names its cause on its first line and lists the crashing frame first: when that
        # line has scrolled out of what is shown, show it first.
        if fatal and fatal not in shown:
            shown = [fatal, "...", *shown]
        return "\n".join(f"    {line}" for line in shown)

    def close(self) -> None:
        """Forward what is left (the workers are gone), stop the thread, close the pipes."""
        with self._lock:
            for fd in list(self._open):
                self._read_available(fd)
        os.write(self._wake_write, b"x")
        if self._thread is not None:
            self._thread.join(_FORWARD_JOIN_TIMEOUT)
        for reader in self._readers:
            reader.close()
        for writer in self.writers:
            writer.close()
        os.close(self._wake_read)
        os.close(self._wake_write)


def _write_stderr(data: bytes) -> None:
    """Write bytes to this process's descriptor 2, where a worker's own output would have gone."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(2, view)
        except OSError:
            return  # no usable stderr here: drop the output rather than fail the run
        view = view[written:]


@contextlib.contextmanager
def _inherited_objects_frozen(forking: bool) -> Iterator[None]:
    """Fork with every existing object in the collector's permanent generation (CPython's advice for
    fork): a forked worker then never collects what it inherited. Garbage the parent had not collected
    yet may hold native state that is only valid in the parent (clients of Ray, gRPC or Arrow whose
    threads did not cross the fork); collected in a worker, it crashed it (a segfault while
    "Garbage-collecting", seen after Ray Data had run in the parent). The parent unfreezes at once."""
    if not forking:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
