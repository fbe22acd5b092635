"""Selections that stay on the version they were taken on: views, rows and a tensor's selections.

``ds[0:3]`` reads the version ``ds`` read when the view was made, whatever the handle does afterwards
(a checkout, a write, a restore, a reload), as Deep Lake 3's views do (its ``test_auto_checkout_bug``)
and as a pickled view, a loader's state and an eval's record always did. While the handle still reads
that version (its uncommitted writes inside ``with`` included) a selection reads through it; once the
handle has moved, the selection opens that version read-only, once, and reads it from then on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakecompute.datasets._core import DatasetCore, HasCore, core_of

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset

__all__ = ["TakenAt"]


class TakenAt(HasCore):
    """What a view, row or tensor selection shares: the handle it reads through (`_ds`), which is its
    dataset's handle while that reads the version the selection was taken on, else that version.

    Subclasses call `_take` where they would have kept the handle.
    """

    _live: Dataset
    _taken: int
    _opened: Dataset | None

    def _take(self, ds: Dataset) -> None:
        self._live = ds
        self._taken = core_of(ds).version
        self._opened = None

    @property
    def _ds(self) -> Dataset:
        opened = self._opened
        if opened is not None:
            return opened
        live = self._live
        if core_of(live).version == self._taken:
            return live
        self._opened = opened = _open_at(live, self._taken)
        return opened

    @property
    def _core(self) -> DatasetCore:  # type: ignore[override]  # HasCore's attribute: here `_ds`'s, read-only
        return core_of(self._ds)


def _open_at(ds: Dataset, version: int) -> Dataset:
    """``ds``'s dataset at ``version``, opened read-only: a handle of its own, checked to be the same
    dataset (`lakecompute.DatasetReplacedError` if the location holds another one now)."""
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.storage import open_backend
    from lakecompute.versioned import Table

    location = ds.location
    backend = open_backend(location.url, dict(location.storage_options))
    manifest = Table(backend).manifest_of(version, core_of(ds).dataset_id, "the view")
    return Dataset(backend, manifest, read_only=True, pinned=True)
