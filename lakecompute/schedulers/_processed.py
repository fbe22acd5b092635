"""The processed scheduler: tasks run in a small pool of worker processes.

Built on the ``multiprocess`` package (``multiprocessing`` with dill pickling, so closures and lambdas
work as task functions). Not ``multiprocess.Pool``: a Pool hangs when a worker is killed, and it cannot
say which task the dead worker held. This pool is small enough to reason about:

- ``num_workers`` processes, started per `ProcessedScheduler.run` and stopped when it ends; they
  run many tasks each, so per-worker state can live in module globals of the worker.
- One task queue (parent → workers) and one result pipe (workers → parent). A worker sends
  ``started`` before it calls the task function, so the parent always knows which task each worker
  holds, then ``progress`` increments, then ``done`` or ``error``.
- The parent waits on the result pipe *and* on the process sentinels, so a worker that dies (killed,
  segfault, ``os._exit``) is noticed at once and reported as `WorkerDiedError`.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar, cast

import multiprocess
import multiprocess.connection
import multiprocess.reduction

from lakecompute.errors import InvalidArgumentError, InvalidTypeError, RemoteError, WorkerDiedError
from lakecompute.schedulers._base import (
    ProgressFn,
    Scheduler,
    TaskFn,
    _set_process_worker_id,
    describe_task,
)

__all__ = ["ProcessedScheduler", "StartMethod"]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

StartMethod = Literal["fork", "forkserver", "spawn"]
_START_METHODS: tuple[str, ...] = ("fork", "forkserver", "spawn")

# A worker sends coalesced progress at most this often (seconds); the rest is summed until then, and
# always flushed before the task's result, so no increment is lost.
_PROGRESS_INTERVAL = 0.1
# How long a worker that was asked to stop may take to exit before it is terminated, and how long a
# terminated worker may take before it is killed (seconds).
_GRACEFUL_EXIT_TIMEOUT = 5.0
_TERMINATE_TIMEOUT = 2.0
# How often a worker checks that its parent is still alive (seconds).
_ORPHAN_CHECK_INTERVAL = 1.0
# How many links of an exception's __cause__ chain are sent back from a worker.
_MAX_CAUSES = 16


@dataclass(frozen=True, slots=True)
class _PickledException:
    """One link of an exception chain, as a worker sends it."""

    data: bytes | None
    """The pickled exception, or None if it could not be pickled and unpickled again."""
    type_name: str
    """The qualified name of the exception's type."""
    message: str
    """``str()`` of the exception."""


@dataclass(frozen=True, slots=True)
class _PickledError:
    """A task's failure, as a worker sends it."""

    chain: tuple[_PickledException, ...]
    """The exception first, then its ``__cause__``, that one's ``__cause__``, and so on."""
    traceback_text: str
    """The formatted traceback in the worker, causes included."""


