"""Tasks across the ranks of a ``torch.distributed`` job: every rank runs some, rank 0 gets every result.

Used when an eval is called on every rank of a job that initialised ``torch.distributed`` (torchrun,
Accelerate, Lightning). Like every scheduler here it knows nothing of datasets: rank 0 hands out tasks
and receives results; each rank runs the tasks it is given on its own local scheduler (its own workers,
its own devices)::

    rank 0: RanksScheduler.run(fn, tasks) ─┬─▶ its own tasks: a serving thread, with a local scheduler
                                           └─▶ rank r's tasks: through the job's store ─▶ rank r: serve()
    every rank: results ─▶ rank 0, which yields them as the tasks complete (the caller orders them)

**Messages go through the job's key-value store** (the ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT`` that
the ``env://`` rendezvous of torchrun, Accelerate and Lightning set up, and torch itself meets through),
never through collectives: nothing here needs a process group of a particular backend (NCCL's would need
CUDA in the caller), nothing blocks in a collective a rank may never call, and a rank that does not come
is noticed with a timeout. Each message is one key, ``<prefix>/to/<rank>/<n>`` (rank 0 to a rank) or
``<prefix>/from/<rank>/<n>`` (back), read in order and deleted once read. What travels is pickled: the
store is the job's own, shared by its processes only, as torch's object collectives pickle too.

**Tasks are handed out as ranks have room**: each rank holds up to its capacity (its local scheduler's
``max_in_flight``) plus one, and gets another task when it returns a result, so a slow rank gets fewer.
A rank's local scheduler pulls tasks as it always does, waiting for the next one when none is there: the
one spare task means one is there whenever a task of its ends, and once rank 0 has no more tasks every
rank is told ``end``, so no rank waits for a task while a result of its waits to be sent.

**Stopping.** After a failure (or when the consumer stops), every rank is sent ``cancel``: it stops its
local run at its next progress report. A rank that dies is noticed by the launcher (torchrun stops the
job, and rank 0 stops on its SIGTERM like any eval).
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

from lakecompute.errors import InvalidArgumentError
from lakecompute.perprocess import PerProcess
from lakecompute.schedulers._base import (
    PAUSE,
    Job,
    Results,
    Scheduler,
    TaskFn,
    parse_max_in_flight,
    pause_error,
)
from lakecompute.schedulers._transport import PickledError, dump, load, pickle_exception, rebuild_exception
from lakecompute.threads import start_thread

__all__ = [
    "DISTRIBUTED_ENV",
    "Inbox",
    "RankChannel",
    "Ranks",
    "RanksScheduler",
    "RemoteInbox",
    "capacity_of",
    "job_ranks",
    "rank_timeout",
    "serve_ranked",
]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

#: Set to ``0`` in a process of a distributed job to run its evals on that process alone.
DISTRIBUTED_ENV = "LAKECOMPUTE_DISTRIBUTED"
#: Seconds rank 0 waits for the other ranks to call the same eval (and they for rank 0's plan).
TIMEOUT_ENV = "LAKECOMPUTE_DISTRIBUTED_TIMEOUT"
_DEFAULT_TIMEOUT = 600.0
#: How often a rank sends progress while tasks run (seconds).
_PROGRESS_INTERVAL = 0.5

_END = "end"
_CANCEL = "cancel"


@dataclass(frozen=True, slots=True)
class Ranks:
    """This process's place in a ``torch.distributed`` job.

    Attributes:
        rank: this process's rank (0 coordinates).
        world: how many ranks the job has.
        local_rank: its rank among the processes of this machine (``LOCAL_RANK``).
        local_world: how many processes of the job run on this machine (``LOCAL_WORLD_SIZE``).
        store: the job's key-value store (a ``torch.distributed.Store``).
    """

    rank: int
    world: int
    local_rank: int
    local_world: int
    store: Any


def job_ranks() -> Ranks | None:
    """This process's place in an initialised ``torch.distributed`` job of two ranks or more; None when
    there is none (torch not imported, not initialised, one rank) or ``LAKECOMPUTE_DISTRIBUTED=0``.

    Never imports torch: a job that initialised ``torch.distributed`` has imported it.

    Raises:
        InvalidArgumentError: the job's store cannot be reached (``MASTER_ADDR``/``MASTER_PORT`` unset:
            a rendezvous other than ``env://``).
    """
    if os.environ.get(DISTRIBUTED_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    world = int(dist.get_world_size())
    if world < 2:
        return None
    rank = int(dist.get_rank())
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    local_rank = int(os.environ.get("LOCAL_RANK", rank % max(1, local_world)))
    return Ranks(rank, world, local_rank, local_world, _job_store(dist))


#: This process's clients of job stores, by address.
_STORES: PerProcess[dict[tuple[str, int], Any]] = PerProcess(dict)


def _job_store(dist: Any) -> Any:
    """A client of the job's store (one per process and address)."""
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not host or not port or not port.isdigit():
        raise InvalidArgumentError(
            "An eval in a torch.distributed job reaches the other ranks through the job's store at "
            f"MASTER_ADDR:MASTER_PORT, which are not set here (MASTER_ADDR={host!r}, MASTER_PORT={port!r}). "
            "Initialise the process group with the env:// rendezvous (torchrun, accelerate launch and "
            f"Lightning do), or set {DISTRIBUTED_ENV}=0 to run evals on each process alone."
        )
    stores, key = _STORES.get(), (host, int(port))
    store = stores.get(key)
    if store is None:
        import datetime

        timeout = datetime.timedelta(seconds=rank_timeout())
        store = stores[key] = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    return store


