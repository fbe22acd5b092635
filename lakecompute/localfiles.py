"""Local files outside a dataset: names from untrusted files confined to a folder, and atomic writes.

Two rules every reader and writer of plain files (ingests, exports) follows:

* **A name read from a file is untrusted.** A COCO ``file_name``, a YOLO image path or a ``data.yaml``
  entry is resolved with `confine`: relative to the folder the caller named, symbolic links followed, and
  refused unless the result stays inside that folder.
* **A file written outside a dataset is whole or absent.** `write_atomic` writes a temporary file beside
  the target, flushes it to disk and renames it into place, so a kill or a full disk leaves the previous
  file (or none), never half of one.
* **An export of many files keeps the previous one until it is done.** `FolderExport` writes every file
  to a hidden staging folder inside the target, then moves them into place and writes the index file
  (``annotations.json``, ``data.yaml``) last: an export that fails or is killed while it writes leaves
  the previous export as it was. Every name is confined to the target, and two files at one name are
  refused.

This module depends only on `lakecompute.errors`, so that every layer may use it.

Example:
    >>> import tempfile
    >>> from lakecompute.localfiles import confine
    >>> root = tempfile.mkdtemp()
    >>> confine(root, "a/b.png", what="file_name of image 3").endswith("b.png")
    True
    >>> confine(root, "../x.png", what="file_name of image 3")
    Traceback (most recent call last):
    ...
    lakecompute.errors.InvalidArgumentError: file_name of image 3 is '../x.png', which resolves outside ...
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from types import TracebackType

from lakecompute.errors import InvalidArgumentError, StorageError

__all__ = ["Folder", "FolderExport", "confine", "inside", "write_atomic"]


def inside(root: str, path: str) -> bool:
    """Whether ``path`` (both resolved, symbolic links followed) is ``root`` or lies inside it."""
    r = os.path.realpath(root)
    p = os.path.realpath(path)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def confine(root: str, name: object, *, what: str) -> str:
    """The path that ``name`` (read from an untrusted file) names inside ``root``, symbolic links followed.

    For many names under one folder, `Folder` resolves the folder once.

    Args:
        root: the folder the caller named.
        name: the untrusted relative path.
        what: which entry ``name`` comes from, for the message (``"file_name of image 7 in a.json"``).

    Returns:
        The resolved path, inside ``root``.

    Raises:
        InvalidArgumentError: ``name`` is not a non-empty string, is absolute, holds a NUL byte, or resolves
            (through ``..`` or a symbolic link) outside ``root``.
    """
    return Folder.of(root).confine(name, what=what)


@dataclass(frozen=True, slots=True)
class Folder:
    """A folder that names read from untrusted files must stay inside, resolved once for all of them.

    Example:
        >>> import tempfile
        >>> folder = Folder.of(tempfile.mkdtemp())
        >>> folder.confine("b/c.png", what="file_name of image 3").endswith("c.png")
        True
    """

    given: str
    """The folder as the caller named it (for messages)."""
    real: str
    """The folder resolved, symbolic links followed."""

    @classmethod
    def of(cls, root: str) -> Folder:
        """The folder ``root``, resolved now."""
        return cls(root, os.path.realpath(root))

    def confine(self, name: object, *, what: str) -> str:
        """The resolved path that ``name`` names inside this folder (see `confine`)."""
        if not isinstance(name, str) or not name or "\x00" in name:
            raise InvalidArgumentError(
                f"{what} must be a non-empty relative path. Got {type(name).__name__}: {name!r:.200}. "
                "Fix the entry."
            )
        if os.path.isabs(name):
            raise InvalidArgumentError(
                f"{what} is the absolute path {name!r:.200}; paths in annotation files are read relative to "
                f"{self.given!r} and must stay inside it. Make the entry relative."
            )
        plain = self._plain(name)
        if plain is not None:
            return plain
        path = os.path.realpath(os.path.join(self.real, name))
        if not (path == self.real or path.startswith(self.real.rstrip(os.sep) + os.sep)):
            raise InvalidArgumentError(
                f"{what} is {name!r:.200}, which resolves outside the folder {self.given!r} (to "
                f"{path!r:.200}). Paths in annotation files must stay inside the folder given; fix the entry "
                "or move the file."
            )
        return path

    def _plain(self, name: str) -> str | None:
        """The path of a name without ``..`` none of whose components below the folder is a symbolic link
        (one ``lstat`` per component of the name, where ``realpath`` takes one per component of the whole
        path); None for any other name, which `confine` resolves in full."""
        parts = [p for p in name.split(os.sep) if p not in ("", ".")]
        if not parts or ".." in parts:
            return None
        path = self.real
        for part in parts:
            path = os.path.join(path, part)
            if os.path.islink(path):
                return None
        return path


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file in the same folder, flushed to
    disk, then renamed over ``path``.

    Raises:
        StorageError: the file cannot be written (a full disk, a missing folder, no permission); ``path``
            keeps what it held before.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".partial")
        _write_fd(fd, data)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def _file_mode() -> int:
    """The mode ``open()`` gives a new file (0o666 less the umask); read once, at import."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


