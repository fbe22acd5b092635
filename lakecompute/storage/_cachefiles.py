"""What the disk cache's folder holds besides its entries, and the link-safe ways it looks at its folders:
the summary types of ``lakecompute cache info``, each namespace's note (which dataset it holds), and
folder helpers that never follow a link (see `lakecompute.storage._diskcache`).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ABOUT",
    "CacheInfo",
    "CachedDataset",
    "about_note",
    "gone",
    "listdir",
    "prune_namespace",
    "read_about",
    "real_folder",
]

#: Each namespace folder's note: which dataset it holds (for ``lakecompute cache info``; never read back).
ABOUT: Final = "about.json"


@dataclass(frozen=True, slots=True)
class CachedDataset:
    """What the cache holds of one dataset.

    Attributes:
        location: where the dataset is, as its reader gave it (``"?"`` if its note is missing).
        dataset_id: its id.
        entries: chunks held.
        nbytes: bytes they take.
    """

    location: str
    dataset_id: str
    entries: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """What a disk cache holds (``lakecompute cache info``).

    Attributes:
        directory: the cache folder.
        entries: chunks held.
        nbytes: bytes their files take.
        datasets: per dataset, what the cache holds of it (largest first).
        partial: temporary files being written now.
        removed: files removed (by `DiskCache.clear`; abandoned temporary files by either call).
    """

    directory: str
    entries: int
    nbytes: int
    datasets: tuple[CachedDataset, ...] = ()
    partial: int = 0
    removed: int = 0


def real_folder(path: str) -> bool:
    """Whether ``path`` is a folder itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def gone(exc: BaseException) -> bool:
    """Whether a write failed because a folder on its way is missing."""
    return isinstance(exc, FileNotFoundError) or isinstance(exc.__cause__, FileNotFoundError)


def prune_namespace(top: str) -> None:
    """Remove the namespace folder ``top`` with its note if it holds nothing else (never through a link:
    the folder is opened with ``O_NOFOLLOW``, its note removed relative to it)."""
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if set(os.listdir(fd)) <= {ABOUT}:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(ABOUT, dir_fd=fd)
            os.rmdir(top)  # fails if a writer made a fan folder in it meanwhile: it stays
    except OSError:
        pass
    finally:
        os.close(fd)


def listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def read_about(path: str) -> tuple[str, str]:
    """The location and id a namespace's note names (``"?"`` for what is missing or unreadable)."""
    try:
        with open(path, "rb") as f:
            note = json.loads(f.read(4096))
    except (OSError, ValueError):
        return "?", "?"
    if not isinstance(note, dict):
        return "?", "?"
    location, dataset_id = note.get("location"), note.get("dataset_id")
    return (
        location if isinstance(location, str) else "?",
        dataset_id if isinstance(dataset_id, str) else "?",
    )


def about_note(location: str, dataset_id: str) -> str:
    """The note `DiskCache.write` keeps once per namespace (for ``lakecompute cache info``)."""
    return json.dumps({"location": location, "dataset_id": dataset_id})
