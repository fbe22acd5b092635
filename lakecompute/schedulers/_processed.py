"""The processed scheduler: tasks run in a small pool of worker processes. This module is the parent's side.

Everything here runs in the process that called `ProcessedScheduler.run`: starting the pool, queueing
tasks, reading results, noticing dead workers and stopping the pool. What runs inside a worker process
(its main loop, crash handler, orphan watch and reseeding) is in ``_processed_worker``.

Built on the ``multiprocess`` package (``multiprocessing`` with dill pickling, so closures and lambdas
work as task functions). Not ``multiprocess.Pool``: a Pool hangs when a worker is killed, and it cannot
say which task the dead worker held. This pool is small enough to reason about:

- ``num_workers`` processes, started per `ProcessedScheduler.run` and stopped when it ends; they
  run many tasks each, so per-worker state can live in module globals of the worker.
- One task queue (parent → workers) and one result pipe per worker (worker → parent), read without
  ever blocking (`_frames`): a worker killed halfway through sending a large result cannot leave the
  parent waiting for the rest. Tasks are pickled in the parent before they are queued
  (`_transport`), so one that cannot be pickled stops the run at once. A worker sends ``ready``
  once it has started, ``started`` before it calls the task function (so the parent always knows
  which task each worker holds), then ``progress`` increments, then ``done`` or ``error``.
- The parent waits on the result pipes *and* on the process sentinels, so a worker that dies (killed,
  segfault, ``os._exit``) is noticed at once and reported as `WorkerDiedError`, with what the
  worker last wrote to stderr: each worker's stderr goes through a pipe that the parent forwards to its
  own stderr, keeping the last lines.
- Workers never run the user's ``__main__`` again. Forked workers share it; spawned workers and
  workers started by the fork server get the task function by value (with the globals it uses) and
  are started as if ``__main__`` had no file, so a script without ``if __name__ == "__main__":`` runs
  once, in the parent only.
- Each worker reseeds the global random generators as it starts (`reseed_globals`).
- Each worker leads its own process group, and the group is killed when the run ends: processes that
  user code started in a task never outlive the run.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import itertools
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal, TypeVar, cast

import multiprocess
import multiprocess.connection
import multiprocess.forkserver

from lakecompute.errors import InvalidArgumentError, InvalidTypeError, WorkerDiedError
from lakecompute.parsing import DevicesLike, parse_devices
from lakecompute.schedulers._base import (
    PAUSE,
    Job,
    ProgressFn,
    Results,
    Scheduler,
    TaskFn,
    describe_task,
    pause_error,
)
from lakecompute.schedulers._devices import CUDA_VISIBLE, Placement, cuda_initialised, place_workers
from lakecompute.schedulers._frames import FrameReader
from lakecompute.schedulers._processed_worker import worker_main
from lakecompute.schedulers._transport import (
    PickledError,
    dump,
    dump_task,
    load,
    load_result,
    rebuild_exception,
)

__all__ = ["DEFAULT_PRELOAD", "ProcessedScheduler", "StartMethod"]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

StartMethod = Literal["fork", "forkserver", "spawn"]
_START_METHODS: tuple[str, ...] = ("fork", "forkserver", "spawn")

DEFAULT_PRELOAD: tuple[str, ...] = ("lakecompute",)
"""What the fork server imports once, before it forks any worker (``start_method="forkserver"``):
lakecompute with numpy, zarr and Pillow, about half a second that each worker then does not pay."""

# How long a worker that was asked to stop may take to exit before it is terminated, and how long a
# terminated worker may take before it is killed (seconds).
_GRACEFUL_EXIT_TIMEOUT = 5.0
_TERMINATE_TIMEOUT = 2.0
# How much of a worker's stderr is kept for error messages: its last bytes, then its last lines.
_TAIL_BYTES = 8192
_TAIL_LINES = 20
# How long the stderr forwarding thread may take to finish once the workers are gone (seconds).
_FORWARD_JOIN_TIMEOUT = 1.0


class ProcessedScheduler(Scheduler):
    """Runs tasks in ``num_workers`` worker processes.

    Task functions may be module-level functions, closures or lambdas (they are pickled with dill);
    functions defined in the script you run travel by value, so workers never run the script again.
    Tasks, results and exceptions cross the process boundary, so keep them small: describe work (an
    index range), and return metadata rather than arrays.

    An exception raised by a task is raised again in the parent as itself (its ``__cause__`` chain
    included), with the worker's formatted traceback in its ``remote_traceback`` attribute and as a
    note. An exception that cannot be pickled arrives as `RemoteError`. A task that cannot be
    pickled raises `UnpicklableTaskError` before it is queued. A worker that dies raises
    `WorkerDiedError`, naming the task it held and ending with what it wrote to stderr.

    **Devices and CUDA.** With ``devices``, worker ``k`` is placed on device ``k % len(devices)``: it sets
    ``CUDA_VISIBLE_DEVICES`` to that one GPU as it starts, before the task function (and the user's
    imports) is unpickled, so CUDA shows it one GPU, ``cuda:0`` (`worker_device`). Such workers are
    never forked from the calling process (a fork inherits the caller's CUDA state, and torch's cached
    device count): they start from the fork server (or by spawn). Without devices, workers are forked
    by default; when the caller has initialised CUDA (``torch.cuda.is_initialized()``), in which a forked
    child cannot use CUDA, a run starts them from the fork server instead, and an explicit
    ``start_method="fork"`` is refused with an error that says so.
    """

    name: ClassVar[str] = "processed"

    def __init__(
        self,
        num_workers: int = 1,
        start_method: StartMethod | None = None,
        preload: Sequence[str] | None = None,
        devices: DevicesLike = None,
    ) -> None:
        """Create the scheduler.

        Args:
            num_workers: the number of worker processes, at least 1.
            start_method: how workers are started: ``"fork"`` (the default on Linux: fastest, and
                fine for local zarr stores), ``"spawn"`` (the default elsewhere) or ``"forkserver"``
                (a clean server process, started once, forks the workers: ~0.6 s for the first run,
                ~50 ms after; for storage clients that must not be forked, such as S3's).
            preload: modules the fork server imports once before forking any worker (forkserver
                only); default `DEFAULT_PRELOAD`, and torch too (when installed) for workers placed on
                devices: importing torch does not initialise CUDA, and workers then start without
                importing it again. The fork server is started by the first forkserver run of the
                process, with the preload of that run.
            devices: ``"cuda"`` (every GPU this process sees) or GPU indices (``[0, 1]``, in this
                process's numbering; repeat one to put several workers on it): one per worker, round
                robin. None (the default): workers are not placed.

        Raises:
            InvalidArgumentError: if ``num_workers`` is less than 1, ``start_method`` is unknown or
                ``"fork"`` with ``devices``, ``preload`` names ``__main__``, or ``devices`` names no GPU
                this process sees.
        """
        super().__init__(num_workers)
        if self.num_workers < 1:
            raise InvalidArgumentError(
                f"Expected num_workers >= 1 for the processed scheduler. Got {num_workers!r}. "
                "Use get_scheduler('processed', 0) or SerialScheduler() to run in the calling process."
            )
        if start_method is not None and start_method not in _START_METHODS:
            raise InvalidArgumentError(
                f"Expected start_method to be one of {list(_START_METHODS)!r} or None. Got {start_method!r}."
            )
        self._explicit_start = start_method is not None
        placement = place_workers(parse_devices("devices", devices))
        self._placement = placement
        start_method = _start_method(start_method, placement)
        modules = tuple(DEFAULT_PRELOAD if preload is None else preload)
        if "__main__" in modules:
            raise InvalidArgumentError(
                f"Expected preload to name importable modules. Got {list(modules)!r}, with '__main__': "
                "workers never run your script again (its functions travel by value). Leave it out."
            )
        self._start_method: StartMethod = start_method
        self._preload = modules
        self._default_preload = preload is None

    @property
    def start_method(self) -> StartMethod:
        """How worker processes are started (a run of a forking scheduler in a caller that initialised
        CUDA starts them from the fork server instead, see the class documentation)."""
        return self._start_method

    @property
    def placement(self) -> Placement | None:
        """The devices the workers are placed on, or None."""
        return self._placement

    def with_devices(self, placement: Placement) -> Scheduler:
        """This scheduler with worker ``k`` on device ``k % len(placement)`` (workers never forked)."""
        start = self._start_method if self._explicit_start else None
        copy = ProcessedScheduler(self.num_workers, start_method=start, preload=self._preload)
        copy._default_preload = self._default_preload
        copy._placement = placement
        copy._start_method = _start_method(start, placement)
        return copy

    @property
    def preload(self) -> tuple[str, ...]:
        """What the fork server imports before forking workers (``start_method="forkserver"``)."""
        if self._default_preload and self._placement is not None and importlib.util.find_spec("torch"):
            return (*self._preload, "torch")
        return self._preload

    @property
    def needs_fork_safe_storage(self) -> bool:
        """True with ``start_method="fork"``: workers are forked from the calling process."""
        return self._start_method == "fork"

    def without_fork(self) -> Scheduler:
        """This scheduler with ``start_method="forkserver"`` if it forks workers, else itself."""
        if self._start_method != "fork":
            return self
        copy = ProcessedScheduler(self.num_workers, start_method="forkserver", preload=self._preload)
        copy._default_preload = self._default_preload
        copy._placement = self._placement
        return copy

    def _run_start_method(self) -> StartMethod:
        """How this run starts its workers: never by fork once this process has initialised CUDA."""
        if self._start_method != "fork" or not cuda_initialised():
            return self._start_method
        if self._explicit_start:
            raise InvalidArgumentError(
                "This process has initialised CUDA (torch.cuda.is_initialized() is True), and a worker "
                "forked from it cannot use CUDA (torch: 'Cannot re-initialize CUDA in forked subprocess'). "
                "Use start_method='forkserver' or 'spawn', or leave start_method=None: then workers start "
                "from the fork server."
            )
        return "forkserver"

    def __repr__(self) -> str:
        devices = "" if self._placement is None else f", devices={list(self._placement.entries)!r}"
        return (
            f"ProcessedScheduler(num_workers={self.num_workers}, start_method={self.start_method!r}{devices})"
        )

    def _run(self, job: Job[TaskT, ResultT]) -> Results[ResultT]:
        """The generator behind `run`; an empty input starts no process.

        Raises:
            WorkerDiedError: if a worker process dies, or fails while starting.
            UnpicklableTaskError: if a task cannot be pickled.
            RemoteError: if a task raised an exception that cannot be pickled.
        """
        tasks = job.nonempty_tasks()
        if tasks is None:
            return
        on_progress = job.on_progress
        pool = _Pool(self._run_start_method(), self.preload, self.num_workers, job.fn, self._placement)
        finished = False
        try:
            pool.start()
            feed = _Feed(pool, tasks, job.limit)
            feed.refill()
            while feed.outstanding:
                dead = pool.wait()
                # Read every message already sent. A dead worker wrote its messages (synchronously)
                # before it died, so after this drain the parent knows which task it was running.
                for message in pool.drain():
                    done = _handle(message, pool, feed, on_progress)
                    if done is not None:
                        yield done[0], cast(ResultT, done[1])
                        # Tasks are taken after the consumer took the result, not before: a task source
                        # that counts the results its consumer took (a rank's, see _ranks) then sees the
                        # tasks outstanding here as they are when it is asked for the next one.
                        feed.resume()
                        feed.refill()
                if dead is not None:
                    raise pool.died_error(dead, feed.outstanding)
            finished = True
        finally:
            # Success: let the workers exit on their own (they run their exit hooks). Failure, or the
            # consumer stopped early: terminate them now, without waiting for long tasks.
            pool.stop(graceful=finished)


class _Feed:
    """Takes tasks from the input lazily and queues them: never more than ``limit`` outstanding."""

    def __init__(self, pool: _Pool, tasks: Iterator[Any], limit: int) -> None:
        self._pool = pool
        self._tasks = tasks
        self._limit = limit
        self._positions = itertools.count()
        self._exhausted = False
        self._paused = False
        self.outstanding: dict[int, Any] = {}
        """Tasks queued and not completed yet, by position."""

    def resume(self) -> None:
        """After the consumer took a result: end a pause and take tasks again."""
        if self._paused:
            self._paused = False
            self.refill()

    def refill(self) -> None:
        # Bounded, so that a streamed input stays bounded in memory, here and in the task queue.
        while not self._exhausted and not self._paused and len(self.outstanding) < self._limit:
            try:
                task = next(self._tasks)
            except StopIteration:
                self._exhausted = True
                return
            if task is PAUSE:
                if not self.outstanding:
                    raise pause_error()
                self._paused = True  # until a result has been taken: see resume()
                return
            position = next(self._positions)
            self._pool.submit(position, task)
            self.outstanding[position] = task


def _handle(
    message: tuple[Any, ...], pool: _Pool, feed: _Feed, on_progress: ProgressFn | None
) -> tuple[int, Any] | None:
    """Act on one message from a worker; return ``(position, result)`` for a completed task."""
    kind = message[0]
    if kind == "progress":
        if on_progress is not None:
            on_progress(message[2])
    elif kind == "done":
        position = message[2]
        del feed.outstanding[position]
        return position, load_result(message[3], "parent process")
    elif kind == "error":
        raise rebuild_exception(message[3])
    elif kind == "start-failed":
        raise pool.start_failed_error(message[1], message[2])
    return None


class _Pool:
    """The worker processes of one run, and the channels to them."""

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
                    ),
                    name=f"lakecompute-worker-{index}",
                    # Daemonic: if the parent exits without stopping the pool, multiprocess terminates them.
                    daemon=True,
                )
                process.start()
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

    def wait(self) -> Any | None:
        """Block until a message arrives or a worker dies; return a dead worker process, if any."""
        sentinels = [process.sentinel for process in self._processes]
        multiprocess.connection.wait([*(inbox.fd for inbox in self._inboxes), *sentinels])
        for process in self._processes:
            # Any exit is a death: workers only exit when stop() asks them to.
            if process.exitcode is not None:
                return process
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
        """Stop every worker and what it started, and release the channels; never blocks for long."""
        if graceful:
            # Workers are idle, waiting for tasks: one None each tells them to exit.
            for _ in self._processes:
                self._tasks.put(None)
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


def _start_method(start_method: StartMethod | None, placement: Placement | None) -> StartMethod:
    """The start method asked for, or the default: fork on Linux, except for workers placed on devices
    (they start from the fork server: a forked child inherits the caller's CUDA state); spawn elsewhere.

    Raises:
        InvalidArgumentError: ``"fork"`` asked for with devices.
    """
    if placement is not None and start_method == "fork":
        raise InvalidArgumentError(
            f"start_method='fork' cannot be used with devices: a forked worker inherits this process's CUDA "
            f"state (and torch's device count), so {CUDA_VISIBLE} set in the worker could not take effect. "
            "Use start_method='forkserver' or 'spawn', or leave it None (the fork server)."
        )
    if start_method is not None:
        return start_method
    if not sys.platform.startswith("linux"):
        return "spawn"
    return "fork" if placement is None else "forkserver"


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
        self._thread = threading.Thread(
            target=self._forward, name="lakecompute-stderr-forwarder", daemon=True
        )
        self._thread.start()

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
