"""Branches, tags, restore, diff and merge on a dataset handle (``ds.checkout``, ``ds.tag``, ...).

These are the handle's verbs: they check what the user asked against the handle (its branch, its
pending changes, whether it may write) and hand over to the dataset's table
(`lakecompute.versioned.Table`). Each operation that changes the dataset is one atomic step on its
metadata: creating or removing one ref, or one commit through the handle's write transaction. None
copies or reads a sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from lakecompute.datasets._core import DatasetCore, core_of
from lakecompute.datasets._head import Checkout, checkout_of
from lakecompute.errors import InvalidArgumentError, InvalidTypeError, ReadOnlyError
from lakecompute.versioned import DEFAULT_BRANCH, Manifest, VersionDiff, is_version_number, parse_ref_name

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset

__all__ = ["checkout", "delete_branch", "delete_tag", "diff", "merge", "restore", "tag"]


def _no_pending(core: DatasetCore, what: str) -> None:
    if core.txn.pending:
        raise InvalidArgumentError(
            f"Dataset {core.path!r} has uncommitted changes; commit them (leave the `with` block or call "
            f"ds.commit()) or roll them back (ds.rollback()) before {what}."
        )


def _refs_writable(core: DatasetCore) -> None:
    if core.opened_read_only:
        raise ReadOnlyError(
            f"Dataset {core.path!r} was opened read-only. Open it with lc.load(path) to change its branches."
        )


def checkout(ds: Dataset, name: object, create: bool) -> None:
    """Put ``ds`` on branch ``name`` (at its head), or with ``create`` on a new branch starting at the
    version ``ds`` reads.

    Raises:
        RefNotFoundError: no such branch (and not ``create``).
        RefExistsError: ``create`` and a branch or tag has that name.
        InvalidArgumentError: an invalid name, or uncommitted changes.
        ReadOnlyError: ``create`` on a handle opened read-only.
    """
    core = core_of(ds)
    name = parse_ref_name("branch", name) if create else _branch_name(name, core.path)
    _no_pending(core, "switching branches")
    table = core.table
    if not create:
        where, head = checkout_of(table, name)
        core.move(where, table.committed(head))
        return
    _refs_writable(core)
    ref = table.create_branch(name, core.version, core.branch)
    core.move(Checkout(name, ref), core.txn.base)


def _branch_name(name: object, path: str) -> str:
    """The branch ``checkout`` is asked to switch to; a version number (Deep Lake's ``ds.checkout(2)``) is
    refused with the way to open that version.

    Raises:
        InvalidTypeError: a number, or another non-str.
        InvalidArgumentError: an invalid name (digits only included).
    """
    number = name if isinstance(name, int) and not isinstance(name, bool) else None
    if isinstance(name, str) and is_version_number(name):
        number = int(name)
    if number is not None:
        error = InvalidTypeError if isinstance(name, int) else InvalidArgumentError
        raise error(
            f"ds.checkout() takes a branch name. Got version {name!r}: to read version {number}, open it "
            f"with lc.load(path, version={number}) (read-only; ds.checkout(name, create=True) on it starts "
            f"a branch there). Path: {path!r}."
        )
    return parse_ref_name("branch", name)


def delete_branch(ds: Dataset, name: object) -> None:
    """Remove branch ``name`` (one atomic step); its versions stay while a branch or tag reaches them.

    Raises:
        RefNotFoundError: no such branch.
        InvalidArgumentError: ``main``, or the branch ``ds`` is on.
        ReadOnlyError: a handle opened read-only.
    """
    core = core_of(ds)
    name = parse_ref_name("branch", name)
    _refs_writable(core)
    if name == DEFAULT_BRANCH:
        raise InvalidArgumentError(
            f"The {DEFAULT_BRANCH!r} branch of {core.path!r} cannot be deleted: every dataset keeps it."
        )
    if name == core.branch:
        raise InvalidArgumentError(
            f"Cannot delete branch {name!r} of {core.path!r}: this handle is on it. "
            f"Switch first, e.g. ds.checkout({DEFAULT_BRANCH!r})."
        )
    core.table.delete_branch(name)


def tag(ds: Dataset, name: object, version: object) -> int:
    """Name a committed version (the one ``ds`` reads by default); returns its number.

    Raises:
        RefExistsError: a tag or branch has that name.
        InvalidArgumentError: an invalid name, or uncommitted changes when tagging the handle's version.
        DatasetNotFoundError: no such version.
    """
    core = core_of(ds)
    name = parse_ref_name("tag", name)
    _refs_writable(core)
    if version is None:
        _no_pending(core, "tagging its version")
        number = core.version
    else:
        number = core.table.resolve(version)
    core.table.create_tag(name, number)
    return number


def delete_tag(ds: Dataset, name: object) -> None:
    """Remove tag ``name`` (its version stays while a branch or tag reaches it).

    Raises:
        RefNotFoundError: no such tag.
    """
    core = core_of(ds)
    name = parse_ref_name("tag", name)
    _refs_writable(core)
    core.table.delete_tag(name)


def restore(ds: Dataset, version: object) -> int:
    """Commit, on the branch ``ds`` is on, a new version whose content equals ``version`` (undo); returns
    the new version. Only metadata is written: the restored version's stored data is shared.

    Raises:
        ReadOnlyError: ``ds`` cannot write.
        InvalidArgumentError: uncommitted changes.
        DatasetNotFoundError: no such version.
    """
    core = core_of(ds)
    core.check_writable()
    _no_pending(core, "a restore")
    number = core.table.resolve(version)
    old = core.table.committed(number)
    core.txn.commit_content(old, f"restore version {number}", {"op": "restore", "version": number})
    return core.version


def diff(ds: Dataset, a: object, b: object) -> VersionDiff:
    """What changed from ``a`` to ``b`` (versions, branches or tags). ``b`` None: the version ``ds``
    reads; ``a`` None too: the parent of that version (what its commit changed).

    Raises:
        RefNotFoundError: a name that is no branch or tag.
        DatasetNotFoundError: no such version.
    """
    table = core_of(ds).table
    new = core_of(ds).txn.base if b is None else table.committed(table.resolve(b, "b"))
    if a is None:
        parent = new.parent
        old = table.manifest(parent) if parent is not None else Manifest(version=new.version)
    else:
        old = table.committed(table.resolve(a, "a"))
    return table.diff(old, new)


def merge(ds: Dataset, source: object, conflict_resolution: object = None) -> int:
    """Merge ``source`` into the branch ``ds`` is on (see `lakecompute.versioned._merge`); returns the version
    the branch is at afterwards: a fast-forward when the branch has not moved since ``source`` started
    from it, nothing when it holds ``source`` already, else a version with two parents.

    Raises:
        ReadOnlyError: ``ds`` cannot write (read-only, or pinned to a version).
        InvalidArgumentError: uncommitted changes, a bad ``conflict_resolution``, or no common ancestor.
        RefNotFoundError: ``source`` names no branch or tag.
        MergeConflictError: both sides changed the same rows or tensors (nothing is committed).
        CommitConflictError: another writer moved the branch meanwhile (nothing is committed).
    """
    core = core_of(ds)
    core.check_writable()
    resolution = _parse_resolution(conflict_resolution)
    if core.txn.pending:
        raise InvalidArgumentError(
            f"Dataset {core.path!r} has uncommitted changes; commit them (or roll them back) before a merge."
        )
    ours = core.txn.base
    theirs = core.table.committed(core.table.resolve(source, "source"))
    if ours.descends_from(theirs):
        return ours.version  # already merged: nothing to do
    if theirs.descends_from(ours):
        core.txn.fast_forward(theirs)
        return theirs.version
    content, origin = core.table.merge(ours, theirs, str(source), resolution)
    core.txn.commit_content(content, f"merge {source} into {core.branch}", origin, merged=(theirs,))
    return core.version


def _parse_resolution(value: object) -> Literal["ours", "theirs"] | None:
    if value is None or value in ("ours", "theirs"):
        return value
    raise InvalidArgumentError(f"Expected conflict_resolution None, 'ours' or 'theirs'. Got {value!r:.80}.")
