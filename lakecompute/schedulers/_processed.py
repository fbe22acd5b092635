"""The processed scheduler: tasks run in a small pool of worker processes. This module is the parent's side.

Everything here runs in the process that called `ProcessedScheduler.run`: choosing how workers start,
feeding tasks lazily and handing results on (this module); starting the pool, reading results, noticing
dead workers and stopping the pool (``_pool``). What runs inside a worker process (its main loop, crash
handler, orphan watch and reseeding) is in ``_processed_worker``.

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

import importlib.util
import itertools
import sys
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, TypeVar, cast

from lakecompute.errors import InvalidArgumentError
from lakecompute.parsing import DevicesLike, parse_devices
from lakecompute.schedulers._base import PAUSE, Job, ProgressFn, Results, Scheduler, pause_error
from lakecompute.schedulers._devices import CUDA_VISIBLE, Placement, cuda_initialised, place_workers
from lakecompute.schedulers._pool import Pool, StartMethod
from lakecompute.schedulers._transport import (
    load_result,
    rebuild_exception,
)

__all__ = ["DEFAULT_PRELOAD", "ProcessedScheduler", "StartMethod"]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

_START_METHODS: tuple[str, ...] = ("fork", "forkserver", "spawn")

DEFAULT_PRELOAD: tuple[str, ...] = ("lakecompute",)
"""What the fork server imports once, before it forks any worker (``start_method="forkserver"``):
lakecompute with numpy, zarr and Pillow, about half a second that each worker then does not pay."""


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
        pool = Pool(self._run_start_method(), self.preload, self.num_workers, job.fn, self._placement)
        finished = False
        try:
            # The first task is queued before the workers start: the first worker forked starts it while
            # the others are forked (each fork copies the caller's page tables: ~2 ms from a small
            # process, 12-17 ms from one holding ~1 GB). The tasks after it are queued once every worker
            # is forked, as before, so that the first worker, busy with the first, does not also take the
            # ones meant for the others (a warm-up that builds a worker's stages while the first runs).
            feed = _Feed(pool, tasks, job.limit)
            feed.refill(most=1)
            pool.start()
            feed.refill()
            while feed.outstanding:
                if feed.exhausted:
                    pool.retire()
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
                if dead is not None and not pool.retired(dead):
                    raise pool.died_error(dead, feed.outstanding)
            finished = True
        finally:
            # Success: let the workers exit on their own (they run their exit hooks). Failure, or the
            # consumer stopped early: terminate them now, without waiting for long tasks.
            pool.stop(graceful=finished)


class _Feed:
    """Takes tasks from the input lazily and queues them: never more than ``limit`` outstanding."""

    def __init__(self, pool: Pool, tasks: Iterator[Any], limit: int) -> None:
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

    @property
    def exhausted(self) -> bool:
        """Whether every task has been taken from the input and submitted."""
        return self._exhausted

    def refill(self, most: int | None = None) -> None:
        """Take and queue tasks while fewer than ``limit`` (or ``most``) are outstanding."""
        limit = self._limit if most is None else min(most, self._limit)
        # Bounded, so that a streamed input stays bounded in memory, here and in the task queue.
        while not self._exhausted and not self._paused and len(self.outstanding) < limit:
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
    message: tuple[Any, ...], pool: Pool, feed: _Feed, on_progress: ProgressFn | None
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
