"""Overlap inside a worker: reading ahead and writing behind the function, on bounded threads.

A task is a run of blocks. Done one after the other, a block is read (and decoded), then the function runs
on it, then its outputs are checked, encoded and written: on a GPU the device idles while the CPU decodes
and encodes. Here the three stages run at once on different blocks::

    readers (1..n threads)   read k+1, k+2 ...   ──▶ bounded: at most `ahead` blocks beyond the one in use
    the task's thread        run the function on block k
    one writer thread        encode and write block k-1  ──▶ bounded: one block behind, in order

so a worker's wall time approaches its slowest stage rather than the sum of the three. The stages meet
only through these two objects; the order of blocks, of outputs and of failures is the order of the
task, as without them:

- `ReadAhead` yields the blocks in order; a read that failed raises its error when its block is taken,
  not before (an earlier block's failure in the function is still the one reported).
- `WriteBehind` runs write jobs in order on one thread; a job's error is raised in the task's thread at
  the next `WriteBehind.submit` or `WriteBehind.wait`, and the task prefers a write's failure to a
  later block's (`WriteBehind.settle`).

Both keep the seconds each stage took (`Stages`), which tasks report with their results.

The readers and the writer need the GIL between the calls that release it (a chunk's decode, its
encode, each file operation), and the task's thread running the function's Python holds it: a thread
waiting for it gets it only when the switch interval (5 ms) has passed. A reader or writer waits that
long for every file it touches, hundreds of times per task, and falls behind a function it should keep
up with easily (a writer that stores 47 MB in 0.08 s alone took 0.33 s beside a Python loop). So while
a task runs with these threads the interval is 0.2 ms (`quick_switches`): the function gives the GIL
up a little more often (it keeps it between switches), the threads get their turns when they ask.

The threads are daemon threads, started per task: reading and writing touch only the task's own input
range and output slots, and a task that is stopped (an error, a cancellation) closes them, waiting for a
read or write in progress to end (each is one block) but starting no other.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lakecompute.threads import start_thread

__all__ = ["ReadAhead", "Stages", "WriteBehind", "quick_switches"]

T = TypeVar("T")

#: The switch interval while tasks run with reader and writer threads (see the module's docstring).
SWITCH_INTERVAL = 0.0002

_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.0


@contextlib.contextmanager
def quick_switches() -> Iterator[None]:
    """Run the block with the interpreter's switch interval at most `SWITCH_INTERVAL`; the interval
    before it is restored when the last of the tasks running at once ends (unless someone else has
    changed it in the meantime: then theirs stays)."""
    global _switch_users, _switch_saved
    with _switch_lock:
        if _switch_users == 0:
            _switch_saved = sys.getswitchinterval()
            if _switch_saved > SWITCH_INTERVAL:
                sys.setswitchinterval(SWITCH_INTERVAL)
        _switch_users += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_users -= 1
            ours = abs(sys.getswitchinterval() - SWITCH_INTERVAL) < 1e-9  # not changed meanwhile
            if _switch_users == 0 and _switch_saved > SWITCH_INTERVAL and ours:
                sys.setswitchinterval(_switch_saved)


@dataclass(slots=True)
class Stages:
    """Seconds one task spent in each stage: ``read`` (summed over reader threads, waits excluded), ``run``
    (the functions and their checks, on the task's thread), ``write`` (encoding and writing, on the
    writer thread) and ``wall`` (the task from start to end). Without overlap ``wall`` is about the sum
    of the three; with it, about the largest."""

    read: float = 0.0
    run: float = 0.0
    write: float = 0.0
    wall: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"read": self.read, "run": self.run, "write": self.write, "wall": self.wall}


class ReadAhead(Generic[T]):
    """The blocks of one task, read in order, up to ``ahead`` blocks ahead of the one in use.

    Args:
        read: reads one block, ``read(start, stop)``.
        ranges: the blocks' input ranges, in order.
        threads: reader threads (and so blocks read ahead at most: the worker's budget's
            ``readers``); 0 reads each block in the task's own thread when it is taken (no overlap: for
            input already in memory).
        stages: where the seconds spent reading are added (see `adopt`).
        then: called once, when every block has been read or is being read: the readers have nothing
            left to do (the worker starts on its next task's blocks then). On a reader thread; for blocks
            read ahead of their task (``early``), not before the task takes them over (`adopt`), so
            that reading is at most one task ahead.
        early: read for a task that has not started yet.
    """

    def __init__(
        self,
        read: Callable[[int, int], T],
        ranges: Sequence[tuple[int, int]],
        threads: int,
        stages: Stages,
        then: Callable[[], None] | None = None,
        early: bool = False,
    ) -> None:
        self._read = read
        self._ranges = ranges
        self._stages = stages
        self._then = then
        self._early = early
        self._then_due: Callable[[], None] | None = None  # `then`, once its readers are done, until adopted
        # One block alone gains nothing from a thread: it is read when taken.
        self._ahead = threads if len(ranges) > 1 else 0
        self._cond = threading.Condition()
        self._next = 0  # the next block a reader takes
        self._taken = 0  # blocks the task has taken
        self._done: dict[int, tuple[bool, Any]] = {}
        self._closed = False
        for n in range(min(self._ahead, len(ranges))):
            start_thread(f"read-ahead-{n}", self._reader)

    def __iter__(self) -> Iterator[T]:
        if not self._ahead:
            for start, stop in self._ranges:
                t0 = time.perf_counter()
                block = self._read(start, stop)
                self._stages.read += time.perf_counter() - t0
                yield block
            return
        for k in range(len(self._ranges)):
            with self._cond:
                while k not in self._done:
                    self._cond.wait()
                ok, value = self._done.pop(k)
                self._taken = k + 1
                self._cond.notify_all()  # a reader may start the next block
            if not ok:
                raise value
            yield value

    def _reader(self) -> None:
        ranges = self._ranges
        while True:
            with self._cond:
                # Bounded: a reader starts block k only while k < taken + ahead.
                while not self._closed and self._taken + self._ahead <= self._next < len(ranges):
                    self._cond.wait()
                if self._closed or self._next >= len(ranges):
                    then, self._then = (self._then, None) if not self._closed else (None, None)
                    if self._early:
                        then, self._then_due = None, then
                    break
                k = self._next
                self._next += 1
            t0 = time.perf_counter()
            try:
                outcome: tuple[bool, Any] = (True, self._read(*ranges[k]))
            except BaseException as exc:  # the task's thread raises it when it takes this block
                outcome = (False, exc)
            seconds = time.perf_counter() - t0
            with self._cond:
                self._done[k] = outcome
                self._stages.read += seconds
                self._cond.notify_all()
        if then is not None:
            then()

    def adopt(self, stages: Stages) -> None:
        """Add the seconds spent reading so far to ``stages``, and the seconds from now on (a task taking
        over the blocks read ahead for it before it started); if its readers are done, the next task's
        reading starts now (``then``)."""
        with self._cond:
            stages.read += self._stages.read
            self._stages = stages
            self._early = False
            then, self._then_due = self._then_due, None
        if then is not None:
            then()

    def close(self) -> None:
        """Start no more reads (a read in progress ends on its own; its block is dropped)."""
        with self._cond:
            self._closed = True
            self._done.clear()
            self._cond.notify_all()


class WriteBehind:
    """Runs a task's write jobs in order on one thread, at most one job behind the task's thread.

    Args:
        enabled: False runs each job in the caller's thread at `submit` (no overlap).
        stages: where the seconds spent writing are added.
    """

    def __init__(self, enabled: bool, stages: Stages) -> None:
        self._enabled = enabled
        self._stages = stages
        self._cond = threading.Condition()
        self._job: Callable[[], None] | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        #: Seconds the task's thread waited for the previous job (a stall of the pipeline).
        self.waited = 0.0

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` after the jobs before it; raises the error of an earlier job, if one failed."""
        if not self._enabled:
            t0 = time.perf_counter()
            try:
                job()
            finally:
                self._stages.write += time.perf_counter() - t0
            return
        self.wait()
        with self._cond:
            self._job = job
            self._cond.notify_all()
        if self._thread is None:
            self._thread = start_thread("write-behind", self._writer)

    def wait(self) -> None:
        """Wait for the job in progress; raise its error, if it failed."""
        t0 = time.perf_counter()
        with self._cond:
            while self._job is not None:
                self._cond.wait()
            error, self._error = self._error, None
        self.waited += time.perf_counter() - t0
        if error is not None:
            raise error

    def settle(self, failure: BaseException) -> BaseException:
        """The error a task stopped by ``failure`` reports: an error of the write in progress comes first
        (it wrote an earlier block), else ``failure``."""
        try:
            self.wait()
        except BaseException as earlier:
            return earlier
        return failure

    def _writer(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._closed:
                    self._cond.wait()
                if self._job is None:
                    return
                job = self._job
            t0 = time.perf_counter()
            error: BaseException | None = None
            try:
                job()
            except BaseException as exc:  # raised in the task's thread at its next submit or wait
                error = exc
            seconds = time.perf_counter() - t0
            with self._cond:
                self._stages.write += seconds
                self._error = error
                self._job = None
                self._cond.notify_all()

    def close(self) -> None:
        """Wait for the job in progress (its error is dropped: the task stops anyway); end the thread."""
        with self._cond:
            while self._job is not None:
                self._cond.wait()
            self._closed = True
            self._error = None
            self._cond.notify_all()
