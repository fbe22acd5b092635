"""A local disk cache of stored chunks: verified, shared by processes, bounded, never stale.

A dataset on object storage is read from the store on every epoch unless its chunks are kept on a local
disk. `DiskCache` keeps them under ``<cache_dir>/lakecompute-cache/``, one file per chunk:

* **Named by what they hold.** An entry is found by its namespace — a digest of the dataset's place (the
  store, bucket and prefix) and its id — and the chunk's key; its header says how many of the chunk's
  items are known final (its *fill*; `lakecompute.storage._remote` explains why that names the
  bytes). A dataset made again at its prefix has another id, two datasets at two prefixes other places:
  neither ever reads the other's entries. Only chunks are kept; refs, manifests and metadata are always
  asked of the store.
* **Verified like any stored byte.** The header (with the entry's own identity) carries a crc32c, and the
  chunk its own (zarr's codec, checked on every read): a truncated, flipped or misplaced file is removed
  and the chunk fetched again, never served.
* **Whole or absent.** A file is written under a temporary name and renamed into place
  (`lakecompute.localfiles.write_atomic`), so a download killed midway leaves a temporary file that no
  reader takes, removed by the next sweep once its process is gone.
* **Bounded, least recently used first.** The bytes held are counted in a small file under an exclusive
  lock (``fcntl.flock``, released by the kernel when a process dies, so a SIGKILL never leaves it held);
  an entry that would pass the bound first evicts the least recently used ones (a hit marks an entry used
  by its modification time), down to 90% of the bound, so the folder is listed once per tenth of the
  bound. An entry being read holds a shared lock on its file: it is pinned, and eviction passes it by.
  The bound counts the entries' bytes (and temporary files being written); beside them, each dataset
  held keeps its folders and a small note (``about.json``), outside the count: eviction removes a fan
  folder it empties and a namespace folder it empties with its note (``os.rmdir``: only an empty
  folder, never a link), so they stay proportional to what is held, and `DiskCache.clear` leaves only
  the lock and ``CACHEDIR.TAG``. A writer whose folder another process removed makes it again.
* **Never required.** A folder that cannot be made or written, or a full disk, turns the cache's writes
  off in that process with one `LakeComputeWarning`; reads go on from the store.
* **Never through a link.** Nothing is read, written or removed through a link inside the folder: an
  entry whose namespace or fan folder is a link is a miss and is not kept, and a ``lakecompute-cache``
  folder or lock file that is a link is a folder that cannot be written.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import os
import re
import stat
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, Literal

import google_crc32c  # zarr's own dependency: its crc32c codec uses it
import numpy as np

from lakecompute.errors import StorageError, warn
from lakecompute.localfiles import abandoned_partial, atomic_file, write_atomic
from lakecompute.perprocess import PerProcess
from lakecompute.storage._cachefiles import (
    ABOUT,
    CachedDataset,
    CacheInfo,
    about_note,
    gone,
    listdir,
    prune_namespace,
    read_about,
    real_folder,
)
from lakecompute.storage._cachespec import CacheSpec

__all__ = ["CacheInfo", "CachedDataset", "DiskCache", "about_note", "namespace"]

#: The folder inside ``cache_dir`` that holds everything the cache writes (and nothing else).
ROOT: Final = "lakecompute-cache"

_MAGIC: Final = b"LCCHUNK1"
_HEAD: Final = struct.Struct("<8sQQH")  # magic, fill, payload bytes, identity bytes
_CRC: Final = 4
_LOW_WATER: Final = 0.9
_LOCK_WAIT: Final = 10.0  # seconds a writer waits for the cache's lock before it skips caching a chunk
_ATTEMPTS: Final = 3  # times a writer makes its folders again that another process's eviction removed
_TAG: Final = "CACHEDIR.TAG"
# https://bford.info/cachedir/: backup tools skip a folder holding this file.
_TAG_TEXT: Final = (
    b"Signature: 8a477f597d28d172789f06886806bc55\n"
    b"# This folder is a cache of lakecompute's stored chunks (lakecompute cache info|clear).\n"
)


def namespace(place: tuple[str, ...], dataset_id: str) -> str:
    """The namespace of a dataset's entries: a digest of where it is and its id (32 hex digits)."""
    text = "\x00".join((*place, "", dataset_id))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(slots=True)
class _Entry:
    path: str
    size: int
    used: int  # modification time, ns: when it was last written or read


