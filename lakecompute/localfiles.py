"""Local files outside a dataset: names from untrusted files confined to a folder, and atomic writes.

Two rules every reader and writer of plain files (ingests, exports) follows:

* **A name read from a file is untrusted.** A COCO ``file_name``, a YOLO image path or a ``data.yaml``
  entry is resolved with `confine`: relative to the folder the caller named, symbolic links followed, and
  refused unless the result stays inside that folder.
* **A file written outside a dataset is whole or absent.** `write_atomic` writes a temporary file beside
  the target, flushes it to disk and renames it into place, so a kill or a full disk leaves the previous
  file (or none), never half of one.
* **An export of many files keeps the previous one until it is done.** `FolderExport` writes every file
  to a hidden staging folder inside the target, then moves them into place and writes the index file
  (``annotations.json``, ``data.yaml``) last: an export that fails or is killed while it writes leaves
  the previous export as it was. Every name is confined to the target, and two files at one name (or at
  names differing only in letter case) are refused.
* **A re-export holds exactly its own files.** The folder's listing (`LISTING`) records what each export
  wrote; the next one removes those files it does not write again, and never a file it did not write.

This module depends only on `lakecompute.errors`, so that every layer may use it.

Example:
    >>> import tempfile
    >>> from lakecompute.localfiles import confine
    >>> root = tempfile.mkdtemp()
    >>> confine(root, "a/b.png", what="file_name of image 3").endswith("b.png")
    True
    >>> confine(root, "../x.png", what="file_name of image 3")
    Traceback (most recent call last):
    ...
    lakecompute.errors.InvalidArgumentError: file_name of image 3 is '../x.png', which resolves outside ...
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import unicodedata
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from lakecompute.errors import InvalidArgumentError, StorageError

__all__ = ["LISTING", "Folder", "FolderExport", "Watch", "confine", "inside", "write_atomic"]


def inside(root: str, path: str) -> bool:
    """Whether ``path`` (both resolved, symbolic links followed) is ``root`` or lies inside it."""
    r = os.path.realpath(root)
    p = os.path.realpath(path)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def confine(root: str, name: object, *, what: str) -> str:
    """The path that ``name`` (read from an untrusted file) names inside ``root``, symbolic links followed.

    For many names under one folder, `Folder` resolves the folder once.

    Args:
        root: the folder the caller named.
        name: the untrusted relative path.
        what: which entry ``name`` comes from, for the message (``"file_name of image 7 in a.json"``).

    Returns:
        The resolved path, inside ``root``.

    Raises:
        InvalidArgumentError: ``name`` is not a non-empty string, is absolute, holds a NUL byte, or resolves
            (through ``..`` or a symbolic link) outside ``root``.
    """
    return Folder.of(root).confine(name, what=what)


@dataclass(frozen=True, slots=True)
class Folder:
    """A folder that names read from untrusted files must stay inside, resolved once for all of them.

    Example:
        >>> import tempfile
        >>> folder = Folder.of(tempfile.mkdtemp())
        >>> folder.confine("b/c.png", what="file_name of image 3").endswith("c.png")
        True
    """

    given: str
    """The folder as the caller named it (for messages)."""
    real: str
    """The folder resolved, symbolic links followed."""

    @classmethod
    def of(cls, root: str) -> Folder:
        """The folder ``root``, resolved now."""
        return cls(root, os.path.realpath(root))

    def confine(self, name: object, *, what: str) -> str:
        """The resolved path that ``name`` names inside this folder (see `confine`)."""
        if not isinstance(name, str) or not name or "\x00" in name:
            raise InvalidArgumentError(
                f"{what} must be a non-empty relative path. Got {type(name).__name__}: {name!r:.200}. "
                "Fix the entry."
            )
        if os.path.isabs(name):
            raise InvalidArgumentError(
                f"{what} is the absolute path {name!r:.200}; paths in annotation files are read relative to "
                f"{self.given!r} and must stay inside it. Make the entry relative."
            )
        plain = self._plain(name)
        if plain is not None:
            return plain
        path = os.path.realpath(os.path.join(self.real, name))
        if not (path == self.real or path.startswith(self.real.rstrip(os.sep) + os.sep)):
            raise InvalidArgumentError(
                f"{what} is {name!r:.200}, which resolves outside the folder {self.given!r} (to "
                f"{path!r:.200}). Paths in annotation files must stay inside the folder given; fix the entry "
                "or move the file."
            )
        return path

    def _plain(self, name: str) -> str | None:
        """The path of a name without ``..`` none of whose components below the folder is a symbolic link
        (one ``lstat`` per component of the name, where ``realpath`` takes one per component of the whole
        path); None for any other name, which `confine` resolves in full."""
        parts = [p for p in name.split(os.sep) if p not in ("", ".")]
        if not parts or ".." in parts:
            return None
        path = self.real
        for part in parts:
            path = os.path.join(path, part)
            if os.path.islink(path):
                return None
        return path


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file in the same folder, flushed to
    disk, then renamed over ``path``.

    The temporary file is hidden and named after ``path`` and the writing process
    (``.<name>.<pid>.<random>.partial``); one that a killed process left is removed by the next write of
    the same path.

    Raises:
        StorageError: the file cannot be written (a full disk, a missing folder, no permission); ``path``
            keeps what it held before.
    """
    folder, name = os.path.split(os.path.abspath(path))
    prefix = f".{name[:100]}."
    tmp = None
    try:
        _remove_abandoned_partials(folder, prefix)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{prefix}{os.getpid()}.", suffix=".partial")
        _write_fd(fd, data)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def _remove_abandoned_partials(folder: str, prefix: str) -> None:
    """Remove the temporary files of `write_atomic` that start with ``prefix`` and whose process is gone."""
    for entry in os.listdir(folder):
        if entry.startswith(prefix) and entry.endswith(".partial"):
            pid = entry[len(prefix) :].split(".", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(folder, entry))


