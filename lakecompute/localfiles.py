"""Local files outside a dataset: names from untrusted files confined to a folder, and atomic writes.

Two rules every reader and writer of plain files (ingests, exports) follows:

* **A name read from a file is untrusted.** A COCO ``file_name``, a YOLO image path or a ``data.yaml``
  entry is resolved with `confine`: relative to the folder the caller named, symbolic links followed, and
  refused unless the result stays inside that folder.
* **A file written outside a dataset is whole or absent.** `write_atomic` writes a temporary file beside
  the target, flushes it to disk and renames it into place, so a kill or a full disk leaves the previous
  file (or none), never half of one.

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
import tempfile
from dataclasses import dataclass

from lakecompute.errors import InvalidArgumentError, StorageError

__all__ = ["Folder", "confine", "inside", "write_atomic"]


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
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise StorageError(
            f"Cannot write {path!r} ({exc.strerror or exc}); the file keeps what it held before. "
            "Check free space and permissions, then run again.",
            url=path,
            reason="other",
        ) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)
