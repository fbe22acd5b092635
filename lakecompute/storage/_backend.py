"""Where a dataset lives: a zarr store for data plus a few small files for versions.

A `Backend` gives the dataset code two things: a zarr store (all tensor data goes through
zarr's own stores) and a handful of byte-level operations on small files — above all
``create_exclusive``, which is how a version is committed. Exactly one of several writers racing
for the same version number wins; on a local disk that is ``os.link`` of a finished temp file
(the name appears whole or not at all), on S3 it will be a conditional put.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import threading
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zarr.abc.store import Store
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.storage import LocalStore, MemoryStore

from lakecompute.errors import DatasetCorruptError, InvalidArgumentError, InvalidTypeError
from lakecompute.storage._cachespec import CacheSpec, cache_spec

__all__ = [
    "TEMP_PREFIX",
    "Backend",
    "BackendSpec",
    "LocalBackend",
    "MemoryBackend",
    "backend_class",
    "open_backend",
    "temp_name",
]

#: How the temp files lakecompute writes on local disks begin (a file is written under a temp name in the
#: folder of its final name, then renamed or linked into place). zarr names its own temp files
#: ``<name>.<hex>.partial``; our own prefix tells the two apart, so that ``vacuum`` only ever sweeps what
#: it knows the rules of (see ``lakecompute.datasets.vacuum``).
TEMP_PREFIX = ".lakecompute-tmp-"


def temp_name(name: str) -> str:
    """A fresh temp file name, beside ``name`` in its folder, for a file that will become ``name``."""
    return f"{TEMP_PREFIX}{uuid.uuid4().hex}.{name}"


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """Everything needed to reopen a backend in another process (picklable, no open handles).

    Attributes:
        url: the dataset location: an absolute path for a local one (so that a process started in
            another folder, or on another machine of a shared file system, opens the same dataset).
        storage_options: options passed through to the object-store client (S3 only).
    """

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)


class Backend(ABC):
    """A dataset location: a zarr store plus atomic small-file operations."""

    #: Whether other processes can see what this backend writes (False for ``mem://``).
    shared_between_processes: bool = True
    #: Whether a child forked after this process used the backend can still use the storage
    #: (False for object stores, whose clients hang after fork: see STORAGE-NOTES.md).
    fork_safe: bool = True
    #: Whether the data is on this machine only (a local disk): other machines of a cluster cannot
    #: reach it unless it is a file system they all mount.
    machine_local: bool = False
    #: The local disk cache reads of a remote dataset's chunks go through (`open_backend`'s
    #: ``cache_dir``), or None.
    disk: CacheSpec | None = None

    def __init__(self, spec: BackendSpec, given: str | None = None) -> None:
        self.spec = spec
        self._given = spec.url if given is None else given

    @property
    def url(self) -> str:
        """The location as the user gave it (`spec` holds the form other processes reopen)."""
        return self._given

    @abstractmethod
    def zarr_store(self) -> Store:
        """The zarr store rooted at the dataset."""

    @abstractmethod
    def read(self, key: str) -> bytes | None:
        """The bytes stored under ``key``, or None if there are none."""

    @abstractmethod
    def write(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, replacing it atomically (readers see old or new, whole)."""

    def write_hint(self, key: str, data: bytes) -> None:
        """Store a small advisory value that every reader validates (e.g. ``versions/LATEST``).

        Unlike `write` this may overwrite in place, so a reader racing the write, or a crash
        during it, can leave a torn value; use it only for values whose readers treat anything
        odd as "no hint". Callers should write values of one fixed width.
        """
        self.write(key, data)

    @abstractmethod
    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` only if nothing is there; True if this call created it."""

    def replace(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` as `write` does, only if something is there already; False, and
        nothing written (no folder made), when there is nothing: what renews a file that someone may
        have deleted with the dataset around it, which must not come back. (A delete racing the call
        between its look and its write can still lose to it.)"""
        if not self.exists(key):
            return False
        self.write(key, data)
        return True

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether ``key`` holds data."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """The names directly under the folder ``prefix`` (not recursive)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""

    @abstractmethod
    def delete_tree(self, prefix: str) -> None:
        """Remove everything under ``prefix`` ('' for the whole dataset)."""

    def remove_if_empty(self, prefix: str) -> None:
        """Remove the folder ``prefix`` ('' for the dataset's own) if it holds nothing; never anything
        else. Object stores and memory have no folders: nothing to do there."""
        del prefix  # no folders there

    def local_path(self, key: str) -> str | None:
        """A filesystem path for ``key`` when the backend is a local disk, else None."""
        return None

    def place(self) -> tuple[str, ...]:
        """Where the dataset's bytes are, resolved: the store (its kind, and for S3 the endpoint and
        bucket), then the parts of the path in it (a local path with its symbolic links followed), so
        that two locations are one exactly when their places are, and one is inside the other when its
        place starts with the other's."""
        return ("url", *self.spec.url.split("/"))

    def overlap(self, other: Backend) -> Literal["same", "inside", "contains"] | None:
        """How this location lies to ``other``'s: the same place, inside it, containing it, or apart.

        Writing one never touches the other only when they are apart: a copy, an overwrite or a delete
        of a location that is, contains or is inside a dataset's would remove that dataset's files.
        """
        mine, theirs = self.place(), other.place()
        if mine == theirs:
            return "same"
        if mine[: len(theirs)] == theirs:
            return "inside"
        if theirs[: len(mine)] == mine:
            return "contains"
        return None


