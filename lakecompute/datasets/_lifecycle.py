"""A dataset's lifecycle: creating, opening and deleting datasets (``lc.empty``, ``lc.load``, ...).

Here, in the dataset layer, so that every layer above (ingest, vision, the copy of a view) creates and
opens datasets by importing these functions, not through the ``lakecompute`` facade; `lakecompute.api`
re-exports them as the public surface.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Literal

from lakecompute.datasets._core import core_of
from lakecompute.datasets._dataset import Dataset
from lakecompute.datasets._head import Checkout, checkout_of
from lakecompute.datasets._history import read_committed, resolve
from lakecompute.datasets._views import DatasetView, base_dataset
from lakecompute.errors import (
    DatasetCorruptError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
    RefNotFoundError,
)
from lakecompute.storage import (
    DEFAULT_BRANCH,
    MARKER,
    TEMP_PREFIX,
    VERSIONS,
    Backend,
    Manifest,
    commit_manifest,
    ensure_main,
    let_go_released,
    list_versions,
    new_dataset_id,
    open_backend,
    parse_ref_name,
    read_manifest,
)

__all__ = ["check_apart", "dataset", "delete", "empty", "exists", "is_dataset", "like", "load"]

PathLike = str | os.PathLike[str]
# The root group's attribute that makes a folder a dataset, and the one that marks a dataset being
# created or removed: a folder with the second is no dataset, and lc.empty / lc.delete clear it.
_MARK = MARKER
_INCOMPLETE = "lakecompute-incomplete"
_INTERRUPTED = (
    "A delete or overwrite of the dataset there was interrupted; lc.delete(path) removes what is left "
    "and lc.empty(path) starts a new one."
)

_CHECK_PATH = "Check the path: a dataset is the folder that holds its zarr.json and versions/."

_State = Literal["dataset", "damaged", "incomplete", "other", "empty"]
# What lc.empty / lc.delete say of a location that holds something else: lakecompute never removes it.
_NOT_OURS = (
    "lakecompute replaces or removes only a lakecompute dataset (overwrite=True included), never other "
    "files. Delete them yourself if you mean to, or choose an empty or new folder."
)


def _root_json(attributes: dict[str, Any]) -> bytes:
    """The root group's zarr.json (plain zarr opens the dataset as a group with these attributes)."""
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes}).encode()


def _state(backend: Backend) -> _State:
    """What is at the location: a dataset (whole, or with a damaged marker), one half created or
    removed, something else, or nothing."""
    raw = backend.read("zarr.json")
    if raw is None:
        names = backend.list("")
        if names and all(n.startswith(TEMP_PREFIX) for n in names):
            # Only the temp file of a first zarr.json write that a kill cut short: a create interrupted.
            return "incomplete"
        return "other" if names or _is_file(backend) else "empty"
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


def _is_file(backend: Backend) -> bool:
    """Whether a local location is a file (or anything else that is not a folder)."""
    local = backend.local_path("")
    return local is not None and os.path.lexists(local) and not os.path.isdir(local)


def _found(backend: Backend) -> str:
    """What is at a location that holds no dataset, for messages: its first few names."""
    if _is_file(backend):
        return "a file, not a folder"
    names = backend.list("")
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def is_dataset(backend: Backend) -> bool:
    """Whether a whole lakecompute dataset is at the location (its marker written, not half removed)."""
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
    backend.delete_tree(VERSIONS)
    for name in backend.list(""):
        if name != "zarr.json":
            backend.delete_tree(name)