def capacity_of(scheduler: Scheduler) -> int:
    """How many tasks a rank running ``scheduler`` takes at once: its default ``max_in_flight``."""
    return parse_max_in_flight(None, scheduler.num_workers)


def rank_timeout() -> float:
    """Seconds to wait for another rank (``LAKECOMPUTE_DISTRIBUTED_TIMEOUT``, default 600)."""
    try:
        return float(os.environ.get(TIMEOUT_ENV, _DEFAULT_TIMEOUT))
    except ValueError:
        return _DEFAULT_TIMEOUT


class RankChannel:
    """Messages through the job's store under one prefix (one eval): sent in order, read in order.

    Args:
        store: the job's store.
        prefix: the keys' prefix, the same on every rank for one eval.
    """

    def __init__(self, store: Any, prefix: str) -> None:
        self._store = store
        self._prefix = prefix.rstrip("/")
        self._sent: dict[str, int] = {}
        self._read: dict[str, int] = {}
        self._lock = threading.Lock()

    def _key(self, name: str) -> str:
        return f"{self._prefix}/{name}"

    def _call(self, method: str, *args: Any) -> Any:
        # One store client for every thread of this process: one request at a time.
        with self._lock:
            return getattr(self._store, method)(*args)

    def put(self, name: str, value: object) -> None:
        """Set ``name`` once (a plan, an outcome)."""
        self._call("set", self._key(name), dump(value))

    def get(self, name: str, timeout: float, waiting_for: str, stop: Callable[[], bool] | None = None) -> Any:
        """Wait for ``name`` (up to ``timeout`` seconds) and return its value.

        Raises:
            InvalidArgumentError: it did not come in time; the message says who was waited for.
        """
        key = self._key(name)
        deadline = time.monotonic() + timeout
        pause = 0.002
        while not self._call("check", [key]):
            if stop is not None and stop():
                raise _Stopped
            if time.monotonic() > deadline:
                raise InvalidArgumentError(
                    f"Waited {timeout:g} s for {waiting_for}, in vain. In a torch.distributed job, call eval "
                    "on every rank, at the same point and with the same arguments (not inside "
                    "main_process_first() or `if is_main_process`); to run an eval on one process alone, set "
                    f"{DISTRIBUTED_ENV}=0 in that process. ({TIMEOUT_ENV} sets how long to wait.)"
                )
            time.sleep(pause)
            pause = min(0.05, pause * 2)
        return load(self._call("get", key))

    def send(self, queue_name: str, message: object) -> None:
        """Append ``message`` to the queue ``queue_name`` (one sender per queue)."""
        with self._lock:
            n = self._sent.get(queue_name, 0)
            self._sent[queue_name] = n + 1
        self._call("set", self._key(f"{queue_name}/{n}"), dump(message))

    def receive(self, queue_name: str, stop: Callable[[], bool]) -> Any:
        """The next message of ``queue_name`` (one reader per queue), waiting as long as it takes, unless
        ``stop()`` says to give up (then `_Stopped`)."""
        n = self._read.get(queue_name, 0)
        key = self._key(f"{queue_name}/{n}")
        pause = 0.001
        while not self._call("check", [key]):
            if stop():
                raise _Stopped
            time.sleep(pause)
            pause = min(0.02, pause * 2)
        message = load(self._call("get", key))
        self._call("delete_key", key)
        self._read[queue_name] = n + 1
        return message


class _Stopped(Exception):
    """A wait given up because the run ended."""


# -- rank 0: the dispatcher ------------------------------------------------------------------------