# mkstemp makes files only their owner may read (0o600); an exported file is made as open() makes one.
_FILE_MODE = _file_mode()


def _write_fd(fd: int, data: bytes) -> None:
    os.fchmod(fd, _FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _storage_error(path: str, exc: OSError) -> StorageError:
    return StorageError(
        f"Cannot write {path!r} ({exc.strerror or exc}); the file keeps what it held before. "
        "Check free space and permissions, then run again.",
        url=path,
        reason="other",
    )


_STAGING = ".lakecompute-export-"


class FolderExport:
    """The files of one export into a folder, written whole and put in place together, the index last.

    Each `write` checks its name (confined to the folder, symbolic links followed; no second file at
    the same place) and writes the bytes, flushed to disk, into a hidden staging folder inside the
    target. `commit` moves every staged file to its place (a rename each: no copying) and then writes
    the index file with `write_atomic`. Until `commit`, the folder holds what it held before: an export
    that fails (a full disk, an exception in the caller) removes its staging folder; one that is killed
    leaves it behind, hidden, and the next export into the folder removes it. A kill during `commit`
    itself (renames only) can leave some new files beside the old index file, never half a file.

    Use it as a context manager: leaving the block by an exception drops what was staged.

    Args:
        root: the target folder (created when missing).

    Raises:
        StorageError: the folder or a file cannot be written, naming the path.

    Example:
        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> with FolderExport(root) as out:
        ...     _ = out.write("images/a.txt", b"a", what="file_name of sample 0")
        ...     out.commit(os.path.join(root, "index.json"), b"{}")
        >>> sorted(os.listdir(root))
        ['images', 'index.json']
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        try:
            os.makedirs(self.root, exist_ok=True)
            _remove_abandoned(self.root)
            self._staging = tempfile.mkdtemp(dir=self.root, prefix=f"{_STAGING}{os.getpid()}-")
        except OSError as exc:
            raise _storage_error(self.root, exc) from exc
        self._staged: list[tuple[str, str]] = []  # (staged file, target)
        self._claimed: dict[str, str] = {}  # target -> the entry that named it

    def __enter__(self) -> FolderExport:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def target(self, name: str, *, what: str, under: str = "") -> str:
        """The path ``name`` (untrusted, relative to the sub-folder ``under`` of the folder) names, claimed
        for this export.

        Raises:
            InvalidArgumentError: ``name`` leaves ``under`` or the folder (see `confine`), or an earlier
                entry of this export already names the same file (both entries named).
        """
        path = confine(confine(self.root, under or ".", what="a sub-folder"), name, what=what)
        earlier = self._claimed.get(path)
        if earlier is not None:
            raise InvalidArgumentError(
                f"{what} names the file {path!r:.200}, which {earlier} already names. Expected one file per "
                "entry: give the samples distinct file names."
            )
        self._claimed[path] = what
        return path

    def write(self, name: str, data: bytes, *, what: str, under: str = "") -> str:
        """Stage ``data`` as the file ``name`` (relative to ``under``, a sub-folder of the folder; see
        `target`); returns the file's final path."""
        path = self.target(name, what=what, under=under)
        try:
            fd, staged = tempfile.mkstemp(dir=self._staging)
            _write_fd(fd, data)
        except OSError as exc:
            raise _storage_error(path, exc) from exc
        self._staged.append((staged, path))
        return path

    def commit(self, index: str, data: bytes) -> None:
        """Move every staged file into place, then write the index file at the path ``index`` (chosen by
        the caller, not read from a file: it may lie outside the folder, as a COCO annotations file
        does) last, whole."""
        for staged, path in self._staged:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.replace(staged, path)
            except OSError as exc:
                raise _storage_error(path, exc) from exc
        self._staged.clear()
        write_atomic(index, data)
        self.close()

    def close(self) -> None:
        """Drop what is staged and not committed (nothing after `commit`)."""
        shutil.rmtree(self._staging, ignore_errors=True)
        self._staged.clear()


def _remove_abandoned(root: str) -> None:
    """Remove the staging folders of exports into ``root`` whose process is gone (killed mid-export)."""
    for entry in os.listdir(root):
        if not entry.startswith(_STAGING):
            continue
        pid = entry[len(_STAGING) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
