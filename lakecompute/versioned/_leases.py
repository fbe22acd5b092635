"""Writer leases: how ``vacuum`` on any machine knows which uncommitted data a live writer still needs.

A writer (a dataset handle's write transaction, which also holds the segments an eval's workers write
into) keeps one small file in the dataset's own storage, ``leases/<writer id>.json``: the ids of the
segments and typed arrays it writes, and when the lease expires. The file is written *before* the
first of those ids is created, and then renewed by a daemon thread of the writer's process every
`RENEW_SECONDS`, each renewal moving the expiry `LEASE_SECONDS` ahead. ``vacuum`` deletes unreferenced
data only under ids no unexpired lease names. Nothing depends on process ids, so this holds for a
vacuum run from another machine, pod or pid namespace, on local disks, shared file systems and S3.

A writer releases its lease when it commits or rolls back. A rollback lets its segments go at once (their
data is garbage). After a commit the lease is still renewed for `IDLE_SECONDS`, so that a writer that
writes again soon (small appends, a logger) keeps filling the same segments; then the file is deleted and
the writer's next write starts new segments under a fresh lease. So a segment is only ever written while
one lease has covered it without a break since before it was created. A process deletes its lease files
when it ends normally, and a writer's when the writer is freed (its dataset handle's last reference
gone); a vacuum in the writer's own process lets its released leases go at once.

A writer whose renewals stop for `LEASE_SECONDS` - `LEASE_MARGIN_SECONDS` or more (a paused or
suspended process, storage that refused the renewals) has *lapsed*: a vacuum may have removed its data,
so its commit is refused with `LeaseExpiredError`; it must roll back and write again. The margin
covers the clock difference between the writer's machine and the vacuum's (the expiry is the writer's
wall clock) and the time between the writer's last check and its manifest landing.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing.util
import os
import queue
import socket
import threading
import time
import uuid
import weakref
from dataclasses import dataclass

from lakecompute.errors import DatasetCorruptError, LeaseExpiredError
from lakecompute.perprocess import PerProcess
from lakecompute.storage import TEMP_PREFIX, Backend
from lakecompute.threads import start_thread
from lakecompute.versioned._keys import LEASES, lease_key

__all__ = [
    "IDLE_SECONDS",
    "LEASE_MARGIN_SECONDS",
    "LEASE_SECONDS",
    "RENEW_SECONDS",
    "Lease",
    "LiveLeases",
    "let_go_released",
    "read_leases",
]

#: How long a lease stays valid after each renewal (what ``vacuum`` honours), in seconds.
LEASE_SECONDS = 60.0
#: How often a writer's process renews its leases, in seconds.
RENEW_SECONDS = 5.0
#: How long a writer keeps renewing its lease after a commit, in case it writes again, in seconds.
IDLE_SECONDS = 300.0
#: A writer treats its lease as lapsed this long before a vacuum would: the clocks of the machines that
#: write and vacuum must agree to within this (minus the moment a commit takes), in seconds.
LEASE_MARGIN_SECONDS = 30.0
#: How long a process that is leaving waits for a lease's lock before it leaves the lease's file to lapse.
EXIT_WAIT_SECONDS = 2.0


def _window() -> float:
    """How long after its last renewal a writer may still commit."""
    return LEASE_SECONDS - LEASE_MARGIN_SECONDS


def _clock() -> float:
    """Seconds on a clock that keeps counting while the machine sleeps (a suspended writer lapses too)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        return time.clock_gettime(boottime)
    return time.monotonic()  # pragma: no cover (not Linux)