class ProcessedScheduler(Scheduler):
    """Runs tasks in ``num_workers`` worker processes.

    Task functions may be module-level functions, closures or lambdas (they are pickled with dill).
    Tasks, results and exceptions cross the process boundary, so keep them small: describe work (an
    index range), and return metadata rather than arrays.

    An exception raised by a task is raised again in the parent as itself (its ``__cause__`` chain
    included), with the worker's formatted traceback in its ``remote_traceback`` attribute and as a
    note. An exception that cannot be pickled arrives as `RemoteError`. A worker that dies
    raises `WorkerDiedError`, naming the task it held.
    """

    name: ClassVar[str] = "processed"

    def __init__(self, num_workers: int = 1, start_method: StartMethod | None = None) -> None:
        """Create the scheduler.

        Args:
            num_workers: the number of worker processes, at least 1.
            start_method: how workers are started: ``"fork"`` (the default on Linux: fastest, and
                fine for local zarr stores), ``"spawn"`` (the default elsewhere) or ``"forkserver"``.

        Raises:
            InvalidArgumentError: if ``num_workers`` is less than 1 or ``start_method`` is unknown.
        """
        super().__init__(num_workers)
        if self.num_workers < 1:
            raise InvalidArgumentError(
                f"Expected num_workers >= 1 for the processed scheduler. Got {num_workers!r}. "
                "Use get_scheduler('processed', 0) or SerialScheduler() to run in the calling process."
            )
        if start_method is None:
            start_method = "fork" if sys.platform.startswith("linux") else "spawn"
        if start_method not in _START_METHODS:
            raise InvalidArgumentError(
                f"Expected start_method to be one of {list(_START_METHODS)!r} or None. Got {start_method!r}."
            )
        self._start_method: StartMethod = start_method

    @property
    def start_method(self) -> StartMethod:
        """How worker processes are started."""
        return self._start_method

    def __repr__(self) -> str:
        return f"ProcessedScheduler(num_workers={self.num_workers}, start_method={self.start_method!r})"

    def _run(
        self,
        fn: TaskFn[TaskT, ResultT],
        tasks: Iterable[TaskT],
        on_progress: ProgressFn | None,
        limit: int,
    ) -> Generator[tuple[int, ResultT], None, None]:
        """The generator behind `run`.

        Raises:
            WorkerDiedError: if a worker process dies while the run is going on.
            RemoteError: if a task raised an exception that cannot be pickled.
        """
        iterator = iter(tasks)
        # Look at the first task before starting any process: an empty input costs nothing.
        try:
            first = next(iterator)
        except StopIteration:
            return
        pool = _Pool(self._start_method, self.num_workers, fn)
        finished = False
        try:
            pool.start()
            outstanding: dict[int, Any] = {}
            pending = itertools.chain([first], iterator)
            positions = itertools.count()
            exhausted = False

            def refill() -> None:
                nonlocal exhausted
                # Pull lazily: never more than `limit` tasks outstanding, so a streamed input stays
                # bounded in memory, here and in the task queue.
                while not exhausted and len(outstanding) < limit:
                    try:
                        task = next(pending)
                    except StopIteration:
                        exhausted = True
                        return
                    position = next(positions)
                    outstanding[position] = task
                    pool.submit(position, task)

            refill()
            while outstanding:
                dead = pool.wait()
                # Read every message already sent. A dead worker wrote its messages (synchronously)
                # before it died, so after this drain the parent knows which task it was running.
                for message in pool.drain():
                    kind = message[0]
                    if kind == "progress":
                        if on_progress is not None:
                            on_progress(message[2])
                    elif kind == "done":
                        position = message[2]
                        del outstanding[position]
                        value = pool.load_result(message[3])
                        refill()
                        yield position, cast(ResultT, value)
                    elif kind == "error":
                        raise _rebuild_exception(message[3])
                if dead is not None:
                    raise pool.died_error(dead, outstanding)
            finished = True
        finally:
            # Success: let the workers exit on their own (they run their exit hooks). Failure, or the
            # consumer stopped early: terminate them now, without waiting for long tasks.
            pool.stop(graceful=finished)