class RanksScheduler(Scheduler):
    """Runs tasks on every rank of a job: rank 0's own through ``local``, the others' through ``channel``.

    Args:
        local: rank 0's own scheduler (its workers, its devices).
        channel: the eval's channel.
        capacities: per rank, how many tasks it takes at once (rank 0's first).
        prepare: tasks rank 0's serving thread runs first, before any task handed out (warm-ups).
    """

    name: ClassVar[str] = "ranks"

    def __init__(
        self, local: Scheduler, channel: RankChannel, capacities: list[int], prepare: Iterable[Any] = ()
    ) -> None:
        super().__init__(sum(capacities))
        self._local = local
        self._channel = channel
        self._capacities = list(capacities)
        self._prepare = list(prepare)

    def _run(self, job: Job[TaskT, ResultT]) -> Results[ResultT]:
        return _Dispatch(self, job).results(job.tasks)


class _Dispatch:
    """One run of `RanksScheduler`: hands tasks to ranks with room, yields results as they come."""

    def __init__(self, sched: RanksScheduler, job: Job[Any, Any]) -> None:
        self._sched = sched
        self._fn = job.fn
        self._on_progress = job.on_progress
        self._channel = sched._channel
        # A rank may hold one task more than it runs at once: when one of its tasks ends, the next is
        # already there, so that its workers never wait for a task while a result of theirs waits to go.
        self._caps = [cap + 1 for cap in sched._capacities]
        self._inbox: queue.Queue[tuple[int, Any]] = queue.Queue()  # (rank, message) from every rank
        self._local = Inbox()
        self._done = False
        self._threads: list[threading.Thread] = []
        self._tasks: Iterator[Any] = iter(())
        self._positions = itertools.count()
        self._in_flight = [0] * len(self._caps)
        self._outstanding: dict[int, int] = {}  # position -> rank
        self._exhausted = False
        self._paused = False

    def _start(self) -> None:
        self._threads.append(start_thread("rank-0", self._serve_local))
        for rank in range(1, len(self._caps)):
            self._threads.append(start_thread(f"rank-{rank}", self._listen, rank))

    def _serve_local(self) -> None:
        try:
            serve_ranked(
                self._fn, self._sched._local, self._local, lambda message: self._inbox.put((0, message)),
                self._sched._capacities[0], self._sched._prepare,
            )  # fmt: skip
        except BaseException as exc:
            self._inbox.put((0, ("error", -1, pickle_exception(exc))))

    def _listen(self, rank: int) -> None:
        try:
            while not self._done:
                message = self._channel.receive(f"from/{rank}", lambda: self._done)
                self._inbox.put((rank, message))
                if message[0] in ("finished", "error"):
                    return
        except _Stopped:
            return
        except BaseException as exc:
            self._inbox.put((rank, ("error", -1, pickle_exception(exc))))

    def _give(self, rank: int, message: tuple[Any, ...]) -> None:
        if rank == 0:
            self._local.put(message)
        else:
            self._channel.send(f"to/{rank}", message)

    def _tell_all(self, message: tuple[Any, ...]) -> None:
        for rank in range(len(self._caps)):
            try:
                self._give(rank, message)
            except Exception:
                pass  # a rank whose store is gone is gone too

    def results(self, tasks: Iterator[Any]) -> Generator[tuple[int, Any], None, None]:
        self._tasks = tasks
        finished = False
        self._start()
        try:
            while True:
                self._hand_out()
                if self._exhausted and not self._outstanding:
                    finished = True
                    return
                rank, message = self._inbox.get()
                done = self._receive(rank, message)
                if done is not None:
                    yield done
                    self._paused = False
        finally:
            self._stop(finished)

    def _hand_out(self) -> None:
        """Give tasks to the ranks with the most room, while any has room and the tasks do not pause;
        once there are no more, tell every rank (so that none waits for another)."""
        caps, in_flight = self._caps, self._in_flight
        while not self._exhausted and not self._paused:
            rank = max(range(len(caps)), key=lambda r: (caps[r] - in_flight[r], -r))
            if caps[rank] <= in_flight[rank]:
                return
            task = next(self._tasks, _END)
            if task is _END:
                self._exhausted = True
                self._tell_all((_END,))
            elif task is PAUSE:
                if not self._outstanding:
                    raise pause_error()
                self._paused = True  # until a result has been taken
            else:
                position = next(self._positions)
                self._give(rank, ("task", position, task))
                in_flight[rank] += 1
                self._outstanding[position] = rank

    def _receive(self, rank: int, message: tuple[Any, ...]) -> tuple[int, Any] | None:
        """Act on a rank's message; ``(position, result)`` for a task done."""
        kind = message[0]
        if kind == "progress" and self._on_progress is not None:
            self._on_progress(message[1])
        elif kind == "done" and message[1] in self._outstanding:
            del self._outstanding[message[1]]
            self._in_flight[rank] -= 1
            return message[1], message[2]
        elif kind == "error":
            raise rebuild_exception(cast(PickledError, message[2]))
        return None

    def _stop(self, finished: bool) -> None:
        """After a failure (or the consumer stopping), cancel every rank's run; wait for rank 0's own
        serving thread (its workers stop)."""
        self._done = True
        if not finished:
            self._local.cancel()
            self._tell_all((_CANCEL,))
        self._threads[0].join()