def _file_mode() -> int:
    """The mode ``open()`` gives a new file (0o666 less the umask); read once, at import."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


# mkstemp makes files only their owner may read (0o600); an exported file is made as open() makes one.
_FILE_MODE = _file_mode()


def _write_fd(fd: int, data: bytes) -> None:
    os.fchmod(fd, _FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _storage_error(path: str, exc: OSError) -> StorageError:
    return StorageError(
        f"Cannot write {path!r} ({exc.strerror or exc}); the file keeps what it held before. "
        "Check free space and permissions, then run again.",
        url=path,
        reason="other",
    )


# -- exports of many files -----------------------------------------------------------------------------

_STAGING = ".lakecompute-export-"

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


def _digest(data: bytes) -> str:
    """What identifies a file's content in the listing: its size and a hash of its bytes."""
    return f"{len(data)}:{hashlib.blake2b(data, digest_size=16).hexdigest()}"


def _file_digest(path: str, size: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{size}:{h.hexdigest()}"


def _fold(path: str) -> str:
    """``path`` as a case-insensitive filesystem (macOS, Windows) compares names: one letter case, one
    Unicode form."""
    return unicodedata.normalize("NFC", path).casefold()


@dataclass(frozen=True, slots=True)
class _Scope:
    """What one export (one split, one annotations file) wrote into a folder."""

    files: Mapping[str, tuple[str, ...]]
    """Each file (``/``-separated, relative to the folder) with the digests it may have: one, or two
    while a commit that rewrites it is under way."""
    about: Mapping[str, Any]
    """What the exporter recorded about it (YOLO: the class names, the keypoint shape)."""


@dataclass(frozen=True, slots=True)
class _Listing:
    """The listing file of an export folder (`LISTING`): per scope, the files its last export wrote."""

    scopes: Mapping[str, _Scope]
    found: bool
    """Whether the folder has a listing file (an export from before listings, or none, has not)."""

    @classmethod
    def read(cls, folder: Folder) -> _Listing:
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
            return cls(_parse_scopes(doc), True)
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

    def adding(self, scope: str, files: Mapping[str, str], about: Mapping[str, Any]) -> _Listing:
        """This listing with ``files`` added to ``scope``'s: what a commit under way may have put in place,
        beside what the previous export wrote."""
        old = self.scopes.get(scope)
        merged = dict(old.files) if old is not None else {}
        for rel, digest in files.items():
            merged[rel] = tuple(dict.fromkeys((*merged.get(rel, ()), digest)))
        return _Listing({**self.scopes, scope: _Scope(merged, dict(about))}, True)

    def replacing(
        self, scope: str, replaced: Callable[[str], bool], files: Mapping[str, str], about: Mapping[str, Any]
    ) -> _Listing:
        """The listing once the commit is done: the scopes it replaced dropped, ``scope`` its files."""
        kept = {name: s for name, s in self.scopes.items() if not replaced(name)}
        kept[scope] = _Scope({rel: (d,) for rel, d in files.items()}, dict(about))
        return _Listing(kept, True)

    def to_bytes(self) -> bytes:
        scopes = {
            name: {"about": dict(s.about), "files": {rel: list(d) for rel, d in sorted(s.files.items())}}
            for name, s in sorted(self.scopes.items())
        }
        return json.dumps({"format": _FORMAT, "version": 1, "scopes": scopes}).encode()


def _parse_scopes(doc: object) -> dict[str, _Scope]:
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
            if not _relative(rel) or not isinstance(digests, list) or not digests:
                raise ValueError(f"scope {name!r}: {rel!r:.100} is not a relative path with its digests")
            if not all(isinstance(d, str) and _DIGEST.fullmatch(d) for d in digests):
                raise ValueError(f"scope {name!r}: the digests of {rel!r:.100} are not digests")
        out[name] = _Scope({rel: tuple(d) for rel, d in files.items()}, about)
    return out


def _relative(rel: object) -> bool:
    """Whether ``rel`` is a ``/``-separated relative path with no ``..``, ``.`` or empty part."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or os.path.isabs(rel) or "\\" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


class FolderExport:
    """The files of one export into a folder, written whole and put in place together, the index last;
    a re-export leaves the folder holding exactly its own files.

    Each `write` checks its name (confined to the folder, symbolic links followed; no second file at the
    same place, nor at a name differing only in letter case, which a case-insensitive filesystem makes
    one file) and writes the bytes, flushed to disk, into a hidden staging folder inside the target.
    `commit` puts them in place and writes the index file (``annotations.json``, ``data.yaml``).

    **What an export wrote is recorded** in the hidden listing file `LISTING` of the folder, per
    ``scope`` (a split, an annotations file), each file with a digest of its bytes. An export removes the
    files that the previous export of the scopes it ``replaces`` wrote and it does not write again —
    only those, and only when unchanged since (same digest): a file someone else put there, or changed,
    is never removed. Nor is one that was there before an export first wrote to its name: the export
    overwrites it, but does not record it as its own. A `Watch` names files a reader takes as part of
    the export without being told (ultralytics reads every image of a split's folder); such a file that
    the export neither writes nor removes is refused, naming it, before anything changes.

    **A kill at any point** leaves the previous export whole, or the new one whole, or, in between, no
    index file at all (never an index beside files it does not describe):

    1. until `commit`, only the staging folder changes (an export that fails removes it; a killed one's
       is removed by the next export into the folder);
    2. the listing records the new files beside the old (so either set is known to be ours);
    3. the old index file is removed, the new files are moved in place (renames: no copying) and the
       previous export's files that this one does not write are removed;
    4. the new index file is written (whole: `write_atomic`), then the listing of the new files alone.

    A kill in step 3 leaves the folder without an index file, which every reader refuses; the next
    export into the folder removes what is left of both. One export into a folder at a time.

    Use it as a context manager: leaving the block by an exception drops what was staged.

    Args:
        root: the target folder (created when missing).
        scope: the name this export's files are recorded under.
        replaces: the scopes whose files this export replaces: a collection of names, or ``"all"``
            (default: ``scope`` alone).
        watch: files in the folder a reader takes as part of the export (see above).
        about: what to record with the files (JSON values), read back by later exports (`earlier`).

    Raises:
        StorageError: the folder or a file cannot be written, naming the path.
        InvalidArgumentError: the folder's listing file is damaged (see `LISTING`).

    Example:
        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> with FolderExport(root) as out:
        ...     _ = out.write("images/a.txt", b"a", what="file_name of sample 0")
        ...     out.commit(os.path.join(root, "index.json"), b"{}")
        >>> sorted(os.listdir(root))
        ['.lakecompute-export.json', 'images', 'index.json']
        >>> with FolderExport(root) as out:
        ...     _ = out.write("images/b.txt", b"b", what="file_name of sample 0")
        ...     out.commit(os.path.join(root, "index.json"), b"{}")
        >>> os.listdir(os.path.join(root, "images"))
        ['b.txt']
    """

    def __init__(
        self,
        root: str,
        *,
        scope: str = "",
        replaces: Collection[str] | Literal["all"] | None = None,
        watch: Watch | None = None,
        about: Mapping[str, Any] | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        self.scope = scope
        self._replaces = replaces if replaces is not None else (scope,)
        self._watch = watch
        self._about = dict(about or {})
        try:
            os.makedirs(self.root, exist_ok=True)
            _remove_abandoned(self.root)
            self._folder = Folder.of(self.root)
            self._listing = _Listing.read(self._folder)
            self._staging = tempfile.mkdtemp(dir=self.root, prefix=f"{_STAGING}{os.getpid()}-")
        except OSError as exc:
            raise _storage_error(self.root, exc) from exc
        self._staged: list[tuple[str, str, str]] = []  # (staged file, target, digest)
        self._claimed: dict[str, str] = {}  # target -> the entry that named it
        self._folded: dict[str, str] = {}  # target as a case-insensitive filesystem sees it -> target

    def __enter__(self) -> FolderExport:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def listed(self) -> bool:
        """Whether the folder has a listing of earlier exports (a folder exported into before listings
        were written has not)."""
        return self._listing.found

    @property
    def earlier(self) -> dict[str, dict[str, Any]]:
        """The scopes earlier exports left in the folder that this one keeps (those with files), each
        with what was recorded about it."""
        return {
            name: dict(s.about)
            for name, s in self._listing.scopes.items()
            if s.files and not self._replaced(name)
        }

    def _replaced(self, scope: str) -> bool:
        return self._replaces == "all" or scope in self._replaces

    def target(self, name: str, *, what: str, under: str = "") -> str:
        """The path ``name`` (untrusted, relative to the sub-folder ``under`` of the folder) names, claimed
        for this export.

        Raises:
            InvalidArgumentError: ``name`` leaves ``under`` or the folder (see `confine`), or an earlier
                entry of this export already names the same file, or one whose name differs only in
                letter case or Unicode form (both entries named).
        """
        path = confine(confine(self.root, under or ".", what="a sub-folder"), name, what=what)
        earlier = self._claimed.get(path)
        if earlier is not None:
            raise InvalidArgumentError(
                f"{what} names the file {path!r:.200}, which {earlier} already names. Expected one file per "
                "entry: give the samples distinct file names."
            )
        twin = self._folded.get(_fold(path))
        if twin is not None:
            raise InvalidArgumentError(
                f"{what} names the file {path!r:.200}, and {self._claimed[twin]} names {twin!r:.200}: the "
                "names differ only in letter case (or Unicode form), which makes them one file on a "
                "case-insensitive filesystem (macOS, Windows). Expected one file per entry: give the "
                "samples names that differ in more than case."
            )
        self._claimed[path] = what
        self._folded[_fold(path)] = path
        return path

    def write(self, name: str, data: bytes, *, what: str, under: str = "") -> str:
        """Stage ``data`` as the file ``name`` (relative to ``under``, a sub-folder of the folder; see
        `target`); returns the file's final path."""
        path = self.target(name, what=what, under=under)
        try:
            fd, staged = tempfile.mkstemp(dir=self._staging)
            _write_fd(fd, data)
        except OSError as exc:
            raise _storage_error(path, exc) from exc
        self._staged.append((staged, path, _digest(data)))
        return path

    def commit(self, index: str, data: bytes) -> None:
        """Put every staged file in place, remove what the previous export wrote that this one does not,
        and write the index file at the path ``index`` (chosen by the caller, not read from a file: it may
        lie outside the folder, as a COCO annotations file does) last, whole; then record the files.

        Raises:
            InvalidArgumentError: the folder holds a file the `Watch` names that this export does not
                write and no earlier one wrote (nothing is changed).
            StorageError: a file cannot be written or removed (the path named).
        """
        stale = self._stale()
        written = self._claimed_files()
        self._save(self._listing.adding(self.scope, written, self._about))
        _remove(index)
        for staged, path, _ in self._staged:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.replace(staged, path)
            except OSError as exc:
                raise _storage_error(path, exc) from exc
        self._staged.clear()
        for path in stale:
            self._remove_stale(path, index)
        write_atomic(index, data)
        self._save(self._listing.replacing(self.scope, self._replaced, written, self._about))
        self.close()

    def close(self) -> None:
        """Drop what is staged and not committed (nothing after `commit`)."""
        shutil.rmtree(self._staging, ignore_errors=True)
        self._staged.clear()

    # -- what the previous export left ---------------------------------------------------------------

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self._folder.real).replace(os.sep, "/")

    def _claimed_files(self) -> dict[str, str]:
        """The files this export records as its own, with their digests: those at a name no file held, or
        one an export wrote. A file that was there before any export wrote to its name (your own images,
        a folder exported into before listings) is overwritten, as any copy does, but stays yours: no
        later export removes it."""
        listed = {_fold(rel) for scope in self._listing.scopes.values() for rel in scope.files}
        out = {}
        for _, path, digest in self._staged:
            rel = self._rel(path)
            if _fold(rel) in listed or not os.path.lexists(path):
                out[rel] = digest
        return out

    def _stale(self) -> list[str]:
        """The files the previous export of a replaced scope wrote, unchanged since, that this one does
        not write (to remove once this one's are in place); refuses the watched files that are neither."""
        writing = {self._rel(path) for _, path, _ in self._staged}
        stale: dict[str, str] = {}
        for name, scope in self._listing.scopes.items():
            if not self._replaced(name):
                continue
            for rel, digests in scope.files.items():
                if rel not in writing and rel not in stale and (path := self._ours(rel, digests)):
                    stale[rel] = path
        self._refuse_strangers(writing | set(stale))
        return list(stale.values())

    def _ours(self, rel: str, digests: tuple[str, ...]) -> str | None:
        """The path of ``rel`` when it is a regular file reached without symbolic links whose content is
        one of ``digests`` (what an export wrote there), else None: not ours to remove."""
        path = self._folder._plain(rel.replace("/", os.sep))
        try:
            st = os.lstat(path) if path is not None else None
            if path is None or st is None or not stat.S_ISREG(st.st_mode):
                return None
            if not any(d.startswith(f"{st.st_size}:") for d in digests):
                return None
            return path if _file_digest(path, st.st_size) in digests else None
        except OSError:
            return None

    def _refuse_strangers(self, known: set[str]) -> None:
        watch = self._watch
        if watch is None:
            return
        strangers = [rel for rel in self._watched(watch) if rel not in known]
        if not strangers:
            return
        shown = ", ".join(repr(s) for s in strangers[:5]) + (", ..." if len(strangers) > 5 else "")
        raise InvalidArgumentError(
            f"{self.root!r} holds {len(strangers)} file(s) that this export would not write or replace but "
            f"that {watch.reader}: {shown}. An export removes only the files an earlier export wrote (and "
            "that are unchanged since); move these away or delete them, or export into another folder."
        )

    def _watched(self, watch: Watch) -> list[str]:
        """The files under the watched folder a reader takes (hidden ones are not), and the links to
        folders there (a reader follows them), relative to the export's folder, sorted."""
        top = os.path.join(self._folder.real, *[p for p in watch.folder.split("/") if p])
        found: list[str] = []
        for here, dirs, names in os.walk(top):
            links = [d for d in dirs if not d.startswith(".") and os.path.islink(os.path.join(here, d))]
            found.extend(self._rel(os.path.join(here, d)) + "/" for d in links)
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in links]
            found.extend(
                self._rel(os.path.join(here, n))
                for n in names
                if not n.startswith(".") and os.path.splitext(n)[1].lower() in watch.suffixes
            )
        return sorted(found)

    def _remove_stale(self, path: str, index: str) -> None:
        """Remove one file the previous export wrote, and the folders it leaves empty."""
        twin = self._folded.get(_fold(path))
        if twin is not None and _same_file(path, twin):
            return  # a case-insensitive filesystem: the name now holds this export's file
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(
                f"Cannot remove {path!r} ({exc.strerror or exc}), which the previous export wrote and this "
                f"one does not; the export is not finished, and its index file {index!r} is not written. "
                "Check the permissions, then export again.",
                url=path,
                reason="other",
            ) from exc
        folder = os.path.dirname(path)
        while folder != self._folder.real and inside(self._folder.real, folder):
            try:
                os.rmdir(folder)
            except OSError:
                break  # not empty (or not ours to remove): the folders above are not empty either
            folder = os.path.dirname(folder)

    def _save(self, listing: _Listing) -> None:
        write_atomic(os.path.join(self._folder.real, LISTING), listing.to_bytes())


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _remove(path: str) -> None:
    """Remove the file ``path`` when it is there (StorageError when it cannot be removed)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _storage_error(path, exc) from exc


def _remove_abandoned(root: str) -> None:
    """Remove the staging folders of exports into ``root`` whose process is gone (killed mid-export)."""
    for entry in os.listdir(root):
        if not entry.startswith(_STAGING):
            continue
        pid = entry[len(_STAGING) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
