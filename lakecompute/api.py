"""Creating, opening and deleting datasets."""

from __future__ import annotations

import json
import os
from typing import Any

import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from lakecompute.datasets import Dataset, DatasetView, base_dataset
from lakecompute.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
)
from lakecompute.storage import (
    Backend,
    Manifest,
    MemoryBackend,
    commit_manifest,
    latest_version,
    open_backend,
    read_manifest,
)

__all__ = ["dataset", "delete", "empty", "exists", "like", "load"]

PathLike = str | os.PathLike[str]
_MARK = "lakecompute"


def _root_meta(backend: Backend) -> bytes | None:
    raw = backend.read("zarr.json")
    if raw is None and isinstance(backend, MemoryBackend):
        # A mem:// backend keeps only version files itself; the group's zarr.json is in its zarr store.
        buf = sync(backend.zarr_store().get("zarr.json", default_buffer_prototype()))
        raw = None if buf is None else buf.to_bytes()
    return raw


def _is_dataset(backend: Backend) -> bool:
    raw = _root_meta(backend)
    if raw is None:
        return False
    try:
        meta = json.loads(raw)
    except ValueError:
        return False
    return isinstance(meta, dict) and _MARK in (meta.get("attributes") or {})


def exists(path: PathLike, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether a lakecompute dataset is at ``path``."""
    return _is_dataset(open_backend(path, storage_options))


def empty(path: PathLike, overwrite: bool = False, storage_options: dict[str, Any] | None = None) -> Dataset:
    """Create a new, empty dataset.

    Raises:
        DatasetExistsError: a dataset is there and ``overwrite`` is False.
    """
    backend = open_backend(path, storage_options)
    if _is_dataset(backend):
        if not overwrite:
            raise DatasetExistsError(backend.url)
        backend.delete_tree("")
    elif backend.list("") and not overwrite:
        raise InvalidArgumentError(
            f"{backend.url!r} is not empty and holds no lakecompute dataset. "
            "Choose an empty or new folder, or pass overwrite=True to delete what is there."
        )
    elif backend.list(""):
        backend.delete_tree("")
    store = backend.zarr_store()
    zarr.create_group(store, attributes={_MARK: {"format": 1}}, overwrite=True)
    manifest = Manifest(version=0, message="create")
    commit_manifest(backend, manifest)
    return Dataset(backend, manifest)


def load(
    path: PathLike,
    read_only: bool = False,
    version: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Dataset:
    """Open an existing dataset at its latest version (or ``version=N``, read-only).

    Raises:
        DatasetNotFoundError: no dataset there, or no such version.
        DatasetCorruptError: the version's manifest is damaged (the message names the file).
    """
    backend = open_backend(path, storage_options)
    if not _is_dataset(backend):
        detail = (
            "The path does not exist." if not backend.list("") else "The path holds no lakecompute dataset."
        )
        raise DatasetNotFoundError(backend.url, detail)
    if version is not None:
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidTypeError(f"Expected version as an int. Got {type(version).__name__}: {version!r}.")
        return Dataset(backend, read_manifest(backend, version), read_only=True, pinned=True)
    latest = latest_version(backend)
    if latest is None:
        raise DatasetNotFoundError(backend.url, "It has no committed version.")
    return Dataset(backend, read_manifest(backend, latest), read_only=read_only)


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
    out = empty(path, overwrite=overwrite, storage_options=storage_options)
    with out:
        for name, tensor in src.tensors.items():
            out.create_tensor_like(name, tensor)
        out.commit(f"create tensors like {src.path}")
    return out


def delete(path: PathLike, missing_ok: bool = False, storage_options: dict[str, Any] | None = None) -> None:
    """Delete the dataset at ``path`` and all its versions.

    Raises:
        DatasetNotFoundError: nothing is there and ``missing_ok`` is False.
    """
    backend = open_backend(path, storage_options)
    if not _is_dataset(backend):
        if missing_ok:
            return
        raise DatasetNotFoundError(backend.url)
    backend.delete_tree("")
