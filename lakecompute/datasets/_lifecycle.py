"""A dataset's lifecycle: creating, opening and deleting datasets (``lc.empty``, ``lc.load``, ...).

Here, in the dataset layer, so that every layer above (ingest, vision, the copy of a view) creates and
opens datasets by importing these functions, not through the ``lakecompute`` facade; `lakecompute.api`
re-exports them as the public surface.
"""

from __future__ import annotations

import os
from typing import Any

from lakecompute.datasets._core import core_of
from lakecompute.datasets._dataset import Dataset
from lakecompute.datasets._head import Checkout, checkout_of
from lakecompute.datasets._views import DatasetView, base_dataset
from lakecompute.errors import (
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
    RefNotFoundError,
)
from lakecompute.storage import Backend, open_backend
from lakecompute.versioned import DEFAULT_BRANCH, Table, parse_ref_name

__all__ = ["check_apart", "dataset", "delete", "empty", "exists", "is_dataset", "like", "load"]

PathLike = str | os.PathLike[str]


def is_dataset(backend: Backend) -> bool:
    """Whether a whole lakecompute dataset is at the location (its marker written, not half removed)."""
    return Table(backend).is_dataset()


def exists(path: PathLike, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether a lakecompute dataset is at ``path``."""
    return is_dataset(open_backend(path, storage_options))


def empty(path: PathLike, overwrite: bool = False, storage_options: dict[str, Any] | None = None) -> Dataset:
    """Create a new, empty dataset.

    ``overwrite=True`` replaces a lakecompute dataset (whole, damaged, or half created or removed by a
    kill) and nothing else: a folder or prefix that holds other files is refused, ``overwrite`` or not,
    so a mistyped path never costs anyone their files. Overwriting is crash-safe: a kill at any instant
    leaves the old dataset whole, no dataset, or the new empty one.

    Raises:
        DatasetExistsError: a dataset is there and ``overwrite`` is False.
        InvalidArgumentError: something other than a lakecompute dataset is there (the message names
            what was found).
    """
    backend = open_backend(path, storage_options)
    manifest, main = Table(backend).create(overwrite)
    return Dataset(backend, manifest, checkout=Checkout(DEFAULT_BRANCH, main))


def load(
    path: PathLike,
    read_only: bool = False,
    version: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
    branch: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_size: int | str | None = None,
) -> Dataset:
    """Open an existing dataset at the newest version of its ``main`` branch (or of ``branch``), or, read-
    only, at ``version``: a version number or a tag (or a branch name: its newest version).

    A dataset on object storage (``s3://``) is read through a local disk cache of its chunks when
    ``cache_dir`` is given (or the ``LAKECOMPUTE_CACHE_DIR`` environment variable names one): verified,
    shared by processes, bounded by ``cache_size`` (bytes or text such as ``"20GB"``; default 20 GB, or
    ``LAKECOMPUTE_CACHE_SIZE``); loaders made from the handle use it too (docs/cluster.md).

    Raises:
        DatasetNotFoundError: no dataset there, or no such version.
        RefNotFoundError: no such branch or tag.
        DatasetCorruptError: the version's manifest is damaged (the message names the file).
        InvalidTypeError: ``cache_dir`` is not a path, or ``cache_size`` neither bytes nor text.
        InvalidArgumentError: ``cache_size`` does not parse as a size.
    """
    backend = open_backend(
        path, storage_options, cache_dir=cache_dir, cache_size=cache_size, cache_from_env=True
    )
    table = Table(backend)
    table.check_is_dataset()
    if version is not None:
        if branch is not None:
            raise InvalidArgumentError(
                f"Pass either version= (read-only, {version!r}) or branch= ({branch!r}) to lc.load, not both."
            )
        if isinstance(version, bool) or not isinstance(version, (int, str)):
            raise InvalidTypeError(
                f"Expected version as an int or a tag name. Got {type(version).__name__}: {version!r}."
            )
        manifest = table.committed(table.resolve(version))
        # Pinned: read-only at that version; checkout(name, create=True) starts a branch there (unless
        # the handle was asked to be read-only).
        return Dataset(backend, manifest, read_only=read_only, pinned=True)
    name = parse_ref_name("branch", DEFAULT_BRANCH if branch is None else branch)
    try:
        checkout, head = checkout_of(table, name)
    except RefNotFoundError:
        if name == DEFAULT_BRANCH:  # a dataset with no main is one with no version at all
            raise DatasetNotFoundError(backend.url, "It has no committed version.") from None
        raise
    return Dataset(backend, table.manifest(head), read_only=read_only, checkout=checkout)


def dataset(
    path: PathLike, read_only: bool = False, storage_options: dict[str, Any] | None = None
) -> Dataset:
    """Open the dataset at ``path``, creating an empty one if there is none."""
    if exists(path, storage_options):
        return load(path, read_only=read_only, storage_options=storage_options)
    return empty(path, storage_options=storage_options)


def like(
    path: PathLike,
    source: Dataset | DatasetView,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Dataset:
    """Create an empty dataset with the same tensors as ``source`` (names, htypes, dtypes,
    compressions, class names) and no samples."""
    src = base_dataset(source)
    check_apart(open_backend(path, storage_options), src, "make a dataset like")
    out = empty(path, overwrite=overwrite, storage_options=storage_options)
    with out:
        for name, tensor in src.tensors.items():
            out.create_tensor_like(name, tensor)
        out.commit(f"create tensors like {src.path}")
    return out


def check_apart(dest: Backend, source: Dataset, verb: str) -> None:
    """Refuse a destination that is ``source``'s location, is inside it or contains it (resolved: links
    followed, one folder under two names is one), or that holds the same dataset (its id): writing there
    (an overwrite clears it first) would remove the source's own files. Checked before anything is
    deleted, by every call that writes a dataset made from another (``lc.copy``, ``view.save``,
    ``lc.like``).

    Raises:
        InvalidArgumentError: naming both locations, how they overlap, and what to do.
    """
    origin = core_of(source).backend
    relation = dest.overlap(origin)
    if relation is not None:
        how = {"same": "is", "inside": "is inside", "contains": "contains"}[relation]
        there, here = _resolved(dest), _resolved(origin)
        raise InvalidArgumentError(
            f"Cannot {verb} {source.path!r} at {dest.url!r}: the destination {how} the source "
            f"({there if there == here else f'{there} and {here}'}), so writing it would remove the source's "
            "files. Choose a destination outside the source (and not a folder that holds it)."
        )
    held = Table(dest).marker_id()
    if held is not None and held == source.id:
        raise InvalidArgumentError(
            f"Cannot {verb} {source.path!r} at {dest.url!r}: the destination holds the same dataset (id "
            f"{held}), the source itself under another name or a copy of its folder (cp -r). If it is a "
            f"copy you mean to replace, delete it first: lc.delete({dest.url!r})."
        )


def _resolved(backend: Backend) -> str:
    """A location as it resolves: a local folder's real path, else its URL."""
    local = backend.local_path("")
    return os.path.realpath(local) if local is not None else backend.spec.url


def delete(path: PathLike, missing_ok: bool = False, storage_options: dict[str, Any] | None = None) -> None:
    """Delete the dataset at ``path`` and all its versions.

    Crash-safe: a kill at any instant leaves the dataset whole or no dataset; the leftovers of an
    interrupted delete are removed by the next ``lc.delete(path)`` or ``lc.empty(path)``. Only a
    lakecompute dataset is ever removed: a folder or prefix holding other files is refused and left
    as it is, ``missing_ok`` or not.

    Raises:
        DatasetNotFoundError: nothing is there and ``missing_ok`` is False, or something other than a
            lakecompute dataset is there (the message names what was found).
    """
    Table(open_backend(path, storage_options)).delete(missing_ok)
