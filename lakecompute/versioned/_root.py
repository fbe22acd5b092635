"""A dataset's root: creating, recognising and removing a whole dataset, crash-safe.

The root group's ``zarr.json`` says what a location holds: its `MARKER` attribute makes the folder a
dataset (written last when one is created), its `INCOMPLETE` attribute marks one being created or
removed (written first), so that a kill at any instant leaves the old dataset whole, no dataset, or the
new one. Only a lakecompute dataset is ever replaced or removed; a location that holds other files is
refused, whatever the caller asked.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Literal

from lakecompute.errors import (
    DatasetCorruptError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
)
from lakecompute.storage import TEMP_PREFIX, Backend
from lakecompute.versioned._keys import INCOMPLETE, MARKER, ROOT, VERSIONS
from lakecompute.versioned._leases import let_go_released
from lakecompute.versioned._manifest import Manifest, new_dataset_id
from lakecompute.versioned._refs import BranchRef, ensure_main
from lakecompute.versioned._versions import commit_manifest, list_versions

__all__ = ["check_is_dataset", "create_dataset", "delete_dataset", "is_dataset", "marker_id"]

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
    raw = backend.read(ROOT)
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
    if MARKER in attributes:
        return "dataset"
    return "incomplete" if INCOMPLETE in attributes else "other"


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
        ROOT,
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
    backend.write(ROOT, _root_json({INCOMPLETE: {"since": time.time()}}))
    backend.delete_tree(VERSIONS)
    for name in backend.list(""):
        if name != ROOT:
            backend.delete_tree(name)


def _create(backend: Backend) -> tuple[Manifest, BranchRef]:
    """Make an empty dataset: version 0 and the ``main`` branch first, the marker that makes it a
    dataset last."""
    backend.write(ROOT, _root_json({INCOMPLETE: {"since": time.time()}}))
    manifest = Manifest(version=0, message="create", dataset_id=new_dataset_id())
    manifest = commit_manifest(backend, manifest) or manifest
    main = ensure_main(backend, manifest.version)
    backend.write(ROOT, _root_json({MARKER: {"format": 1, "dataset_id": manifest.dataset_id}}))
    return manifest, main


def create_dataset(backend: Backend, overwrite: bool) -> tuple[Manifest, BranchRef]:
    """Create a new, empty dataset (see ``lc.empty``): its version 0 and its ``main`` branch.

    Raises:
        DatasetExistsError: a dataset is there and ``overwrite`` is False.
        InvalidArgumentError: something other than a lakecompute dataset is there (the message names
            what was found).
    """
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


def check_is_dataset(backend: Backend) -> None:
    """Refuse a location that holds no whole dataset (before opening it).

    Raises:
        DatasetNotFoundError: nothing there, something else, or a dataset half created or removed.
        DatasetCorruptError: the dataset's root metadata does not parse.
    """
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


def marker_id(backend: Backend) -> str | None:
    """The dataset id a dataset's marker names, or None (nothing there, not a dataset, an old marker)."""
    raw = backend.read(ROOT) if _state(backend) == "dataset" else None
    try:
        mark = json.loads(raw or b"{}").get("attributes", {}).get(MARKER, {})
    except (ValueError, AttributeError, RecursionError):
        return None
    found = mark.get("dataset_id") if isinstance(mark, dict) else None
    return found if isinstance(found, str) else None


def delete_dataset(backend: Backend, missing_ok: bool) -> None:
    """Delete the dataset at the location and all its versions (see ``lc.delete``), crash-safe.

    Raises:
        DatasetNotFoundError: nothing is there and ``missing_ok`` is False, or something other than a
            lakecompute dataset is there (the message names what was found).
    """
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
