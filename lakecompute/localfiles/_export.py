"""Exports of many files into a folder: staged, put in place together with the index file last, and a
re-export holding exactly its own files (see `FolderExport`)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Collection, Mapping
from types import TracebackType
from typing import Any, Literal

from lakecompute.errors import InvalidArgumentError, StorageError
from lakecompute.localfiles._atomic import alive, storage_error, write_atomic, write_fd
from lakecompute.localfiles._confine import Folder, confine, inside
from lakecompute.localfiles._listing import LISTING, Listing, Watch, digest_of, digest_of_file, fold

__all__ = ["FolderExport"]

_STAGING = ".lakecompute-export-"


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
            self._listing = Listing.read(self._folder)
            self._staging = tempfile.mkdtemp(dir=self.root, prefix=f"{_STAGING}{os.getpid()}-")
        except OSError as exc:
            raise storage_error(self.root, exc) from exc
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
        twin = self._folded.get(fold(path))
        if twin is not None:
            raise InvalidArgumentError(
                f"{what} names the file {path!r:.200}, and {self._claimed[twin]} names {twin!r:.200}: the "
                "names differ only in letter case (or Unicode form), which makes them one file on a "
                "case-insensitive filesystem (macOS, Windows). Expected one file per entry: give the "
                "samples names that differ in more than case."
            )
        self._claimed[path] = what
        self._folded[fold(path)] = path
        return path

    def write(self, name: str, data: bytes, *, what: str, under: str = "") -> str:
        """Stage ``data`` as the file ``name`` (relative to ``under``, a sub-folder of the folder; see
        `target`); returns the file's final path."""
        path = self.target(name, what=what, under=under)
        try:
            fd, staged = tempfile.mkstemp(dir=self._staging)
            write_fd(fd, data)
        except OSError as exc:
            raise storage_error(path, exc) from exc
        self._staged.append((staged, path, digest_of(data)))
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
                raise storage_error(path, exc) from exc
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
        listed = {fold(rel) for scope in self._listing.scopes.values() for rel in scope.files}
        out = {}
        for _, path, digest in self._staged:
            rel = self._rel(path)
            if fold(rel) in listed or not os.path.lexists(path):
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
            return path if digest_of_file(path, st.st_size) in digests else None
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
        twin = self._folded.get(fold(path))
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

    def _save(self, listing: Listing) -> None:
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
        raise storage_error(path, exc) from exc


def _remove_abandoned(root: str) -> None:
    """Remove the staging folders of exports into ``root`` whose process is gone (killed mid-export)."""
    for entry in os.listdir(root):
        if not entry.startswith(_STAGING):
            continue
        pid = entry[len(_STAGING) :].split("-", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