class Lease:
    """One writer's lease on the segments and typed arrays it writes (see the module docstring).

    Args:
        backend: where the dataset lives (the lease file is stored there).
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        #: Held while a renewal of this lease runs on a thread of its own (see `_Keeper._renew_all`).
        self.renewing = threading.Lock()
        self.writer = uuid.uuid4().hex
        self.ids: set[str] = set()
        self.held = False  # writes under way: the keeper renews the lease
        self._file = _LeaseFile()
        self.renewed = 0.0  # _clock() when the last successful write of the file began (0: none yet)
        self.released = 0.0  # _clock() at the last release
        self.lapsed = 0.0  # the longest gap between renewals while covering, once it broke the window
        #: Bumped whenever the ids stop being covered: holders of slots in them must start new segments.
        self.generation = 0
        # Freed (its writer's dataset handle gone), its file goes: whatever it did not commit is garbage,
        # and a file left behind would keep a vacuum off its segments until it expired (see `_orphaned`).
        # (At exit the keeper drops every lease itself: the finalizer is not run then.)
        weakref.finalize(self, _orphaned, self.backend, self.key, self._pid, self._file).atexit = False

    @property
    def stored(self) -> bool:
        """Whether the lease file exists (as far as this writer knows)."""
        return self._file.stored

    @stored.setter
    def stored(self, value: bool) -> None:
        self._file.stored = value

    @property
    def key(self) -> str:
        return lease_key(self.writer)

    def _own(self) -> None:
        # A forked child inherits this object (and maybe a lock the keeper thread held at fork time);
        # the lease is the parent's. The child starts a lease of its own if it writes.
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._reset()

    # -- the writer's side ---------------------------------------------------------------------------
    def hold(self) -> bool:
        """Hold the lease for writes about to happen.

        Returns:
            False when the ids were no longer covered (the lease had been let go, or went stale): the
            caller must write into new segments (`cover` them first), never into the old ones.
        """
        self._own()
        with self._lock:
            if self.held:
                return True
            self.held = True
            if self._unbroken():
                return True
            self._forget()
            return False

    def cover(self, seg_id: str) -> None:
        """Add ``seg_id`` to the lease and store the lease, before ``seg_id`` is created.

        Raises:
            StorageError: the lease file could not be written (then nothing may be created).
        """
        self._own()
        with self._lock:
            if not self.held and not self._unbroken():
                self._forget()
            self.held = True
            self.ids.add(seg_id)
            self._put()
        _KEEPER.get().add(self)

    def _unbroken(self) -> bool:
        """Whether the stored lease has covered its ids without a break up to now (under the lock)."""
        return self.stored and bool(self.ids) and not self.lapsed and _clock() - self.renewed < _window()

    def check(self) -> None:
        """Raise `LeaseExpiredError` if data written under the lease may have been vacuumed away."""
        self._own()
        with self._lock:
            if not self.held or not self.ids:
                return
            gap = max(self.lapsed, _clock() - self.renewed)
            if gap >= _window():
                raise LeaseExpiredError(self.backend.url, gap, _window())

    def release(self, *, forget: bool) -> None:
        """No writes are under way any more (a commit, or with ``forget`` a rollback: its data is
        garbage, and the ids must never be written again)."""
        self._own()
        with self._lock:
            self.held = False
            self.released = _clock()
            if forget:
                self._forget()

    def _forget(self) -> None:
        self.ids = set()
        self.renewed = 0.0  # the next renewal starts a new unbroken run
        self.lapsed = 0.0
        self.generation += 1

    def _put(self, renewal: bool = False) -> bool:
        """Store the lease file (under the lock); a ``renewal`` only replaces it (False, nothing written,
        when it is gone). Raises what the backend raises."""
        start = _clock()
        if self.renewed:
            gap = start - self.renewed
            if gap >= _window():
                self.lapsed = max(self.lapsed, gap)
        record = {
            "lakecompute": "lease",
            "writer": self.writer,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ids": sorted(self.ids),
            "expires": time.time() + LEASE_SECONDS,
        }
        data = json.dumps(record).encode()
        if renewal:
            if not self.backend.replace(self.key, data):
                return False
        else:
            self.backend.write(self.key, data)
        self.renewed = start
        self.stored = True
        return True

    def _renew(self) -> None:
        """The keeper's renewal of a stored lease (under the lock). A lease file that is gone is not
        written again: it went with its dataset (deleted by ``lc.delete``, ``rm -rf`` or another
        process) or was removed by a vacuum once it had lapsed, and writing it would bring back the
        dataset's folder holding only ``leases/`` (which no dataset can then be created over). Renewals
        stop, so a held lease lapses as a paused writer's does; a released one is forgotten."""
        if not self.stored or self._put(renewal=True):
            return
        self.stored = False
        if not self.held:
            self._forget()

    # -- the keeper's side ---------------------------------------------------------------------------
    def tick(self) -> None:
        """Renew a held lease, or one released less than `IDLE_SECONDS` ago; else delete its file."""
        if self._pid != os.getpid():
            return
        with self._lock:
            try:
                if self.ids and (self.held or (self.stored and _clock() - self.released < IDLE_SECONDS)):
                    self._renew()
                elif self.stored:
                    self.backend.delete(self.key)
                    self.stored = False
                    if not self.held:
                        self._forget()
            except Exception:  # storage unreachable: retried next tick; a lapse is caught at commit
                return

    def let_go(self) -> None:
        """Delete the file of a released lease now rather than at the keeper's next tick (a vacuum in
        this process: the writer's next write starts new segments, as after the tick)."""
        if self._pid != os.getpid():
            return
        with self._lock:
            if self.held or not self.stored:
                return
            self.backend.delete(self.key)
            self.stored = False
            self._forget()

    def drop(self) -> None:
        """Delete the lease file (the process is leaving: whatever it did not commit is garbage).

        A renewal that hangs on an endpoint that stopped answering holds the lock for as long as its
        client's timeouts and retries take (minutes); the process does not wait that long to leave, the
        file lapses in `LEASE_SECONDS` instead, as a killed writer's does."""
        if self._pid != os.getpid() or not self._lock.acquire(timeout=EXIT_WAIT_SECONDS):
            return
        try:
            if self.stored:
                try:
                    self.backend.delete(self.key)
                except Exception:  # best effort at exit: the lease expires anyway
                    return
                self.stored = False
        finally:
            self._lock.release()


