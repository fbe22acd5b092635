"""Names from untrusted files, confined to the folder the caller named (symbolic links followed)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from lakecompute.errors import InvalidArgumentError

__all__ = ["Folder", "confine", "inside"]


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