# -- every rank: serving the tasks it is given --------------------------------------------------------


class Inbox:
    """The messages a rank gets from rank 0, in order (`get` waits for one); `cancelled` is set as soon as
    a cancel arrives, also behind tasks not taken yet."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.cancelled = threading.Event()

    def put(self, message: tuple[Any, ...]) -> None:
        if message[0] == _CANCEL:
            self.cancelled.set()
        self._queue.put(message)

    def cancel(self) -> None:
        self.put((_CANCEL,))

    def get(self, block: bool = True) -> tuple[Any, ...] | None:
        """The next message; without ``block``, None when there is none yet."""
        try:
            return self._queue.get(block=block)
        except queue.Empty:
            return None


class RemoteInbox(Inbox):
    """A rank's `Inbox`, filled by a thread that reads its messages from the eval's channel until `close`."""

    def __init__(self, channel: RankChannel, rank: int) -> None:
        super().__init__()
        self._closed = False
        self._thread = start_thread("rank-inbox", self._listen, channel, rank)

    def _listen(self, channel: RankChannel, rank: int) -> None:
        try:
            while True:
                message = channel.receive(f"to/{rank}", lambda: self._closed)
                self.put(message)
                if message[0] == _CANCEL:
                    return
        except _Stopped:
            return
        except Exception as exc:  # the store is gone: the run cannot go on
            self.put((_CANCEL, repr(exc)))

    def close(self) -> None:
        self._closed = True


class _Cancelled(BaseException):
    """Raised in a rank's local run once rank 0 cancelled it (at its next progress report)."""


class _Tasks:
    """The tasks a rank is given, as its local scheduler pulls them: while the next one is on its way, `PAUSE`
    when the local scheduler has tasks outstanding (so that their results go out meanwhile), a wait when it
    has none (then it holds no result either). Every scheduler asks for a task only after the result before
    has been taken, so ``handed - done`` is what it has outstanding."""

    def __init__(self, inbox: Inbox, prepare: list[Any]) -> None:
        self._inbox = inbox
        self._prepare = list(prepare)
        self.positions: dict[int, int] = {}  # local position -> the position rank 0 gave
        self.handed = 0
        self.done = 0
        self.ended = False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._prepare:
            self.positions[self.handed] = -1  # a warm-up: its result goes nowhere
            self.handed += 1
            return self._prepare.pop(0)
        if self.ended:
            raise StopIteration
        message = self._inbox.get(block=self.handed == self.done)
        if message is None:
            return PAUSE
        if message[0] in (_END, _CANCEL):
            self.ended = True
            raise StopIteration
        self.positions[self.handed] = message[1]
        self.handed += 1
        return message[2]


def serve_ranked(
    fn: TaskFn[Any, Any],
    local: Scheduler,
    inbox: Inbox,
    send: Callable[[tuple[Any, ...]], None],
    capacity: int,
    prepare: Iterable[Any] = (),
) -> None:
    """Run the tasks this rank is given on ``local`` and send back every result, until told to stop.

    Args:
        fn: the task function.
        local: this rank's scheduler.
        inbox: the messages from rank 0: ``("task", position, task)``, then ``("end",)`` or ``("cancel",)``.
        send: sends a message to rank 0: ``("progress", n)``, ``("done", position, result)``, ``("error",
            position, PickledError)``, then ``("finished",)``.
        capacity: how many tasks this rank runs at once (its local scheduler's ``max_in_flight``).
        prepare: tasks to run first, whose results are not sent (warm-ups).
    """
    tasks = _Tasks(inbox, list(prepare))
    cancelled = inbox.cancelled
    pending = [0, time.monotonic()]

    def progress(increment: int) -> None:
        if cancelled.is_set():
            raise _Cancelled
        pending[0] += increment
        if pending[0] and time.monotonic() - pending[1] >= _PROGRESS_INTERVAL:
            send(("progress", pending[0]))
            pending[0], pending[1] = 0, time.monotonic()

    run = local.run(fn, tasks, on_progress=progress, max_in_flight=capacity)
    try:
        for local_position, result in run:
            tasks.done += 1
            position = tasks.positions.pop(local_position)
            if position >= 0:
                if pending[0]:
                    send(("progress", pending[0]))
                    pending[0] = 0
                send(("done", position, result))
            if cancelled.is_set():
                break
    except _Cancelled:
        pass
    except BaseException as exc:
        send(("error", -1, pickle_exception(exc)))
    finally:
        run.close()
    send(("finished",))
