"""`Table`: the versioned table format of one dataset location, behind one narrow object.

The dataset layer reads and changes a dataset's history only through a `Table` (and the `Writer` it
hands out for data): which versions there are and what they hold, the refs, the one commit call, and
the operations on a whole dataset (create, delete, vacuum). Every change it makes is one atomic step in
storage: the creation or the removal of one small file, or a manifest stored under a free number and
its branch moved there. Like zarr's ``Store``, it is small enough to be tested on every backend
through raw reads and writes of its keys (`lakecompute.testing.versioned.TableTests`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from lakecompute.errors import RefExistsError, RefNotFoundError
from lakecompute.storage import CACHE_BYTES, ArrayCache, Backend, DiskCache, RemoteChunks
from lakecompute.versioned._commit import commit, fast_forward
from lakecompute.versioned._diff import VersionDiff, diff_manifests
from lakecompute.versioned._fills import ChunkFills
from lakecompute.versioned._history import read_committed, resolve
from lakecompute.versioned._keys import branch_key, tag_key
from lakecompute.versioned._leases import Lease
from lakecompute.versioned._log import log_entries
from lakecompute.versioned._manifest import Manifest, TensorState
from lakecompute.versioned._merge import Resolution, merged_content
from lakecompute.versioned._reads import read_manifest
from lakecompute.versioned._refs import (
    DEFAULT_BRANCH,
    BranchRef,
    TagRef,
    create_branch,
    create_tag,
    ensure_main,
    list_branches,
    list_tags,
    new_line_id,
    read_branch,
    read_tag,
)
from lakecompute.versioned._root import (
    check_is_dataset,
    create_dataset,
    delete_dataset,
    is_dataset,
    marker_id,
)
from lakecompute.versioned._segments import ARRAY_RULES, Compressors
from lakecompute.versioned._vacuum import Parked, vacuum
from lakecompute.versioned._versions import branch_head, dataset_id_of, latest_version, read_manifest_of
from lakecompute.versioned._writer import Writer

__all__ = ["Table"]


class Table:
    """The versioned table at one dataset location.

    Args:
        backend: where the dataset lives.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def url(self) -> str:
        """The location, as errors name it."""
        return self.backend.url

    # -- versions --------------------------------------------------------------------------------
    def latest(self) -> int | None:
        """The newest committed version number (of any branch), or None when there is none."""
        return latest_version(self.backend)

    def manifest(self, version: int) -> Manifest:
        """Version ``version``'s manifest (stored, not necessarily committed: see `committed`).

        Raises:
            DatasetNotFoundError: no such version.
            DatasetCorruptError: the manifest is damaged.
        """
        return read_manifest(self.backend, version)

    def committed(self, version: int) -> Manifest:
        """Version ``version``'s manifest, if a branch moved to it when it was committed.

        Raises:
            DatasetNotFoundError: no such committed version.
            DatasetCorruptError: the manifest is damaged.
        """
        return read_committed(self.backend, version)

    def manifest_of(self, version: int, dataset_id: str, what: str, digest: str = "") -> Manifest:
        """Version ``version``'s manifest, checked to belong to dataset ``dataset_id`` (and, with
        ``digest``, to hold that content): what a pickled handle, a snapshot or a state refers to.

        Raises:
            DatasetReplacedError: another dataset (or a copy that diverged) is at the location now.
            DatasetNotFoundError: no such version.
        """
        return read_manifest_of(self.backend, version, dataset_id, what, digest=digest)

    def dataset_id(self, manifest: Manifest) -> str:
        """The id of the dataset ``manifest`` belongs to (derived once for a dataset made before ids)."""
        return dataset_id_of(self.backend, manifest)

    def resolve(self, spec: object, what: str = "version") -> int:
        """The version a number, branch name (its head) or tag names.

        Raises:
            RefNotFoundError: no branch or tag has that name.
            InvalidArgumentError, InvalidTypeError: ``spec`` is no version name.
        """
        return resolve(self.backend, spec, what)

    def log(self, version: int | None, evals: bool = False) -> list[dict[str, Any]]:
        """The log of ``version`` (None: of every branch and tag), oldest first (see ``Dataset.log``)."""
        return log_entries(self.backend, version, self.url, evals=evals)

    def diff(self, old: Manifest, new: Manifest) -> VersionDiff:
        """What changed from ``old`` to ``new``, from their manifests alone."""
        return diff_manifests(self.url, old, new)

    # -- refs ------------------------------------------------------------------------------------
    def branches(self) -> list[str]:
        """Every branch's name, sorted (``main`` always among them)."""
        return list_branches(self.backend)

    def branch(self, name: str) -> BranchRef | None:
        """Branch ``name``'s ref, or None (no such branch, or ``main`` of a dataset before refs)."""
        return read_branch(self.backend, name)

    def checkout(self, name: str) -> tuple[BranchRef | None, int]:
        """Branch ``name``'s ref (None for ``main`` of a dataset written before refs) and its head.

        Raises:
            RefNotFoundError: there is no such branch.
            DatasetCorruptError: its ref or a move is damaged.
        """
        ref = read_branch(self.backend, name)
        if ref is not None:
            return ref, branch_head(self.backend, ref)
        latest = latest_version(self.backend) if name == DEFAULT_BRANCH else None
        if latest is None:
            raise RefNotFoundError(self.url, name, "branch", list_branches(self.backend))
        return None, latest

    def tags(self) -> dict[str, int]:
        """Tag name -> the version it names, sorted by name.

        Raises:
            DatasetCorruptError: a tag file is damaged.
        """
        return {name: t.version for name, t in list_tags(self.backend).items()}

    def create_branch(self, name: str, start: int, source: str | None) -> BranchRef:
        """A new branch ``name`` at version ``start``, made from branch ``source`` (one atomic step).

        Raises:
            RefExistsError: a tag or a branch has that name.
        """
        if read_tag(self.backend, name) is not None:
            raise RefExistsError(self.url, name, "tag")
        # A dataset written before branches gets main's ref first: from now on main is not "the newest
        # version".
        ensure_main(self.backend, latest_version(self.backend) or 0)
        ref = BranchRef(name, new_line_id(), start, time.time(), source)
        if not create_branch(self.backend, ref):
            raise RefExistsError(self.url, name, "branch")
        return ref

    def delete_branch(self, name: str) -> None:
        """Remove branch ``name``'s ref (one atomic step; its versions stay while something reaches them).

        Raises:
            RefNotFoundError: no such branch.
        """
        if read_branch(self.backend, name) is None:
            raise RefNotFoundError(self.url, name, "branch", list_branches(self.backend))
        self.backend.delete(branch_key(name))

    def create_tag(self, name: str, version: int) -> None:
        """Name committed version ``version`` ``name``, for good.

        Raises:
            DatasetNotFoundError: no such committed version.
            RefExistsError: a branch or a tag has that name.
        """
        read_committed(self.backend, version)
        if name in list_branches(self.backend):
            raise RefExistsError(self.url, name, "branch")
        if not create_tag(self.backend, TagRef(name, version, time.time())):
            raise RefExistsError(self.url, name, "tag")

    def delete_tag(self, name: str) -> None:
        """Remove tag ``name``.

        Raises:
            RefNotFoundError: no such tag.
        """
        if read_tag(self.backend, name) is None:
            raise RefNotFoundError(self.url, name, "tag", sorted(list_tags(self.backend)))
        self.backend.delete(tag_key(name))

    # -- writing ---------------------------------------------------------------------------------
    def commit(
        self,
        base: Manifest,
        head: Manifest,
        ref: BranchRef | None,
        message: str,
        origin: Mapping[str, Any] | None = None,
        *,
        record: Mapping[str, Mapping[str, Any]] | None = None,
        merged: Sequence[Manifest] = (),
        lease: Lease | None = None,
        dataset_id: str = "",
    ) -> Manifest:
        """The one commit call: ``head``'s content as the next version of branch ``ref`` after ``base``;
        the version committed (see `lakecompute.versioned._commit.commit` for every argument).

        Raises:
            CommitConflictError: another writer moved the branch first; nothing of this one is kept.
            RefNotFoundError: the branch was deleted meanwhile.
        """
        return commit(
            self.backend,
            base,
            head,
            ref,
            message,
            origin,
            record=record,
            merged=merged,
            lease=lease,
            dataset_id=dataset_id,
        )

    def fast_forward(
        self, base: Manifest, target: Manifest, ref: BranchRef | None, lease: Lease | None = None
    ) -> None:
        """Move branch ``ref`` from ``base`` to ``target``, which descends from it (no new version).

        Raises:
            CommitConflictError: another writer moved the branch first.
        """
        fast_forward(self.backend, base, target, ref, lease)

    def merge(
        self, ours: Manifest, theirs: Manifest, source: str, resolution: Resolution
    ) -> tuple[Manifest, dict[str, Any]]:
        """The content and origin of a version merging ``theirs`` into ``ours`` (three-way, from their
        newest common ancestor; commit it with ``merged=(theirs,)``).

        Raises:
            MergeConflictError: both sides changed the same rows or tensors.
            InvalidArgumentError: no common ancestor is left.
        """
        return merged_content(self.backend, ours, theirs, source, resolution)

    def chunk_cache(self, max_bytes: int = CACHE_BYTES) -> ArrayCache:
        """A cache of decoded chunks for reading this table's arrays (checked against its layout)."""
        return ArrayCache(self.backend.zarr_store(), max_bytes, backend=self.backend, rules=ARRAY_RULES)

    def read_through_disk(
        self, cache: ArrayCache, dataset_id: str, states: Callable[[], Iterable[TensorState]]
    ) -> None:
        """Have ``cache`` read this remote table's chunks through the backend's local disk cache
        (`lakecompute.storage.Backend.disk`; nothing for a local one, or without a cache), an entry
        serving what the tensors ``states()`` gives use of each chunk (`ChunkFills`: a handle's working
        copy, written samples included, so that a chunk an append grew is fetched again)."""
        backend = self.backend
        if backend.disk is None or backend.machine_local or not backend.shared_between_processes:
            return  # a local dataset is on a disk already
        known: list[tuple[tuple[TensorState, ...], ChunkFills]] = []

        def fill(path: str, c: int, size: int) -> int:
            now = tuple(states())
            if (
                not known
                or len(known[0][0]) != len(now)
                or any(a is not b for a, b in zip(known[0][0], now, strict=True))
            ):
                known[:] = [(now, ChunkFills(now))]
            return known[0][1].fill(path, c, size)

        cache.remote = RemoteChunks(DiskCache.shared(backend.disk), backend, dataset_id, fill)

    def writer(self, cache: ArrayCache, compressors: Compressors) -> Writer:
        """A writer's lease and segments, writing through ``cache`` with ``compressors``' codecs."""
        return Writer(self.backend, cache, compressors)

    def vacuum(
        self,
        grace_seconds: float,
        keep_versions: int | None,
        progressbar: bool,
        parked: Parked,
    ) -> dict[str, int]:
        """Remove what no kept version needs and no live writer may still commit (see
        `lakecompute.versioned._vacuum.vacuum`); counts of removed ``versions``, ``segments``, ``chunks``."""
        return vacuum(self.backend, grace_seconds, keep_versions, progressbar, parked)

    # -- a whole dataset -------------------------------------------------------------------------
    def is_dataset(self) -> bool:
        """Whether a whole dataset is at the location."""
        return is_dataset(self.backend)

    def check_is_dataset(self) -> None:
        """Refuse a location that holds no whole dataset (`lakecompute.versioned._root.check_is_dataset`)."""
        check_is_dataset(self.backend)

    def create(self, overwrite: bool) -> tuple[Manifest, BranchRef]:
        """A new, empty dataset here: its version 0 and ``main`` (`lakecompute.versioned._root`)."""
        return create_dataset(self.backend, overwrite)

    def delete(self, missing_ok: bool) -> None:
        """Remove the dataset here, crash-safe (`lakecompute.versioned._root.delete_dataset`)."""
        delete_dataset(self.backend, missing_ok)

    def marker_id(self) -> str | None:
        """The id the dataset's root marker names (None: no dataset, or one made before ids)."""
        return marker_id(self.backend)
