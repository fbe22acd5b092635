"""Creating, opening and deleting datasets."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Literal

from lakecompute.datasets import Dataset, DatasetView, base_dataset
from lakecompute.errors import (
    DatasetCorruptError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
)
from lakecompute.storage import (
    Backend,
    Manifest,
    commit_manifest,
    latest_version,
    let_go_released,
    list_versions,
    new_dataset_id,
    open_backend,
    read_manifest,
)

__all__ = ["dataset", "delete", "empty", "exists", "like", "load"]

PathLike = str | os.PathLike[str]
# The root group's attribute that makes a folder a dataset, and the one that marks a dataset being
# created or removed: a folder with the second is no dataset, and lc.empty / lc.delete clear it.
_MARK = "lakecompute"
_INCOMPLETE = "lakecompute-incomplete"
_INTERRUPTED = (
    "A delete or overwrite of the dataset there was interrupted; lc.delete(path) removes what is left "
    "and lc.empty(path) starts a new one."
)

_State = Literal["dataset", "damaged", "incomplete", "other", "empty"]


def _root_json(attributes: dict[str, Any]) -> bytes:
    """The root group's zarr.json (plain zarr opens the dataset as a group with these attributes)."""
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes}).encode()


def _state(backend: Backend) -> _State:
    """What is at the location: a dataset (whole, or with a damaged marker), one half created or
    removed, something else, or nothing."""
    raw = backend.read("zarr.json")
    if raw is None:
        return "other" if backend.list("") else "empty"
    try:
        attributes = json.loads(raw).get("attributes") or {}
    except (ValueError, AttributeError, RecursionError):
        attributes = None
    if not isinstance(attributes, dict):
        # An unreadable marker next to committed versions: a damaged dataset, not someone else's folder.
        return "damaged" if list_versions(backend) else "other"
    if _MARK in attributes:
        return "dataset"
    return "incomplete" if _INCOMPLETE in attributes else "other"


def _is_dataset(backend: Backend) -> bool:
    return _state(backend) == "dataset"


def _damaged_marker(backend: Backend, hint: str) -> DatasetCorruptError:
    return DatasetCorruptError(
        backend.url,
        "zarr.json",
        "the dataset's root metadata does not parse; its versions are still there",
        hint,
    )


def _clear(backend: Backend) -> None:
    """Remove everything at the location, so that a crash at any instant leaves either the dataset
    whole or no dataset (never one that opens and then fails to read).

    The marker goes first, in one atomic write: from then on nobody opens the folder as a dataset,
    whatever a crash leaves behind, and lc.empty / lc.delete finish the job. The versions go next,
    then the data they referenced. The marker itself stays; the caller replaces or removes it.
    """
    # This process's writers that committed here stop renewing their lease files now: a renewal after the
    # delete would bring a leases/ folder back, and the next lc.empty(path) would find the folder taken.
    let_go_released(backend.url)
    backend.write("zarr.json", _root_json({_INCOMPLETE: {"since": time.time()}}))
    backend.delete_tree("versions")
    for name in backend.list(""):
        if name != "zarr.json":
            backend.delete_tree(name)


def _create(backend: Backend) -> Manifest:
    """Make an empty dataset: version 0 first, the marker that makes it a dataset last."""
    backend.write("zarr.json", _root_json({_INCOMPLETE: {"since": time.time()}}))
    manifest = Manifest(version=0, message="create", dataset_id=new_dataset_id())
    manifest = commit_manifest(backend, manifest) or manifest
    backend.write("zarr.json", _root_json({_MARK: {"format": 1}}))
    return manifest


def exists(path: PathLike, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether a lakecompute dataset is at ``path``."""
    return _is_dataset(open_backend(path, storage_options))


def empty(path: PathLike, overwrite: bool = False, storage_options: dict[str, Any] | None = None) -> Dataset:
    """Create a new, empty dataset.

    Overwriting is crash-safe: a kill at any instant leaves the old dataset whole, no dataset, or the
    new empty one.

    Raises:
        DatasetExistsError: a dataset is there and ``overwrite`` is False.
        InvalidArgumentError: something else is there and ``overwrite`` is False.
    """
    backend = open_backend(path, storage_options)
    state = _state(backend)
    if state == "dataset" and not overwrite:
        raise DatasetExistsError(backend.url)
    if state == "damaged" and not overwrite:
        raise _damaged_marker(backend, "Pass overwrite=True to replace the dataset, or restore the file.")
    if state == "other" and not overwrite:
        raise InvalidArgumentError(
            f"{backend.url!r} is not empty and holds no lakecompute dataset. "
            "Choose an empty or new folder, or pass overwrite=True to delete what is there."
        )
    if state != "empty":
        # A half-removed or half-created dataset ("incomplete") is cleared even without overwrite:
        # whoever started removing it meant it to go.
        _clear(backend)
    return Dataset(backend, _create(backend))


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
    state = _state(backend)
    if state == "damaged":
        raise _damaged_marker(
            backend, "Restore the file from a backup (or copy zarr.json from another dataset)."
        )
    if state != "dataset":
        detail = {
            "empty": "The path does not exist.",
            "other": "The path holds no lakecompute dataset.",
            "incomplete": _INTERRUPTED,
        }[state]
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

    Crash-safe: a kill at any instant leaves the dataset whole or no dataset; the leftovers of an
    interrupted delete are removed by the next ``lc.delete(path)`` or ``lc.empty(path)``.

    Raises:
        DatasetNotFoundError: nothing is there and ``missing_ok`` is False.
    """
    backend = open_backend(path, storage_options)
    state = _state(backend)
    # "incomplete": finish what an interrupted delete or overwrite started.
    if state not in ("dataset", "damaged", "incomplete"):
        if missing_ok:
            return
        raise DatasetNotFoundError(backend.url)
    _clear(backend)
    backend.delete_tree("")
