"""Where the viewer reads from: read-only handles of one dataset, one per version, shared by the requests.

A page names its version as the user does (a number, a branch or a tag; none means the version the viewer
was started on), so every page request opens the dataset afresh at that name (``load(path, version=...)``,
a few small reads): a branch that moved since shows its new head, and a dataset that was replaced at its
path (a new ``ds.id``) is noticed. The handle that serves the reads is then the one kept for that
``(id, version)``, whose chunk cache is warm; thumbnails and images name ``(id, version)`` themselves, so
they never read another dataset's rows under the same version number.

A handle is not thread-safe, and the server answers requests on threads: each kept handle has a lock, held
while a request reads through it. The number of handles kept is bounded, and each handle's chunk cache is
bounded (`lakecompute.storage.CACHE_BYTES`), so memory stays bounded however many versions are browsed.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lakecompute.datasets import Dataset, load
from lakecompute.errors import DatasetReplacedError

__all__ = ["MAX_HANDLES", "DatasetSource", "Opened"]

#: Versions whose handles are kept open at once (each with its own bounded chunk cache).
MAX_HANDLES = 4


@dataclass(frozen=True, slots=True)
class Opened:
    """A kept handle and the lock that serialises reads through it.

    Attributes:
        ds: a read-only handle pinned at one version.
        lock: held while a request reads through ``ds``.
    """

    ds: Dataset
    lock: threading.Lock

    @property
    def key(self) -> tuple[str, int]:
        """``(dataset id, version)``: what this handle reads."""
        return (self.ds.id, self.ds.version)


class DatasetSource:
    """Read-only handles of the dataset at ``path``, by version (see the module docstring).

    Args:
        path: the dataset's location.
        storage_options: passed through to the object-store client (S3).
        default: the version a page that names none shows: a number, a branch or a tag (None: main).
        max_handles: how many versions' handles are kept open at once.
    """

    def __init__(
        self,
        path: str,
        storage_options: dict[str, Any] | None = None,
        default: int | str | None = None,
        max_handles: int = MAX_HANDLES,
    ) -> None:
        self.path = path
        self.storage_options = dict(storage_options or {})
        self.default: int | str = "main" if default is None else default
        self._max = max(1, max_handles)
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, int], Opened] = OrderedDict()
        first = self._load(self.default)  # fails now, at start, if there is no dataset
        self.dataset_id = first.id
        self._keep(first)

    def _load(self, version: int | str) -> Dataset:
        return load(self.path, read_only=True, version=version, storage_options=self.storage_options or None)

    def _keep(self, ds: Dataset) -> Opened:
        """The kept handle for ``ds``'s (id, version): ``ds`` itself if none was kept yet."""
        key = (ds.id, ds.version)
        with self._lock:
            if ds.id != self.dataset_id:
                # The path holds another dataset now: it is the one shown, and the old one's handles go.
                self.dataset_id = ds.id
                self._kept.clear()
            opened = self._kept.get(key)
            if opened is None:
                opened = self._kept[key] = Opened(ds, threading.Lock())
                while len(self._kept) > self._max:
                    self._kept.popitem(last=False)
            self._kept.move_to_end(key)
            return opened

    def open(self, version: int | str | None = None) -> Opened:
        """The handle for ``version`` as a page names it (None: the default), resolved now.

        Raises:
            DatasetNotFoundError: no dataset there, or no such version.
            RefNotFoundError: no such branch or tag.
            DatasetCorruptError: the version's manifest is damaged.
        """
        return self._keep(self._load(self.default if version is None else version))

    def pinned(self, dataset_id: str, version: int) -> Opened:
        """The handle for version ``version`` of the dataset ``dataset_id`` (what a thumbnail names).

        Raises:
            DatasetReplacedError: the path holds another dataset now.
            DatasetNotFoundError: no such version.
        """
        with self._lock:
            opened = self._kept.get((dataset_id, version))
            if opened is not None:
                self._kept.move_to_end((dataset_id, version))
                return opened
        ds = self._load(version)
        if ds.id != dataset_id:
            raise DatasetReplacedError(self.path, dataset_id, ds.id, "this page")
        return self._keep(ds)

    @contextlib.contextmanager
    def reading(self, opened: Opened) -> Iterator[Dataset]:
        """``with source.reading(opened) as ds:`` reads through the handle, one request at a time."""
        with opened.lock:
            yield opened.ds
