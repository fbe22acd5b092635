"""The listing of an export folder: which files each export into the folder wrote, with their digests."""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lakecompute.errors import InvalidArgumentError, StorageError
from lakecompute.localfiles._confine import Folder

__all__ = ["LISTING", "Listing", "Scope", "Watch", "digest_of", "digest_of_file", "fold", "relative"]

LISTING = ".lakecompute-export.json"
"""The hidden file in an export's folder that says which files each export into the folder wrote."""

_FORMAT = "lakecompute-export"
_DIGEST = re.compile(r"[0-9]{1,20}:[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class Watch:
    """Files a reader of an export takes as part of it without being told of them (ultralytics reads every
    image under a split's folder): `FolderExport` refuses to commit into a folder holding such a file
    that it neither writes nor removes, rather than leave it there to be read, or delete it.

    Example:
        >>> Watch("images/train", frozenset({".png"}), "ultralytics reads every image under it").folder
        'images/train'
    """

    folder: str
    """The folder, relative to the export's folder, ``/``-separated (``images/train``; ``""``: all of it)."""
    suffixes: frozenset[str]
    """The file endings (lower case, with the dot) the reader takes."""
    reader: str
    """Who reads them, for the message (``"ultralytics reads every image under 'images/train'"``)."""


def digest_of(data: bytes) -> str:
    """What identifies a file's content in the listing: its size and a hash of its bytes."""
    return f"{len(data)}:{hashlib.blake2b(data, digest_size=16).hexdigest()}"


def digest_of_file(path: str, size: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{size}:{h.hexdigest()}"


def fold(path: str) -> str:
    """``path`` as a case-insensitive filesystem (macOS, Windows) compares names: one letter case, one
    Unicode form."""
    return unicodedata.normalize("NFC", path).casefold()


@dataclass(frozen=True, slots=True)
class Scope:
    """What one export (one split, one annotations file) wrote into a folder."""

    files: Mapping[str, tuple[str, ...]]
    """Each file (``/``-separated, relative to the folder) with the digests it may have: one, or two
    while a commit that rewrites it is under way."""
    about: Mapping[str, Any]
    """What the exporter recorded about it (YOLO: the class names, the keypoint shape)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """The listing file of an export folder (`LISTING`): per scope, the files its last export wrote."""

    scopes: Mapping[str, Scope]
    found: bool
    """Whether the folder has a listing file (an export from before listings, or none, has not)."""

    @classmethod
    def read(cls, folder: Folder) -> Listing:
        """The listing of ``folder`` (empty when it has none).

        Raises:
            InvalidArgumentError: the file is not a listing lakecompute wrote (edited, or damaged).
        """
        path = os.path.join(folder.real, LISTING)
        try:
            if os.path.islink(path):
                raise ValueError("it is a symbolic link")
            with open(path, "rb") as f:
                doc = json.loads(f.read())
            return cls(parse_scopes(doc), True)
        except FileNotFoundError:
            return cls({}, False)
        except OSError as exc:
            raise StorageError(
                f"Cannot read {path!r} ({exc.strerror or exc}). Check its permissions, then run again.",
                url=path,
                reason="other",
            ) from exc
        except (ValueError, RecursionError) as exc:
            raise InvalidArgumentError(
                f"{path!r} is not a listing lakecompute wrote ({exc!s:.200}); it says which files earlier "
                "exports into the folder wrote, so that a new export removes those it does not write again. "
                "Delete it (the files already there are then left in place, as someone else's) and run again."
            ) from exc

    def adding(self, scope: str, files: Mapping[str, str], about: Mapping[str, Any]) -> Listing:
        """This listing with ``files`` added to ``scope``'s: what a commit under way may have put in place,
        beside what the previous export wrote."""
        old = self.scopes.get(scope)
        merged = dict(old.files) if old is not None else {}
        for rel, digest in files.items():
            merged[rel] = tuple(dict.fromkeys((*merged.get(rel, ()), digest)))
        return Listing({**self.scopes, scope: Scope(merged, dict(about))}, True)

    def replacing(
        self, scope: str, replaced: Callable[[str], bool], files: Mapping[str, str], about: Mapping[str, Any]
    ) -> Listing:
        """The listing once the commit is done: the scopes it replaced dropped, ``scope`` its files."""
        kept = {name: s for name, s in self.scopes.items() if not replaced(name)}
        kept[scope] = Scope({rel: (d,) for rel, d in files.items()}, dict(about))
        return Listing(kept, True)

    def to_bytes(self) -> bytes:
        scopes = {
            name: {"about": dict(s.about), "files": {rel: list(d) for rel, d in sorted(s.files.items())}}
            for name, s in sorted(self.scopes.items())
        }
        return json.dumps({"format": _FORMAT, "version": 1, "scopes": scopes}).encode()


def parse_scopes(doc: object) -> dict[str, Scope]:
    """The scopes of a listing's JSON, every entry checked (ValueError naming the first that is wrong)."""
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or doc.get("version") != 1:
        raise ValueError(f"expected a JSON object with format {_FORMAT!r} and version 1")
    scopes = doc.get("scopes")
    if not isinstance(scopes, dict):
        raise ValueError("expected 'scopes' as an object")
    out = {}
    for name, entry in scopes.items():
        files = entry.get("files") if isinstance(entry, dict) else None
        about = entry.get("about") if isinstance(entry, dict) else None
        if not isinstance(files, dict) or not isinstance(about, dict):
            raise ValueError(f"scope {name!r}: expected an object with 'files' and 'about'")
        for rel, digests in files.items():
            if not relative(rel) or not isinstance(digests, list) or not digests:
                raise ValueError(f"scope {name!r}: {rel!r:.100} is not a relative path with its digests")
            if not all(isinstance(d, str) and _DIGEST.fullmatch(d) for d in digests):
                raise ValueError(f"scope {name!r}: the digests of {rel!r:.100} are not digests")
        out[name] = Scope({rel: tuple(d) for rel, d in files.items()}, about)
    return out


def relative(rel: object) -> bool:
    """Whether ``rel`` is a ``/``-separated relative path with no ``..``, ``.`` or empty part."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or os.path.isabs(rel) or "\\" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))
