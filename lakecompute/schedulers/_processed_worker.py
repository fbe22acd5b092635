"""The worker side of the processed scheduler: runs in each worker process, never in the parent.

A worker started by `ProcessedScheduler` (in ``_processed``) runs `worker_main`: it routes its stderr
to the parent, installs its own crash handler, ignores Ctrl-C (the parent stops it), leads its own
process group, starts a thread that ends it if the parent dies (the orphan watch), reseeds the global
random generators, then takes tasks from the queue and sends ``ready``, ``started``, ``progress``,
``done`` and ``error`` messages through its own result pipe until a None tells it to stop.
"""

from __future__ import annotations

import faulthandler
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lakecompute.schedulers._base import (
    TaskFn,
    _set_lookahead,
    _set_process_device,
    _set_process_worker_id,
    call_task,
    usable_cpus,
)
from lakecompute.schedulers._devices import CUDA_VISIBLE
from lakecompute.schedulers._frames import send_frame
from lakecompute.schedulers._seeding import reseed_globals
from lakecompute.schedulers._transport import dump, load, load_task, pickle_exception, unsendable_result
from lakecompute.threads import start_thread

__all__ = ["STOP_SIGNALS", "worker_main"]

#: The signals that stop a worker, blocked from its fork until it has set its own handlers (a worker
#: forked from a parent in an eval inherits handlers that would run the parent's code in the child).
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})

# A worker sends coalesced progress at most this often (seconds); the rest is summed until then, and
# always flushed before the task's result, so no increment is lost.
_PROGRESS_INTERVAL = 0.1
# How often a worker checks that its parent is still alive (seconds).
_ORPHAN_CHECK_INTERVAL = 1.0


def worker_main(
    index: int,
    parent_pid: int,
    by_fork_server: bool,
    payload: Any,
    tasks: Any,
    writer: Any,
    stderr: Any,
    device: str | None = None,
    workers: int = 1,
) -> None:
    """The body of a worker process: start, tell the parent, then run tasks until told to stop.

    ``device`` is the ``CUDA_VISIBLE_DEVICES`` entry of the one GPU this worker is placed on, or None.
    ``workers``: how many workers the pool has, for this one's share of the CPUs (`share_cpu_threads`).
    """
    # Threads that user code starts in a task may report progress too: one frame at a time.
    write_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        data = dump(message)
        with write_lock:
            send_frame(writer.fileno(), data)

    leads_group = _prepare_worker(index, parent_pid, by_fork_server, stderr)
    if device is not None:
        # Before the task function is unpickled: that imports the user's modules (torch among them), and
        # CUDA reads this variable once, when it is initialised.
        os.environ[CUDA_VISIBLE] = device
        _set_process_device("cuda:0")
    share_cpu_threads(workers, forked=not by_fork_server)
    try:
        fn = load(payload) if isinstance(payload, bytes) else payload
    except BaseException as exc:
        # E.g. the module of the task function cannot be imported here. Reported as itself, rather than
        # as a traceback on stderr and an exit code the parent would have to guess about.
        send(("start-failed", index, pickle_exception(exc)))
        return
    send(("ready", index, os.getpid(), leads_group))
    _serve(index, fn, tasks, send)