class _Keeper:
    """The daemon thread that renews every lease of this process (one per process: `_KEEPER`)."""

    def __init__(self) -> None:
        self.leases: weakref.WeakSet[Lease] = weakref.WeakSet()
        #: The files of leases freed since the thread last looked (see `Lease`'s finalizer); None wakes the
        #: thread. A `SimpleQueue`, whose ``put`` takes no lock: the finalizer may run in a garbage
        #: collection while its thread holds any lock of ours (or is inside this queue's own ``get``).
        self.orphans: queue.SimpleQueue[tuple[Backend, str] | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()  # the process is leaving: the thread ends
        # A process started by multiprocessing leaves through os._exit, without atexit, after running
        # the finalizers registered in it (it clears those inherited from its parent).
        multiprocessing.util.Finalize(None, _at_exit, exitpriority=0)

    def add(self, lease: Lease) -> None:
        with self.lock:
            self.leases.add(lease)
            if self.thread is None:
                self.thread = start_thread("leases", self._run)

    def _run(self) -> None:
        due = _clock() + RENEW_SECONDS
        while not self.wake.is_set():
            with contextlib.suppress(queue.Empty):  # an orphan, or the time to renew
                self._let_go(self.orphans.get(timeout=max(0.0, due - _clock())))
            if self.wake.is_set():
                break
            self.let_orphans_go()
            if _clock() >= due:
                due = _clock() + RENEW_SECONDS
                self._renew_all()

    def _renew_all(self) -> None:
        """One round of renewals. A lease on a local disk is renewed here; one in remote storage on a
        thread of its own, and skipped while its last renewal still runs: a request to an endpoint that
        stopped answering waits out the client's timeouts and retries (minutes), and on this thread it
        held up every other lease of the process, which lapsed meanwhile (a write under way on a local
        dataset was refused at its commit). The leases are held only for the round (a function of its
        own): a list left in the loop held each lease on until the next round copied it while still
        holding it, so a handle freed after its lease was once renewed never let it go."""
        with self.lock:
            leases = list(self.leases)
        for lease in leases:
            if lease.backend.machine_local:
                lease.tick()
            elif lease.renewing.acquire(blocking=False):
                start_thread("lease-renewal", _renew_apart, lease)

    def orphan(self, backend: Backend, key: str) -> None:
        """A freed lease's file, to delete on the thread (or at exit, or by a vacuum in this process)."""
        self.orphans.put((backend, key))

    def let_orphans_go(self, url: str | None = None) -> None:
        """Delete the files of freed leases (on the dataset at ``url``, or all)."""
        others = []
        while True:
            try:
                orphan = self.orphans.get_nowait()
            except queue.Empty:
                break
            if url is not None and orphan is not None and orphan[0].url != url:
                others.append(orphan)
            else:
                self._let_go(orphan)
        for other in others:
            self.orphans.put(other)

    @staticmethod
    def _let_go(orphan: tuple[Backend, str] | None) -> None:
        if orphan is not None:
            with contextlib.suppress(Exception):  # unreachable storage: the lease expires anyway
                orphan[0].delete(orphan[1])

    def drop_all(self) -> None:
        self.wake.set()
        self.orphans.put(None)
        with self.lock:
            leases = list(self.leases)
        for lease in leases:
            lease.drop()
        self.let_orphans_go()


def _renew_apart(lease: Lease) -> None:
    """A remote lease's renewal, on its own thread (`_Keeper._renew_all`)."""
    try:
        lease.tick()
    finally:
        lease.renewing.release()


class _LeaseFile:
    """Whether a lease's file exists: what its finalizer needs of it (it must not hold the lease)."""

    __slots__ = ("stored",)

    def __init__(self) -> None:
        self.stored = False


def _orphaned(backend: Backend, key: str, pid: int, file: _LeaseFile) -> None:
    """A lease was freed: its file, if it has one, is deleted (in a forked child, the parent's lease is
    left alone). On a local disk or in memory at once (a file removed, a dict entry popped); through an
    object store's client by the keeper's thread, since a garbage collection may free the lease while
    this very thread is inside that client's calls."""
    keeper = _KEEPER.peek()
    if keeper is None or not file.stored or os.getpid() != pid:
        return
    if backend.fork_safe:  # no client in the way (see `Backend.fork_safe`): a plain file or dict
        with contextlib.suppress(Exception):
            backend.delete(key)
        file.stored = False
        return
    keeper.orphan(backend, key)


#: This process's keeper: a forked child has none of its parent's (the thread stayed behind), and makes
#: its own if it writes.
_KEEPER = PerProcess(_Keeper)


def _at_exit() -> None:
    keeper = _KEEPER.peek()
    if keeper is not None:
        keeper.drop_all()


def let_go_released(url: str) -> None:
    """Delete now the files of this process's released leases on the dataset at ``url``, and of its
    freed ones."""
    keeper = _KEEPER.peek()
    if keeper is None:
        return
    keeper.let_orphans_go(url)
    with keeper.lock:
        leases = [lease for lease in keeper.leases if lease.backend.url == url]
    for lease in leases:
        lease.let_go()


atexit.register(_at_exit)


# -- the vacuum's side -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveLeases:
    """What the stored leases say at one moment.

    Attributes:
        covered: ids some unexpired lease names (their data must not be removed).
        expired: keys of lease files whose lease expired (their writers can no longer commit).
    """

    covered: frozenset[str]
    expired: tuple[str, ...]


def read_leases(backend: Backend, now: float | None = None) -> LiveLeases:
    """Read every lease file of the dataset.

    Raises:
        DatasetCorruptError: a lease file is not one lakecompute wrote (vacuum cannot tell what it protects).
    """
    now = time.time() if now is None else now
    covered: set[str] = set()
    expired: list[str] = []
    for name in backend.list(LEASES):
        if name.startswith(TEMP_PREFIX) or not name.endswith(".json"):
            continue
        key = lease_key(name[: -len(".json")])
        raw = backend.read(key)
        if raw is None:
            continue  # released since it was listed
        ids, expires = _parse_lease(backend, key, raw)
        if expires > now:
            covered.update(ids)
        else:
            expired.append(key)
    return LiveLeases(frozenset(covered), tuple(expired))


def _parse_lease(backend: Backend, key: str, raw: bytes) -> tuple[list[str], float]:
    try:
        record = json.loads(raw)
        ids = record["ids"]
        expires = record["expires"]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise TypeError("ids")
        if isinstance(expires, bool) or not isinstance(expires, (int, float)):
            raise TypeError("expires")
    except (ValueError, KeyError, TypeError) as exc:
        raise DatasetCorruptError(
            backend.url,
            key,
            "not a writer lease lakecompute wrote, so vacuum() cannot tell which data it protects",
            "If no writer of this dataset is running, delete the file and run vacuum() again.",
        ) from exc
    return ids, float(expires)
