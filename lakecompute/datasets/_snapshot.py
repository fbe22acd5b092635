"""A committed version of a dataset (or view) described so that any process can open it again.

`Snapshot` is what readers in other processes (loader workers, eval workers) receive: a location,
a version and positions, never data; each opens its own store client from it (STORAGE-NOTES
"Processes"). It carries the layout verdicts of the process that made it
(`lakecompute.storage.layout_verdicts`), so a reader elsewhere does not probe those layouts again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lakecompute.datasets._core import core_of
from lakecompute.datasets._dataset import Dataset
from lakecompute.datasets._objects import ObjectSelection
from lakecompute.datasets._views import DatasetView, base_dataset
from lakecompute.errors import InvalidArgumentError
from lakecompute.storage import LayoutVerdicts, adopt_layout_verdicts, layout_verdicts, open_backend
from lakecompute.versioned import Table

__all__ = ["Snapshot", "snapshot"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A committed version of a dataset, or of a view of it, that any process can open again.

    Attributes:
        url: the dataset location as the user gave it.
        storage_options: options for the object-store client (S3 only).
        version: the committed version read.
        positions: positions of the samples in the dataset (a view's selection, else ``range(len(ds))``).
        tensors: names of the dataset's tensors, in creation order.
        fork_safe: whether a forked child can still use the store (False for object stores).
        shared_between_processes: whether other processes can open it (False for ``mem://``).
        dataset_id: the dataset's id (`Dataset.id`): opening refuses another dataset made at ``url``.
        digest: the version's content digest (`Dataset.digest`): opening refuses a copy of the dataset
            at ``url`` whose version ``version`` holds other content (its history diverged).
        verdicts: how the process that made it reads the layouts of arrays it decided so far, adopted
            by `open` where they hold (same zarr and codecs), so that a worker does not probe them again.
        objects: the objects a view keeps of each of its rows (``filter_labels``), aligned with
            ``positions``; readers hand out a group's tensors with those objects only (`objects_of`).
        cache: the local disk cache readers of a remote dataset read its chunks through, as its folder
            and bound in bytes, or None.
    """

    url: str
    storage_options: dict[str, Any] = field(hash=False)
    version: int
    positions: range | np.ndarray = field(hash=False)
    tensors: tuple[str, ...]
    fork_safe: bool
    shared_between_processes: bool
    dataset_id: str = ""
    verdicts: LayoutVerdicts = field(default_factory=LayoutVerdicts, hash=False, compare=False)
    digest: str = ""
    objects: ObjectSelection | None = field(default=None, hash=False, compare=False)
    cache: tuple[str, int] | None = field(default=None, hash=False, compare=False)

    def __len__(self) -> int:
        return len(self.positions)

    def selection(self) -> str:
        """The samples read, in words that are equal exactly when the selections are: ``"rows 0:100"``
        for a slice, ``"rows 0:100:2"`` with a step, ``"25 rows #<digest>"`` for any other selection
        (a ``filter`` or ``random_split`` view: a digest of its positions, in order)."""
        pos = self.positions
        if isinstance(pos, range):
            if pos.step == 1 or len(pos) <= 1:
                return f"rows {pos.start}:{pos.start + len(pos)}"
            return f"rows {pos.start}:{pos.stop}:{pos.step}"
        flat = np.ascontiguousarray(pos, dtype="<i8")
        return f"{len(flat)} rows #{hashlib.sha256(flat.tobytes()).hexdigest()[:16]}"

    def objects_digest(self) -> str | None:
        """A digest of the objects the view keeps (equal exactly when they are), or None: all of them."""
        if self.objects is None:
            return None
        digest = hashlib.sha256()
        for group in self.objects.groups:
            digest.update(repr(group.tensors).encode())
            digest.update(np.ascontiguousarray(group.offsets, dtype="<i8").tobytes())
            digest.update(np.packbits(group.keep).tobytes())
        return digest.hexdigest()[:32]

    def kept(self, name: str, rows: range | np.ndarray, values: Any) -> Any:
        """Samples ``values`` of tensor ``name`` at rows ``rows`` of the view (indices into ``positions``),
        holding only the objects the view keeps (`ObjectSelection.samples`)."""
        return values if self.objects is None else self.objects.samples(name, rows, values)

    def open(self, cache_bytes: int | None = None) -> Dataset:
        """Open this version read-only: a new handle with its own store client.

        Args:
            cache_bytes: decoded bytes the handle's chunk cache keeps (default: a dataset handle's,
                `lakecompute.storage.CACHE_BYTES`); loaders keep more.

        Raises:
            DatasetReplacedError: another dataset was made at the location since the snapshot was taken,
                or the folder was replaced by a copy whose version holds other content.
        """
        adopt_layout_verdicts(self.verdicts)
        folder, size = self.cache if self.cache is not None else (None, None)
        backend = open_backend(self.url, self.storage_options, cache_dir=folder, cache_size=size)
        manifest = Table(backend).manifest_of(
            self.version, self.dataset_id, "the data being read", digest=self.digest
        )
        ds = Dataset(backend, manifest, read_only=True, pinned=True)
        if cache_bytes is not None:
            core_of(ds).cache.max_bytes = cache_bytes
        return ds


def snapshot(data: Dataset | DatasetView) -> Snapshot:
    """Describe the committed version ``data`` reads, for readers in this or another process.

    Raises:
        InvalidArgumentError: the dataset has uncommitted changes (workers could not see them).
    """
    base = base_dataset(data)
    if base.has_pending_changes:
        raise InvalidArgumentError(
            f"Dataset {base.path!r} has uncommitted changes, which a loader cannot read. "
            "Commit them first (leave the `with` block or call ds.commit())."
        )
    positions = data.positions if isinstance(data, DatasetView) else range(len(base))
    core = core_of(base)
    backend = core.backend
    return Snapshot(
        base.location.url,
        dict(base.location.storage_options),
        base.version,
        positions,
        tuple(data.keys() if isinstance(data, DatasetView) else core.names()),
        backend.fork_safe,
        backend.shared_between_processes,
        core.dataset_id,
        layout_verdicts(),
        digest=core.txn.base.digest,
        objects=data.kept_objects if isinstance(data, DatasetView) else None,
        cache=None if backend.disk is None else (backend.disk.directory, backend.disk.max_bytes),
    )