@dataclass(slots=True)
class _Scan:
    entries: list[_Entry] = field(default_factory=list)
    total: int = 0
    partial: int = 0
    removed: int = 0
    sizes: dict[str, list[int]] = field(default_factory=dict)  # namespace -> [entries, bytes]
    fans: list[str] = field(default_factory=list)  # every fan folder
    spent: set[str] = field(default_factory=set)  # fan folders found empty, or emptied by `DiskCache._evict`


class _Busy(Exception):
    """The cache's lock stayed held past `_LOCK_WAIT` (a process stopped while holding it)."""


class DiskCache:
    """The chunks kept under one cache folder, shared by every process that reads through it.

    One per folder and bound in a process (`shared`); safe for threads and processes alike.

    Args:
        spec: the folder and the bound.
    """

    def __init__(self, spec: CacheSpec) -> None:
        self.spec = spec
        self.root = os.path.join(spec.directory, ROOT)
        # This process's: a forked child's copy of a lock another thread held at the fork is held
        # forever, and a child shares its parent's descriptor, and so its flock: it opens its own.
        self._lock = PerProcess(threading.Lock)
        self._lock_fd = PerProcess(self._open_lock_file)
        self._broken: str | None = None
        self._warned = False
        self._scratch = threading.local()  # each thread's buffer that entries are read into (`_buffer`)

    @classmethod
    def shared(cls, spec: CacheSpec) -> DiskCache:
        """This process's cache for ``spec`` (one per folder and bound)."""
        caches, lock = _SHARED.get()
        with lock:
            cache = caches.get(spec)
            if cache is None:
                cache = caches[spec] = cls(spec)
            return cache

    @property
    def writable(self) -> bool:
        """Whether this process still writes entries (False once the folder failed it)."""
        return self._broken is None

    # -- entries ------------------------------------------------------------------------------
    def _path(self, ns: str, key: str) -> str:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return os.path.join(self.root, ns, digest[:2], digest[2:40])

    def _folders(self, path: str) -> tuple[str, str, str]:
        """The folders of the entry at ``path``: the cache's root, its namespace's and its fan's."""
        fan = os.path.dirname(path)
        return self.root, os.path.dirname(fan), fan

    def _within(self, path: str) -> bool:
        """Whether each folder of the entry at ``path`` is a folder of its own, not a link: the cache never
        reads, writes or removes a file through a link (an entry behind one is a miss)."""
        return all(real_folder(folder) for folder in self._folders(path))

    def read(self, ns: str, key: str, need: int) -> memoryview | None:
        """The bytes of chunk ``key`` of namespace ``ns`` as stored *without their crc32c* (verified
        here), if an entry holds at least its first ``need`` items final and passes its checks; None
        otherwise (a damaged entry is removed).

        The bytes are a view of this thread's read buffer, valid until its next `read`: a caller decodes
        them at once (or copies them). A buffer used again keeps the pages it has, where a new object of
        a chunk's size per read may take new pages from the system, whose first touch costs more than
        the read on this project's VMs (docs/performance.md, the disk cache).
        """
        path = self._path(ns, key)
        if not self._within(path):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # pinned while read: eviction passes it by
            except OSError:
                return None  # being evicted right now
            with os.fdopen(os.dup(fd), "rb") as f:
                body = self._body(f, os.fstat(fd).st_size, f"{ns}/{key}", need)
            if body is None:
                return None
            if isinstance(body, bool):
                self._discard(path)
                return None
            with contextlib.suppress(OSError):
                # Used now: the last to be evicted. The time is given: the kernel's own file times
                # tick in milliseconds, which would leave the order of reads close together to chance.
                now = time.time_ns()
                os.utime(fd, ns=(now, now))
            return body
        finally:
            os.close(fd)

    def holds(self, ns: str, key: str, need: int) -> bool:
        """Whether an entry of chunk ``key`` holds its first ``need`` items (its header checked, its
        length matching it; the bytes are checked when read)."""
        path = self._path(ns, key)
        if not self._within(path):
            return False
        try:
            with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
                head = f.read(_HEAD.size + 1024 + _CRC)
                size = os.fstat(f.fileno()).st_size
        except OSError:
            return False
        parsed = self._header(head, f"{ns}/{key}")
        return parsed is not None and parsed[0] >= need and parsed[1] + parsed[2] == size

    def _header(self, data: bytes, identity: str) -> tuple[int, int, int] | None:
        """``(fill, payload bytes, where the payload starts)`` of an entry whose header is whole and names
        ``identity``; None otherwise."""
        if len(data) < _HEAD.size:
            return None
        magic, fill, size, length = _HEAD.unpack_from(data)
        start = _HEAD.size + length + _CRC
        if (
            magic != _MAGIC
            or len(data) < start
            or data[_HEAD.size : _HEAD.size + length] != identity.encode()
        ):
            return None
        if (
            int(google_crc32c.value(data[: start - _CRC])).to_bytes(_CRC, "little")
            != data[start - _CRC : start]
        ):
            return None
        return fill, size, start

    def _body(
        self, f: io.BufferedIOBase, on_disk: int, identity: str, need: int
    ) -> memoryview | Literal[False] | None:
        """An entry's chunk without its crc32c, once every check passes; None when it holds too few items
        (it will be replaced), False when it is damaged (truncated, flipped, another entry's). The chunk
        is read into this thread's buffer (`read`) and checked in place: a copy of a MiB costs more than
        its checksum."""
        parsed = self._header(f.read(_HEAD.size + len(identity.encode()) + _CRC), identity)
        if parsed is None:
            return False
        fill, size, start = parsed
        if size < _CRC or start + size != on_disk:
            return False
        if fill < need:
            return None
        whole = self._buffer(size)
        if f.readinto(whole) != size:
            return False
        body, crc = whole[:-_CRC].toreadonly(), whole[-_CRC:]
        # google_crc32c takes no memoryview (it asks for a buffer that needs no release); an array of it can
        if int(google_crc32c.value(np.frombuffer(body, np.uint8))).to_bytes(_CRC, "little") != crc:
            return False
        return body

    def _buffer(self, size: int) -> memoryview:
        """``size`` bytes of this thread's read buffer (grown by replacing it: views of the old one that
        a caller still holds stay valid)."""
        buffer: bytearray | None = getattr(self._scratch, "buffer", None)
        if buffer is None or len(buffer) < size:
            buffer = self._scratch.buffer = bytearray(size)
        return memoryview(buffer)[:size]

    def _discard(self, path: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(path)

    def write(self, ns: str, key: str, fill: int, payload: bytes, about: str) -> None:
        """Keep ``payload`` (a chunk's stored bytes, their crc32c last, checked) as chunk ``key`` of
        namespace ``ns`` with its first ``fill`` items final, making room first. Nothing is raised: a
        cache that cannot be written is turned off here, with one warning.

        Args:
            ns: the dataset's namespace (`namespace`).
            key: the chunk's storage key.
            fill: items of the chunk known final (at most 2**64 - 1: a chunk written whole).
            payload: its bytes as stored.
            about: the dataset's location and id, noted once per namespace for ``lakecompute cache info``.
        """
        if self._broken is not None:
            return
        identity = f"{ns}/{key}".encode()
        head = _HEAD.pack(_MAGIC, fill, len(payload), len(identity)) + identity
        head += int(google_crc32c.value(head)).to_bytes(_CRC, "little")
        size = len(head) + len(payload)
        try:
            with self._locked():
                if not self._room(size):
                    return
            if self._keep(self._path(ns, key), head, payload, size):
                self._note(ns, about)
        except _Busy:
            return  # another process holds the lock far too long: leave this chunk uncached
        except (OSError, StorageError) as exc:
            self._fail(exc)

    def _keep(self, path: str, head: bytes, payload: bytes, size: int) -> bool:
        """Store an entry whose ``size`` bytes are counted; whether it was (else they are counted off)."""
        stored = False
        try:
            stored = self._store(path, head, payload)
        finally:
            if not stored:
                with self._locked():
                    self._add(-size)
        return stored

    def _store(self, path: str, head: bytes, payload: bytes) -> bool:
        """Write an entry whole; False when a folder on its way is a link (never written through), or
        when another process's eviction removed its folders (`_prune`) each time they were made."""
        for _ in range(_ATTEMPTS):
            try:
                if not self._make_folders(path):
                    return False
                with atomic_file(path, durable=False, tidy=False) as f:
                    f.write(head)
                    f.write(payload)
                return True
            except (OSError, StorageError) as exc:
                if not gone(exc):
                    raise
        return False

    def _make_folders(self, path: str) -> bool:
        """Make the missing folders of the entry at ``path``, one at a time (``os.mkdir`` makes none
        through a link); whether each is a folder of its own, not a link."""
        for folder in self._folders(path):
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
            if not real_folder(folder):
                return False
        return True

    def _note(self, ns: str, about: str) -> None:
        """Note which dataset a namespace holds, unless noted (for ``lakecompute cache info``; never read
        back). Looked for on every write: eviction removes a namespace's note with its folder."""
        path = os.path.join(self.root, ns, ABOUT)
        if os.path.lexists(path):
            return
        try:
            write_atomic(path, about.encode(), durable=False)
        except StorageError as exc:
            if not gone(exc):
                raise  # its folder removed by another process's eviction: noted by a later write

    def _fail(self, exc: BaseException) -> None:
        """Turn this process's writes off, with one warning."""
        cause = exc.__cause__ if isinstance(exc, StorageError) and exc.__cause__ is not None else exc
        reason = getattr(cause, "strerror", None) or str(cause)
        self._broken = reason
        if not self._warned:
            self._warned = True
            full = getattr(cause, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
            what = "the disk is full" if full else f"it cannot be written ({reason})"
            warn(
                f"The disk cache at {self.spec.directory!r} is not used from now on in this process: {what}. "
                "Reads go on from the store. Free some space or fix the folder's permissions, or pass "
                "another cache_dir (cache_size='…' bounds what it holds)."
            )

    # -- the bound ------------------------------------------------------------------------------
    def _lock_file(self) -> int:
        return self._lock_fd.get()

    def _open_lock_file(self) -> int:
        """The lock file, which holds the count of bytes: never through a link (``O_NOFOLLOW``), never
        anything but a plain file of the cache's own (an OSError turns the cache's writes off)."""
        self._prepare()
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(os.path.join(self.root, "lock"), flags, 0o666)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "its lock file is not a plain file")
        return fd

    def _prepare(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        if not real_folder(self.root):
            raise OSError(errno.ELOOP, f"{ROOT} is a link")
        tag = os.path.join(self.root, _TAG)
        if not os.path.exists(tag):
            write_atomic(tag, _TAG_TEXT, durable=False)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """The cache's exclusive lock, between this process's threads and other processes alike."""
        with self._lock.get():
            fd = self._lock_file()
            deadline = time.monotonic() + _LOCK_WAIT
            delay = 0.0005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise _Busy from None
                    time.sleep(delay)  # another process counts or evicts: a few ms at most
                    delay = min(delay * 2, 0.05)
            try:
                yield fd
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _usage(self) -> int | None:
        """The bytes the cache holds, as counted (None: not counted yet, or the count is unreadable)."""
        try:
            data = os.pread(self._lock_file(), 8, 0)
        except OSError:
            return None
        value = int.from_bytes(data, "little") if len(data) == 8 else None
        return value if value is not None and value < 2**62 else None

    def _set_usage(self, value: int) -> None:
        os.pwrite(self._lock_file(), max(0, value).to_bytes(8, "little"), 0)

    def _add(self, delta: int) -> None:
        usage = self._usage()
        if usage is not None:
            self._set_usage(usage + delta)

    def _room(self, size: int) -> bool:
        """Count ``size`` more bytes, evicting first what must go (under the lock); False when they do
        not fit (every other entry pinned, or a bound smaller than one chunk)."""
        limit = self.spec.max_bytes
        if size > limit:
            return False
        usage = self._usage()
        if usage is not None and usage + size <= limit:
            self._set_usage(usage + size)
            return True
        scan = self._scan()
        total = scan.total
        if total + size > limit:
            total = self._evict(scan, max(0, int(limit * _LOW_WATER) - size))
        self._prune(scan.spent)
        if total + size > limit:
            self._set_usage(total)
            return False
        self._set_usage(total + size)
        return True

    def _scan(self, sweep: bool = True) -> _Scan:
        """Every entry with its size and last use; temporary files of live writers counted, those of
        dead ones removed (``sweep``)."""
        scan = _Scan()
        if not real_folder(self.root):
            return scan  # a link: nothing behind it is ever counted or removed
        for ns in listdir(self.root):
            top = os.path.join(self.root, ns)
            if len(ns) != 32 or not real_folder(top):
                continue  # not ours, or a link: nothing outside the cache is ever counted or removed
            counts = scan.sizes.setdefault(ns, [0, 0])
            for fan in listdir(top):
                if fan != ABOUT and real_folder(os.path.join(top, fan)):
                    scan.fans.append(os.path.join(top, fan))
                    self._scan_folder(scan.fans[-1], scan, counts, sweep)
        return scan

    def _scan_folder(self, folder: str, scan: _Scan, counts: list[int], sweep: bool) -> None:
        try:
            found = list(os.scandir(folder))
        except OSError:
            return
        if not found:
            scan.spent.add(folder)
        for item in found:
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            kind = abandoned_partial(item.name)
            if not stat.S_ISREG(st.st_mode) or (kind is None and not _ENTRY_NAME.fullmatch(item.name)):
                continue  # not a file the cache wrote: left alone
            if kind is True and sweep:
                with contextlib.suppress(OSError):
                    os.unlink(item.path)
                    scan.removed += 1
                continue
            scan.total += st.st_size
            if kind is not None:
                scan.partial += 1
                continue
            scan.entries.append(_Entry(item.path, st.st_size, st.st_mtime_ns))
            counts[0] += 1
            counts[1] += st.st_size

    def _evict(self, scan: _Scan, target: int) -> int:
        """Remove the least recently used unpinned entries until ``target`` bytes or fewer are held."""
        total = scan.total
        for entry in sorted(scan.entries, key=lambda e: e.used):
            if total <= target:
                break
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                total -= entry.size  # gone already
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # pinned: a reader holds it
            try:
                os.unlink(entry.path)
                total -= entry.size
                scan.spent.add(os.path.dirname(entry.path))
            except OSError:
                pass
            finally:
                os.close(fd)
        return total

    def _prune(self, fans: Iterable[str], tops: Iterable[str] = ()) -> None:
        """Remove the fan folders ``fans`` that are empty, then the namespace folders above them (and
        ``tops``) that hold nothing but their note. ``os.rmdir`` removes only an empty folder and never
        a link: a file another process writes keeps its folder, and a writer whose folder went makes it
        again (`_store`)."""
        above = set(tops)
        for fan in fans:
            with contextlib.suppress(OSError):
                os.rmdir(fan)
            above.add(os.path.dirname(fan))
        for top in above:
            prune_namespace(top)

    # -- the whole folder -----------------------------------------------------------------------
    def info(self) -> CacheInfo:
        """What the cache holds (abandoned temporary files are removed on the way)."""
        if not real_folder(self.root):
            return CacheInfo(self.spec.directory, 0, 0)
        with self._locked():
            scan = self._scan()
            self._set_usage(scan.total)
        return self._summary(scan)

    def clear(self) -> CacheInfo:
        """Remove every entry (readers holding one open finish reading it); returns what was removed."""
        if not real_folder(self.root):
            return CacheInfo(self.spec.directory, 0, 0)
        with self._locked():
            scan = self._scan()
            removed = 0
            for entry in scan.entries:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
            for ns in scan.sizes:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.root, ns, ABOUT))
            self._prune(scan.fans, [os.path.join(self.root, ns) for ns in scan.sizes])
            self._set_usage(scan.total - sum(e.size for e in scan.entries))
        summary = self._summary(scan)
        return CacheInfo(
            summary.directory, summary.entries, summary.nbytes, summary.datasets, summary.partial,
            scan.removed + removed,
        )  # fmt: skip

    def _summary(self, scan: _Scan) -> CacheInfo:
        datasets = []
        for ns, (count, nbytes) in scan.sizes.items():
            if count:
                location, dataset_id = read_about(os.path.join(self.root, ns, ABOUT))
                datasets.append(CachedDataset(location, dataset_id, count, nbytes))
        datasets.sort(key=lambda d: -d.nbytes)
        held = sum(e.size for e in scan.entries)
        return CacheInfo(
            self.spec.directory, len(scan.entries), held, tuple(datasets), scan.partial, scan.removed
        )


#: This process's caches by spec, and the lock that guards them: a forked child starts with none (a
#: lock another thread held at the fork would be held there forever).
_SHARED: PerProcess[tuple[dict[CacheSpec, DiskCache], threading.Lock]] = PerProcess(
    lambda: ({}, threading.Lock())
)


#: The name of an entry's file (`DiskCache._path`): hex digits 2..40 of the digest of its key.
_ENTRY_NAME: Final = re.compile(r"[0-9a-f]{38}")