class _Pool:
    """The worker processes of one run, and the channels to them."""

    def __init__(self, start_method: StartMethod, num_workers: int, fn: TaskFn[Any, Any]) -> None:
        self._context = multiprocess.get_context(start_method)
        self._num_workers = num_workers
        self._fn = fn
        # Parent → workers. A Queue (with its feeder thread) so that putting a task never blocks the
        # parent, even when the pipe is full and every worker is busy.
        self._tasks = self._context.Queue()
        # Workers → parent. A plain pipe written under a lock, synchronously: a message is in the pipe
        # before the worker goes on, so nothing a worker sent is lost when it is killed right after.
        self._reader, self._writer = self._context.Pipe(duplex=False)
        self._write_lock = self._context.Lock()
        self._processes: list[Any] = []
        # Which task each worker is running: worker index → position.
        self._running: dict[int, int] = {}

    def start(self) -> None:
        """Start the worker processes."""
        parent_pid = os.getpid()
        for index in range(self._num_workers):
            process = self._context.Process(
                target=_worker_main,
                args=(index, parent_pid, self._fn, self._tasks, self._writer, self._write_lock),
                name=f"lakecompute-worker-{index}",
                # Daemonic: if the parent exits without stopping the pool, multiprocess terminates them.
                daemon=True,
            )
            process.start()
            self._processes.append(process)

    def submit(self, position: int, task: Any) -> None:
        """Queue a task for the workers."""
        self._tasks.put((position, task))

    def wait(self) -> Any | None:
        """Block until a message arrives or a worker dies; return a dead worker process, if any."""
        sentinels = [process.sentinel for process in self._processes]
        multiprocess.connection.wait([self._reader, *sentinels])
        for process in self._processes:
            # Any exit is a death: workers only exit when stop() asks them to.
            if process.exitcode is not None:
                return process
        return None

    def drain(self) -> Iterator[tuple[Any, ...]]:
        """Yield the messages already in the result pipe (and those arriving meanwhile)."""
        while self._reader.poll():
            message = cast(
                tuple[Any, ...], multiprocess.reduction.ForkingPickler.loads(self._reader.recv_bytes())
            )
            kind, index = message[0], message[1]
            if kind == "started":
                self._running[index] = message[2]
            elif kind in ("done", "error"):
                self._running.pop(index, None)
            yield message

    def load_result(self, data: bytes) -> Any:
        """Unpickle a task's result in the parent."""
        try:
            return multiprocess.reduction.ForkingPickler.loads(data)
        except Exception as exc:
            raise InvalidTypeError(
                f"The result of a task could not be unpickled in the parent process: {exc!r}. "
                "Return plain data (numbers, strings, lists, dicts, numpy arrays) from the task function."
            ) from exc

    def died_error(self, process: Any, outstanding: dict[int, Any]) -> WorkerDiedError:
        """Build the error for a worker that died."""
        index = self._processes.index(process)
        code: int = process.exitcode
        if code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        else:
            how = f"exit code {code}"
        position = self._running.get(index)
        if position is None or position not in outstanding:
            return WorkerDiedError(
                f"Worker process {index} (pid {process.pid}) died with {how} while not running a task. "
                "Something outside lakecompute killed it (for example the out-of-memory killer).",
                task=None,
                exitcode=code,
            )
        task = outstanding[position]
        return WorkerDiedError(
            f"Worker process {index} (pid {process.pid}) died with {how} while running task "
            f"{describe_task(task)}. The task may have crashed the interpreter (for example a segfault in "
            "native code) or the system may have killed it (for example when out of memory); run it with "
            "num_workers=0 to debug it in this process.",
            task=task,
            exitcode=code,
        )

    def stop(self, graceful: bool) -> None:
        """Stop every worker and release the channels; never blocks for long."""
        if graceful:
            # Workers are idle, waiting for tasks: one None each tells them to exit.
            for _ in self._processes:
                self._tasks.put(None)
            deadline = time.monotonic() + _GRACEFUL_EXIT_TIMEOUT
            for process in self._processes:
                process.join(max(0.0, deadline - time.monotonic()))
        # terminate() sends SIGTERM (workers restore its default action at start-up); kill() is for a
        # worker stuck where SIGTERM cannot reach it.
        for process in self._processes:
            if process.exitcode is None:
                process.terminate()
        deadline = time.monotonic() + _TERMINATE_TIMEOUT
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            if process.exitcode is None:
                process.kill()
                process.join()
            # Release the sentinel's file descriptor now rather than when the object is collected.
            process.close()
        # The queue's feeder thread may still hold tasks nobody will read: drop them rather than
        # block the interpreter's exit flushing them.
        self._tasks.cancel_join_thread()
        self._tasks.close()
        self._reader.close()
        self._writer.close()


def _worker_main(
    index: int,
    parent_pid: int,
    fn: TaskFn[Any, Any],
    tasks: Any,
    writer: Any,
    write_lock: Any,
) -> None:
    """The body of a worker process: run tasks from the queue until told to stop."""
    # Ctrl-C in a terminal reaches the whole process group. The parent turns it into KeyboardInterrupt
    # and terminates the workers; workers that also raised it would die with noisy tracebacks, or die
    # between two messages.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker inherits the parent's Python-level SIGTERM handler, if the application set one;
    # terminate() must kill the worker, not run the parent's handler.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _set_process_worker_id(index)
    _start_orphan_watchdog(parent_pid)

    def send(message: tuple[Any, ...]) -> None:
        data = multiprocess.reduction.ForkingPickler.dumps(message)
        with write_lock:
            writer.send_bytes(data)

    while True:
        item = tasks.get()
        if item is None:
            return
        position, task = item
        send(("started", index, position))
        progress = _Progress(send, index)
        try:
            value = fn(task, progress)
        except BaseException as exc:
            progress.flush()
            send(("error", index, position, _pickle_exception(exc)))
            continue
        progress.flush()
        try:
            data = multiprocess.reduction.ForkingPickler.dumps(value)
        except Exception as exc:
            error = InvalidTypeError(
                f"The result of task {describe_task(task)} cannot be sent from the worker process: {exc}. "
                "Return plain data (numbers, strings, lists, dicts, numpy arrays) from the task function."
            )
            error.__cause__ = exc
            send(("error", index, position, _pickle_exception(error)))
            continue
        send(("done", index, position, bytes(data)))


