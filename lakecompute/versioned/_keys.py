"""The storage key layout of a dataset: every key lakecompute lays out, in one module.

::

    zarr.json                               the root group; its attributes mark a dataset (`MARKER`)
    versions/<V>.json                       version V's manifest (`version_key`; V in 10 digits)
    versions/LATEST                         a hint: the newest version (readers check it)
    refs/branches/<name>.json               a branch (`branch_key`)
    refs/tags/<name>.json                   a tag (`tag_key`)
    refs/lines/<line>/<P>.json              a move of a branch's line after version P (`move_key`)
    refs/lines/<line>/HEAD                  a hint: the line's newest head (`line_hint_key`)
    segments/<id>/{data,index}              a segment's two arrays (`segment_key`)
    tensors/<tensor>/<id>                   a typed array ``compact()`` wrote (`typed_array_key`)
    leases/<writer>.json                    a writer's lease (`lease_key`)

The names inside a zarr array (its chunk keys, ``c/<i>``) are zarr's: `lakecompute.storage.chunk_key`.
Nothing outside this package spells a key; the dataset layer asks the table for what it needs.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "INCOMPLETE",
    "LEASES",
    "LINES",
    "MARKER",
    "ROOT",
    "SEGMENTS",
    "TENSORS",
    "TYPED_PREFIX",
    "VERSIONS",
    "VERSIONS_HINT",
    "branch_key",
    "lease_key",
    "line_hint_key",
    "line_key",
    "move_key",
    "segment_key",
    "tag_key",
    "typed_array_key",
    "version_key",
]

#: The root group's metadata document: plain zarr opens a dataset as a group with these attributes.
ROOT: Final = "zarr.json"
#: The root group attribute that makes a folder a dataset: ``{"format": 1, "dataset_id": ...}``, written
#: last when a dataset is created (the id since datasets have ids).
MARKER: Final = "lakecompute"
#: The root group attribute that marks a dataset being created or removed: a folder with it is no
#: dataset, and ``lc.empty`` / ``lc.delete`` clear it.
INCOMPLETE: Final = "lakecompute-incomplete"

VERSIONS: Final = "versions"
"""The folder of the version manifests."""
#: The hint of the newest version: saves a listing; readers check forward from it.
VERSIONS_HINT: Final = f"{VERSIONS}/LATEST"

SEGMENTS: Final = "segments"
"""The folder of every segment."""
TENSORS: Final = "tensors"
"""The folder of the typed arrays ``compact()`` writes, one sub-folder per tensor."""
#: A fragment whose ``seg`` starts with this names a typed ``(n, *shape)`` zarr array (written by
#: ``compact()``, readable with plain zarr) instead of a segment, ``@tensors/<tensor>/<id>``; its ``off``
#: is then a row number.
TYPED_PREFIX: Final = "@"

#: The folder of lease files in a dataset.
LEASES: Final = "leases"
#: The folder of the branches' lines (their moves and head hints).
LINES: Final = "refs/lines"
_BRANCHES: Final = "refs/branches"
_TAGS: Final = "refs/tags"


def version_key(version: int) -> str:
    """The storage key of a version's manifest."""
    return f"{VERSIONS}/{version:010d}.json"


def branch_key(name: str | None = None) -> str:
    """The storage key of branch ``name``'s ref (the folder of every branch's with None)."""
    return _BRANCHES if name is None else f"{_BRANCHES}/{name}.json"


def tag_key(name: str | None = None) -> str:
    """The storage key of tag ``name`` (the folder of every tag with None)."""
    return _TAGS if name is None else f"{_TAGS}/{name}.json"


def line_key(line: str) -> str:
    """The folder of line ``line``'s moves and head hint."""
    return f"{LINES}/{line}"


def move_key(line: str, parent: int) -> str:
    """The storage key of the move of line ``line`` after version ``parent``."""
    return f"{line_key(line)}/{parent:010d}.json"


def line_hint_key(line: str) -> str:
    """The storage key of line ``line``'s head hint."""
    return f"{line_key(line)}/HEAD"


def segment_key(seg_id: str, part: str | None = None) -> str:
    """The storage key of segment ``seg_id``'s folder, or of its ``"data"`` or ``"index"`` array."""
    folder = f"{SEGMENTS}/{seg_id}"
    return folder if part is None else f"{folder}/{part}"


def typed_array_key(tensor: str, array_id: str | None = None) -> str:
    """The storage key of ``tensor``'s folder of typed arrays, or of its typed array ``array_id``."""
    folder = f"{TENSORS}/{tensor}"
    return folder if array_id is None else f"{folder}/{array_id}"


def lease_key(writer: str) -> str:
    """The storage key of writer ``writer``'s lease."""
    return f"{LEASES}/{writer}.json"