def check_key(key: str) -> str:
    """``key`` if it is a relative path of plain names (no ``..``, ``.``, empty parts or absolute path).

    Keys are made by lakecompute from names it has checked; this is the last line of defence against
    one that would leave the dataset.
    """
    if key and (key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/"))):
        raise InvalidArgumentError(f"Expected a storage key of plain names inside the dataset. Got {key!r}.")
    return key


class LocalBackend(Backend):
    """A dataset in a local directory.

    Nothing here follows a symbolic link inside the dataset: a dataset from elsewhere may hold links
    to anywhere, and reading, listing or deleting through them would touch files outside it. A key
    whose path passes through a link is refused (reads) or left alone (listing, deleting).
    """

    machine_local = True

    def __init__(self, spec: BackendSpec, root: str) -> None:
        # Other processes reopen it by its absolute path; errors name it as the user gave it.
        super().__init__(BackendSpec(root, spec.storage_options), given=spec.url)
        self.root = Path(root)
        self._root_text = str(self.root)
        self._plain_dirs: set[str] = set()

    def zarr_store(self) -> Store:
        return LocalStore(str(self.root))

    def _p(self, key: str) -> Path:
        return self.root / check_key(key)

    def _linked(self, key: str) -> bool:
        """Whether the path of ``key`` passes through, or is, a symbolic link inside the dataset.

        One ``lstat`` per part of the key; folders found to be plain are remembered, so a commit costs
        one or two ``lstat`` calls.
        """
        path = self._root_text
        for part in check_key(key).split("/") if key else ():
            path = os.path.join(path, part)
            if path in self._plain_dirs:
                continue
            try:
                mode = os.lstat(path).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return False  # nothing there (yet): nothing to follow
            if stat.S_ISLNK(mode):
                return True
            if stat.S_ISDIR(mode):
                self._plain_dirs.add(path)
        return False

    def local_path(self, key: str) -> str | None:
        return str(self._p(key))

    def place(self) -> tuple[str, ...]:
        return ("file", *Path(os.path.realpath(self.root)).parts)

    def overlap(self, other: Backend) -> Literal["same", "inside", "contains"] | None:
        """As `Backend.overlap`, with the real paths (links followed), and beyond them the folders
        themselves: a bind mount or another name of one folder is the same folder."""
        found = super().overlap(other)
        if found is not None or not isinstance(other, LocalBackend):
            return found
        if _same_folder_among(self.root, other.root):
            return "same" if _same_folder_among(other.root, self.root, ancestors=False) else "inside"
        return "contains" if _same_folder_among(other.root, self.root) else None

    def _refuse_links(self, key: str) -> None:
        if self._linked(key):
            raise DatasetCorruptError(
                self.url,
                key,
                "its path goes through a symbolic link; lakecompute never follows links inside a dataset",
                "Replace the link with what it points to.",
            )

    def read(self, key: str) -> bytes | None:
        # The folders are checked (remembered once plain); the file itself is opened without following
        # a link, which saves a system call per read (a history's log reads a file per version).
        self._refuse_links(key.rpartition("/")[0])
        try:
            fd = os.open(os.path.join(self._root_text, check_key(key)), os.O_RDONLY | os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._refuse_links(key)
            raise
        try:
            with os.fdopen(fd, "rb") as fh:
                return fh.read()
        except IsADirectoryError:
            raise DatasetCorruptError(
                self.url,
                key,
                "it is a directory, where lakecompute keeps a file: it was changed outside lakecompute",
                "Restore the file from a backup, or open an earlier version with lc.load(path, version=N).",
            ) from None

    def _write_temp(self, key: str, data: bytes, make_folder: bool = True) -> Path:
        target = self._p(key)
        self._refuse_links(key)
        if make_folder:
            target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / temp_name(target.name)
        with open(tmp, "wb") as fh:
            fh.write(data)
        return tmp

    def write(self, key: str, data: bytes) -> None:
        tmp = self._write_temp(key, data)
        os.replace(tmp, self._p(key))

    def replace(self, key: str, data: bytes) -> bool:
        target = self._p(key)
        if not target.is_file():
            return False
        try:
            tmp = self._write_temp(key, data, make_folder=False)  # gone, the folder is not made again
        except FileNotFoundError:  # the folder went away since the look
            return False
        try:
            os.replace(tmp, target)
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            return False
        return True

    def write_hint(self, key: str, data: bytes) -> None:
        # A temp file renamed over an existing name makes ext4 start writeback of the new file
        # (auto_da_alloc): 0.4-1.4 ms here, against ~5 us for an in-place write. Commits write
        # the hint every time, so it is overwritten in place.
        path = self._p(key)
        self._refuse_links(key)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        # Write the whole file under a private name first, then link it into place: link fails
        # if the name exists, so of several racing committers exactly one wins, and a reader
        # can never see a half-written manifest (the name appears only once it is complete).
        tmp = self._write_temp(key, data)
        try:
            os.link(tmp, self._p(key))
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def exists(self, key: str) -> bool:
        return self._p(key).exists()

    def list(self, prefix: str) -> list[str]:
        if self._linked(prefix):
            return []  # a linked folder: its contents are not the dataset's
        try:
            return sorted(os.listdir(self._p(prefix)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, key: str) -> None:
        parent = key.rpartition("/")[0]
        if self._linked(parent):
            return  # never delete through a link (a link itself is removed, not what it points to)
        self._p(key).unlink(missing_ok=True)

    def delete_tree(self, prefix: str) -> None:
        target = self._p(prefix)
        if self._linked(prefix.rpartition("/")[0]):
            return
        if target.is_symlink():
            target.unlink()  # the link only; rmtree would refuse it, and must not follow it
        elif target.is_dir():
            # rmtree removes links inside the tree without following them.
            shutil.rmtree(target, ignore_errors=True)
        elif target.exists():
            target.unlink()

    def remove_if_empty(self, prefix: str) -> None:
        target = self._p(prefix) if prefix else Path(self._root_text)
        if (prefix and self._linked(prefix)) or target.is_symlink():
            return
        with contextlib.suppress(OSError):  # not empty, not there, not a folder: left as it is
            target.rmdir()


# mem:// datasets live in this process only: name -> the dict behind their zarr MemoryStore, which
# holds the small files too (as on disk and on S3, one namespace for everything).
_MEMORY: dict[str, dict[str, Buffer]] = {}
_MEMORY_LOCK = threading.Lock()


def _same_folder_among(path: Path, folder: Path, ancestors: bool = True) -> bool:
    """Whether ``folder`` (an existing one) is ``path`` or, with ``ancestors``, one of the folders above
    it, by what they are on disk (device and inode), not by their names."""
    try:
        target = os.stat(folder)
    except OSError:
        return False
    for candidate in [path, *(path.parents if ancestors else ())]:
        try:
            found = os.stat(candidate)
        except OSError:
            continue  # not there (yet): a name, not a folder
        if (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


class MemoryBackend(Backend):
    """A dataset held in this process (``mem://name``), for tests and scratch work."""

    shared_between_processes = False

    def __init__(self, spec: BackendSpec, name: str) -> None:
        super().__init__(spec)
        with _MEMORY_LOCK:
            self._files = _MEMORY.setdefault(name, {})
        self._store = MemoryStore(store_dict=self._files)
        self.name = name

    def zarr_store(self) -> Store:
        return self._store

    def place(self) -> tuple[str, ...]:
        return ("mem", *self.name.split("/"))

    def read(self, key: str) -> bytes | None:
        value = self._files.get(check_key(key))
        return None if value is None else value.to_bytes()

    def write(self, key: str, data: bytes) -> None:
        self._files[check_key(key)] = default_buffer_prototype().buffer.from_bytes(bytes(data))

    def create_exclusive(self, key: str, data: bytes) -> bool:
        with _MEMORY_LOCK:
            if check_key(key) in self._files:
                return False
            self.write(key, data)
            return True

    def exists(self, key: str) -> bool:
        if check_key(key) in self._files:
            return True
        head = key.rstrip("/") + "/"
        return any(k.startswith(head) for k in list(self._files))

    def list(self, prefix: str) -> list[str]:
        head = check_key(prefix.rstrip("/")) + "/" if prefix else ""
        return sorted({k[len(head) :].split("/", 1)[0] for k in list(self._files) if k.startswith(head)})

    def delete(self, key: str) -> None:
        self._files.pop(check_key(key), None)

    def delete_tree(self, prefix: str) -> None:
        head = check_key(prefix.rstrip("/")) + "/" if prefix else ""
        with _MEMORY_LOCK:
            for k in [k for k in self._files if k.startswith(head) or k == prefix]:
                del self._files[k]


def open_backend(
    url: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    cache_dir: object = None,
    cache_size: object = None,
    cache_from_env: bool = False,
) -> Backend:
    """Resolve a dataset location to its backend.

    Args:
        url: a local path, ``file://path``, ``mem://name`` or ``s3://bucket/prefix``.
        storage_options: options for the object-store client of ``s3://`` locations
            (``endpoint_url``, ``key``, ``secret``, ``region``, ``anonymous``, ...).
        cache_dir: a folder for the local disk cache of an object store's chunks (`Backend.disk`;
            `lakecompute.storage.cache_spec` says the rules); None: none, unless ``cache_from_env``.
        cache_size: the cache's bound: bytes or text such as ``"20GB"``.
        cache_from_env: without ``cache_dir``, take ``LAKECOMPUTE_CACHE_DIR``'s folder (``lc.load``).

    Raises:
        InvalidArgumentError: for an unsupported scheme or an empty path; a ``cache_size`` that does
            not parse.
        InvalidTypeError: a ``cache_dir`` that is not a path, a ``cache_size`` that is not a size.
        StorageError: an ``s3://`` location that cannot be used (no such bucket, no credentials,
            an endpoint that does not answer).
    """
    text = _location_text(url)
    asked = cache_dir is not None or cache_size is not None or cache_from_env
    disk = cache_spec(cache_dir, cache_size) if asked else None
    backend = _open(text, BackendSpec(text, dict(storage_options or {})))
    backend.disk = disk
    return backend


def _open(text: str, spec: BackendSpec) -> Backend:
    """The backend of the location ``text`` (checked by `_location_text`)."""
    if text.startswith("mem://"):
        name = text[len("mem://") :].strip("/")
        if not name:
            raise InvalidArgumentError(
                f"Expected mem://<name>. Got {text!r}; add a name, e.g. 'mem://scratch'."
            )
        return MemoryBackend(spec, name)
    if text.startswith("file://"):
        return LocalBackend(spec, os.path.abspath(text[len("file://") :]))
    if "://" in text:
        scheme = text.split("://", 1)[0]
        if scheme == "s3":
            # Imported here: the S3 client is an optional extra, and `import lakecompute` stays fast.
            from lakecompute.storage._s3 import open_s3_backend

            return open_s3_backend(spec)
        raise InvalidArgumentError(
            f"Unsupported dataset location {text!r}. Expected a local path, 'file://…', 'mem://name' or "
            "'s3://bucket/prefix'."
        )
    return LocalBackend(spec, os.path.abspath(text))


#: Room left in a local path or an S3 key for the dataset's own files below its location
#: (``tensors/<name of up to 128 characters>/<segment>/c/...``).
_OWN_KEYS = 320
_MAX_LOCAL_PATH = 4096 - _OWN_KEYS  # Linux PATH_MAX, in bytes
_MAX_NAME = 255  # bytes in one path component on common local file systems
_MAX_S3_PREFIX = 1024 - _OWN_KEYS  # an S3 key is at most 1024 bytes
_ROOM = " (with room for the dataset's own files below it)"


def _location_text(url: object) -> str:
    """``url`` as text, refused with what to do when no backend could store a dataset there."""
    try:
        text: str | bytes = os.fspath(url)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidTypeError(
            f"Expected a dataset path as str or os.PathLike. Got {type(url).__name__}: {url!r:.80}."
        ) from None
    if isinstance(text, bytes):
        raise InvalidTypeError(f"Expected a dataset path as str, not bytes. Got {text!r:.80}; decode it.")
    if not text:
        raise InvalidArgumentError("Expected a dataset path. Got an empty string.")
    if "\x00" in text:
        raise InvalidArgumentError(
            f"Invalid dataset path {text!r:.80}: it contains a NUL character, which no file system or "
            "object store accepts. Remove it."
        )
    if "://" in text and not text.startswith("file://"):
        if text.startswith("s3://"):
            prefix = text[len("s3://") :].partition("/")[2]
            _check_length(text, len(prefix.encode()), _MAX_S3_PREFIX, "its key prefix is", _ROOM)
        return text
    local = os.path.abspath(text.removeprefix("file://"))
    _check_length(text, len(os.fsencode(local)), _MAX_LOCAL_PATH, "the path is", _ROOM)
    longest = max(len(os.fsencode(part)) for part in local.split(os.sep))
    _check_length(text, longest, _MAX_NAME, "a folder name in it is", " in one name")
    return text


def _check_length(text: str, size: int, limit: int, what: str, where: str) -> None:
    if size > limit:
        raise InvalidArgumentError(
            f"Dataset path too long ({text[:40]!r}..., {len(text)} characters): {what} {size} bytes, at most "
            f"{limit} fit{where}. Choose a shorter path."
        )


def backend_class(url: str | os.PathLike[str]) -> type[Backend]:
    """The kind of backend a location opens as, without opening it (to ask about its traits, such as
    `Backend.fork_safe`)."""
    text = os.fspath(url)
    if text.startswith("mem://"):
        return MemoryBackend
    if text.startswith("s3://"):
        from lakecompute.storage._s3 import S3Backend

        return S3Backend
    return LocalBackend