def _create(backend: Backend) -> Dataset:
    """Make an empty dataset: version 0 and the ``main`` branch first, the marker that makes it a
    dataset last."""
    backend.write("zarr.json", _root_json({_INCOMPLETE: {"since": time.time()}}))
    manifest = Manifest(version=0, message="create", dataset_id=new_dataset_id())
    manifest = commit_manifest(backend, manifest) or manifest
    main = ensure_main(backend, manifest.version)
    backend.write("zarr.json", _root_json({_MARK: {"format": 1, "dataset_id": manifest.dataset_id}}))
    return Dataset(backend, manifest, checkout=Checkout(DEFAULT_BRANCH, main))


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
    state = _state(backend)
    if state == "dataset" and not overwrite:
        raise DatasetExistsError(backend.url)
    if state == "damaged" and not overwrite:
        raise _damaged_marker(backend, "Pass overwrite=True to replace the dataset, or restore the file.")
    if state == "other":
        raise InvalidArgumentError(
            f"Cannot create a dataset at {backend.url!r}: it holds something other than a lakecompute "
            f"dataset ({_found(backend)}). {_NOT_OURS}"
        )
    if state != "empty":
        # A half-removed or half-created dataset ("incomplete") is cleared even without overwrite:
        # whoever started removing it meant it to go.
        _clear(backend)
    return _create(backend)


def load(
    path: PathLike,
    read_only: bool = False,
    version: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
    branch: str | None = None,
) -> Dataset:
    """Open an existing dataset at the newest version of its ``main`` branch (or of ``branch``), or, read-
    only, at ``version``: a version number or a tag (or a branch name: its newest version).

    Raises:
        DatasetNotFoundError: no dataset there, or no such version.
        RefNotFoundError: no such branch or tag.
        DatasetCorruptError: the version's manifest is damaged (the message names the file).
    """
    backend = open_backend(path, storage_options)
    _check_is_dataset(backend)
    if version is not None:
        if branch is not None:
            raise InvalidArgumentError(
                f"Pass either version= (read-only, {version!r}) or branch= ({branch!r}) to lc.load, not both."
            )
        if isinstance(version, bool) or not isinstance(version, (int, str)):
            raise InvalidTypeError(
                f"Expected version as an int or a tag name. Got {type(version).__name__}: {version!r}."
            )
        manifest = read_committed(backend, resolve(backend, version))
        # Pinned: read-only at that version; checkout(name, create=True) starts a branch there (unless
        # the handle was asked to be read-only).
        return Dataset(backend, manifest, read_only=read_only, pinned=True)
    name = parse_ref_name("branch", DEFAULT_BRANCH if branch is None else branch)
    try:
        checkout, head = checkout_of(backend, name)
    except RefNotFoundError:
        if name == DEFAULT_BRANCH:  # a dataset with no main is one with no version at all
            raise DatasetNotFoundError(backend.url, "It has no committed version.") from None
        raise
    return Dataset(backend, read_manifest(backend, head), read_only=read_only, checkout=checkout)


def _check_is_dataset(backend: Backend) -> None:
    state = _state(backend)
    if state == "damaged":
        raise _damaged_marker(
            backend, "Restore the file from a backup (or copy zarr.json from another dataset)."
        )
    if state != "dataset":
        if state == "other":
            raise DatasetNotFoundError(
                backend.url,
                f"It holds something other than a lakecompute dataset ({_found(backend)}).",
                hint=_CHECK_PATH,
            )
        detail = "The path does not exist." if state == "empty" else _INTERRUPTED
        raise DatasetNotFoundError(backend.url, detail)


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
    held = _marker_id(dest)
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


def _marker_id(backend: Backend) -> str | None:
    """The dataset id a dataset's marker names, or None (nothing there, not a dataset, an old marker)."""
    raw = backend.read("zarr.json") if _state(backend) == "dataset" else None
    try:
        mark = json.loads(raw or b"{}").get("attributes", {}).get(_MARK, {})
    except (ValueError, AttributeError, RecursionError):
        return None
    found = mark.get("dataset_id") if isinstance(mark, dict) else None
    return found if isinstance(found, str) else None


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
    backend = open_backend(path, storage_options)
    state = _state(backend)
    if state == "other":
        raise DatasetNotFoundError(
            backend.url,
            f"It holds something other than a lakecompute dataset ({_found(backend)}), left as it is.",
            hint=_NOT_OURS,
        )
    # "incomplete": finish what an interrupted delete or overwrite started.
    if state == "empty":
        if missing_ok:
            return
        raise DatasetNotFoundError(backend.url)
    _clear(backend)
    backend.delete_tree("")