def share_cpu_threads(workers: int, forked: bool = False) -> int | None:
    """Give this worker's native thread pools its share of the CPUs, ``cpus // workers`` (at least one),
    as torch's DataLoader workers and Ray's tasks do: without it, each of n workers runs torch's
    operators on every core, and two workers on two cores ran a ResNet-18 2.2x slower than with one
    thread each (docs/transforms.md). Before the task function is unpickled: ``OMP_NUM_THREADS`` for
    libraries loaded from then on, and ``torch.set_num_threads`` if torch is already loaded (preloaded
    by the fork server, or inherited from the parent). A user's ``OMP_NUM_THREADS`` is left to decide,
    and a function may set its own threads later. Returns the share, or None when the user decides.

    A worker ``forked`` from a caller that has loaded torch runs torch's operators on one thread, as
    torch's DataLoader workers do, whatever the share: torch's OpenMP pool does not survive a fork. Once
    the caller has run a parallel operator, its pool's threads are gone in the child, and the child's
    first parallel operator with more than one thread waits for them forever (seen as a hung eval after
    a matmul in the caller). Workers started by the fork server (which never runs an operator) get the
    share."""
    torch = sys.modules.get("torch")
    set_threads = getattr(torch, "set_num_threads", None)
    if forked and set_threads is not None:
        set_threads(1)
    if "OMP_NUM_THREADS" in os.environ:
        return None
    share = max(1, usable_cpus() // max(1, workers))
    os.environ["OMP_NUM_THREADS"] = str(share)
    if not forked and set_threads is not None:
        set_threads(share)
    return share


def _prepare_worker(index: int, parent_pid: int, by_fork_server: bool, stderr: Any) -> bool:
    """Set up a new worker process; return whether it leads its own process group."""
    # stderr through the parent, which forwards it and keeps its tail for error messages.
    os.dup2(stderr.fileno(), 2)
    stderr.close()
    # A crash (segfault, abort) dumps its cause and the Python stack there, so WorkerDiedError can quote
    # it. Installed afresh (disable, then enable): a user's script rarely enables faulthandler, and an
    # inherited one may believe it is on while its handlers are gone (Ray's driver resets the fatal
    # signals' handlers; enable() alone then does nothing and the crash printed nothing).
    # fd 2, not sys.stderr: that may be an object without a file descriptor (pytest's capture).
    faulthandler.disable()
    faulthandler.enable(file=2, all_threads=True)
    # Ctrl-C in a terminal reaches the whole process group. The parent turns it into KeyboardInterrupt
    # and terminates the workers; workers that also raised it would die with noisy tracebacks, or die
    # between two messages.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker inherits the parent's Python-level SIGTERM handler, if the application set one;
    # terminate() must kill the worker, not run the parent's handler.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # The pool blocked both around the fork (see STOP_SIGNALS): one sent meanwhile is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    leads_group = _lead_own_group()
    _start_orphan_watchdog(parent_pid, by_fork_server, leads_group)
    _set_process_worker_id(index)
    # A forked worker would otherwise draw what its parent and its siblings draw.
    reseed_globals()
    return leads_group


def _lead_own_group() -> bool:
    """Make this worker lead its own process group, so that the parent can stop whatever user code
    starts here; return whether it does."""
    try:
        os.setpgid(0, 0)
        return os.getpgid(0) == os.getpid()
    except (OSError, AttributeError):  # AttributeError: no process groups on this platform
        return False


def _serve(index: int, fn: TaskFn[Any, Any], tasks: Any, send: Callable[[tuple[Any, ...]], None]) -> None:
    """Run tasks from the queue until a None says to stop (a task may take its successor early:
    `lakecompute.schedulers.take_next_task`)."""
    early = _Early(tasks)
    _set_lookahead(early.take)
    while True:
        item = early.pop()
        if item is _NOTHING:
            item = tasks.get()
            item = None if item is None else (*item, _NOTHING)
        if item is None:
            return
        position, data, loaded = item
        send(("started", index, position))
        progress = _Progress(send, index)
        try:
            task = load_task(data, position) if loaded is _NOTHING else loaded
            if isinstance(task, _LoadFailed):
                raise task.exc
            value = call_task(fn, task, progress)
        except BaseException as exc:
            progress.flush()
            send(("error", index, position, pickle_exception(exc)))
            continue
        progress.flush()
        try:
            result = dump(value)
        except Exception as exc:
            send(("error", index, position, pickle_exception(unsendable_result(task, exc, "worker process"))))
            continue
        send(("done", index, position, result))


#: No item (distinct from None, the queue's stop signal).
_NOTHING: Any = object()


class _LoadFailed:
    """A task taken early that did not unpickle: its error is raised when its turn comes, as if taken then."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Early:
    """The next item of the queue, taken while a task runs (`take`, on the task's threads) and run next
    (`pop`, by the worker's loop).

    Taken only when it can be at once: the queue's read lock is held by any worker blocked in ``get`` (an
    idle one), and then nothing is taken, so a busy worker never takes a task an idle worker would run.
    """

    def __init__(self, tasks: Any) -> None:
        self._tasks = tasks
        self._lock = threading.Lock()
        self._item: Any = _NOTHING

    def take(self) -> Any | None:
        with self._lock:
            if self._item is _NOTHING:
                try:
                    item = self._tasks.get(block=False)
                except queue.Empty:
                    return None
                if item is not None:
                    position, data = item
                    try:
                        loaded: Any = load_task(data, position)
                    except BaseException as exc:  # raised when the task's turn comes
                        loaded = _LoadFailed(exc)
                    item = (position, data, loaded)
                self._item = item
            item = self._item
        return None if item is None or isinstance(item[2], _LoadFailed) else item[2]

    def pop(self) -> Any:
        """The item taken early (a task, or None: stop), once; `_NOTHING` if none was."""
        with self._lock:
            item, self._item = self._item, _NOTHING
        return item


class _Progress:
    """The ``progress`` function a task gets in a worker: sums increments and sends them now and then."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None], index: int) -> None:
        self._send = send
        self._index = index
        self._pending = 0
        # The first increment goes out at once, so a progress bar moves as soon as work starts.
        self._last_sent = float("-inf")

    def __call__(self, increment: int) -> None:
        # progress(0) is the per-sample cancellation point; a worker process is stopped from outside,
        # so it has nothing to do here.
        if not increment:
            return
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


def _start_orphan_watchdog(parent_pid: int, by_fork_server: bool, leads_group: bool) -> None:
    """End the worker (and its process group) if its parent dies without stopping it (e.g. SIGKILL)."""
    # A worker is re-parented when the process that started it dies. Forked and spawned workers are
    # started by `parent_pid` itself: compared with it, not with the parent seen now, so that a parent
    # that died while this worker was starting is noticed too. Workers from the fork server are its
    # children (it exits when the process that started it dies); `parent_pid` is watched as well.
    expected = os.getppid() if by_fork_server else parent_pid

    def orphaned() -> bool:
        return os.getppid() != expected or (by_fork_server and not _running(parent_pid))

    def watch() -> None:
        while not orphaned():
            time.sleep(_ORPHAN_CHECK_INTERVAL)
        if leads_group:
            # This worker and whatever user code started in it.
            os.killpg(0, signal.SIGKILL)
        os._exit(1)

    start_thread(f"orphan-watchdog-{parent_pid}", watch)


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: existence only
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # The state follows the command name, which may hold spaces and parentheses.
    return stat[stat.rindex(")") + 2] not in "ZX"