class _Progress:
    """The ``progress`` function a task gets in a worker: sums increments and sends them now and then."""

    def __init__(self, send: Any, index: int) -> None:
        self._send = send
        self._index = index
        self._pending = 0
        # The first increment goes out at once, so a progress bar moves as soon as work starts.
        self._last_sent = float("-inf")

    def __call__(self, increment: int) -> None:
        self._pending += increment
        now = time.monotonic()
        # Coalesce: one message per interval rather than one per sample keeps the pipe quiet.
        if now - self._last_sent >= _PROGRESS_INTERVAL:
            self.flush()
            self._last_sent = now

    def flush(self) -> None:
        """Send what has been summed so far."""
        if self._pending:
            self._send(("progress", self._index, self._pending))
            self._pending = 0


def _start_orphan_watchdog(parent_pid: int) -> None:
    """Exit the worker if its parent dies without stopping it (e.g. the parent was killed with SIGKILL)."""
    # With forkserver the parent of a worker is the fork server, not `parent_pid`; either way the worker
    # is re-parented when the process that started it dies, which is what this watches for.
    expected = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(_ORPHAN_CHECK_INTERVAL)
            if os.getppid() != expected:
                os._exit(1)

    threading.Thread(target=watch, name=f"lakecompute-orphan-watchdog-{parent_pid}", daemon=True).start()


def _pickle_exception(exc: BaseException) -> _PickledError:
    """Prepare an exception and its ``__cause__`` chain to be sent to the parent."""
    chain: list[_PickledException] = []
    link: BaseException | None = exc
    seen: set[int] = set()
    while link is not None and id(link) not in seen and len(chain) < _MAX_CAUSES:
        seen.add(id(link))
        chain.append(_pickle_one(link))
        link = link.__cause__
    text = "".join(traceback.format_exception(exc))
    return _PickledError(chain=tuple(chain), traceback_text=text)


def _pickle_one(exc: BaseException) -> _PickledException:
    """Pickle one exception, checking here that it can also be unpickled."""
    kind = type(exc)
    type_name = f"{kind.__module__}.{kind.__qualname__}"
    try:
        message = str(exc)
    except Exception:
        message = f"<{type_name} whose str() failed>"
    data: bytes | None
    try:
        data = bytes(multiprocess.reduction.ForkingPickler.dumps(exc))
        # Many exceptions pickle but fail to unpickle (an __init__ with other arguments than .args);
        # try it here so that the parent gets a RemoteError, not an unpickling failure.
        copy = multiprocess.reduction.ForkingPickler.loads(data)
        if type(copy) is not kind:
            data = None
    except Exception:
        data = None
    return _PickledException(data=data, type_name=type_name, message=message)


def _rebuild_exception(error: _PickledError) -> BaseException:
    """Rebuild in the parent the exception a worker sent, causes included."""
    links: list[BaseException] = []
    for link in error.chain:
        rebuilt: BaseException | None = None
        if link.data is not None:
            try:
                rebuilt = cast(BaseException, multiprocess.reduction.ForkingPickler.loads(link.data))
            except Exception:
                rebuilt = None
        if rebuilt is None:
            rebuilt = RemoteError(link.type_name, link.message, error.traceback_text)
        links.append(rebuilt)
    for outer, inner in itertools.pairwise(links):
        outer.__cause__ = inner
    exc = links[0]
    try:
        exc.remote_traceback = error.traceback_text  # type: ignore[attr-defined]  # an attribute we add
        if not isinstance(exc, RemoteError):
            # Shown under the parent's traceback, so the user sees where in their code it failed.
            # (A RemoteError's message already holds the worker's traceback.)
            exc.add_note(f"Traceback in the worker process:\n{error.traceback_text.rstrip()}")
    except Exception:
        # An exception type with __slots__ or a read-only __dict__ keeps its message, if not the extras.
        pass
    return exc
