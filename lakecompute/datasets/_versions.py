"""Branches, tags, restore and diff on a dataset handle (``ds.checkout``, ``ds.tag``, ``ds.restore``, ...).

Each operation that changes the dataset is one atomic step on its metadata: creating or removing one
ref file (`lakecompute.storage._refs`), or one commit through the handle's write transaction. None
copies or reads a sample.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lakecompute.datasets._core import DatasetCore, core_of
from lakecompute.datasets._diff import VersionDiff, diff_manifests
from lakecompute.datasets._head import Checkout, checkout_of
from lakecompute.datasets._history import read_committed, resolve
from lakecompute.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    ReadOnlyError,
    RefExistsError,
    RefNotFoundError,
)
from lakecompute.storage import (
    DEFAULT_BRANCH,
    BranchRef,
    Manifest,
    TagRef,
    branch_key,
    create_branch,
    create_tag,
    ensure_main,
    is_version_number,
    latest_version,
    list_branches,
    list_tags,
    new_line_id,
    parse_ref_name,
    read_branch,
    read_manifest,
    read_tag,
    tag_key,
)

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset

__all__ = ["checkout", "delete_branch", "delete_tag", "diff", "restore", "tag"]


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
    backend = core.backend
    if not create:
        where, head = checkout_of(backend, name)
        core.move(where, read_committed(backend, head))
        return
    _refs_writable(core)
    if read_tag(backend, name) is not None:
        raise RefExistsError(core.path, name, "tag")
    # A dataset written before branches gets main's ref first: from now on main is not "the newest version".
    ensure_main(backend, latest_version(backend) or 0)
    ref = BranchRef(name, new_line_id(), core.version, time.time(), core.branch)
    if not create_branch(backend, ref):
        raise RefExistsError(core.path, name, "branch")
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
    if read_branch(core.backend, name) is None:
        raise RefNotFoundError(core.path, name, "branch", list_branches(core.backend))
    core.backend.delete(branch_key(name))


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
    backend = core.backend
    if version is None:
        _no_pending(core, "tagging its version")
        number = core.version
    else:
        number = resolve(backend, version)
    read_committed(backend, number)
    if name in list_branches(backend):
        raise RefExistsError(core.path, name, "branch")
    if not create_tag(backend, TagRef(name, number, time.time())):
        raise RefExistsError(core.path, name, "tag")
    return number


def tags(ds: Dataset) -> dict[str, int]:
    """Tag name -> version, sorted by name."""
    return {name: t.version for name, t in list_tags(core_of(ds).backend).items()}


def delete_tag(ds: Dataset, name: object) -> None:
    """Remove tag ``name`` (its version stays while a branch or tag reaches it).

    Raises:
        RefNotFoundError: no such tag.
    """
    core = core_of(ds)
    name = parse_ref_name("tag", name)
    _refs_writable(core)
    if read_tag(core.backend, name) is None:
        raise RefNotFoundError(core.path, name, "tag", sorted(list_tags(core.backend)))
    core.backend.delete(tag_key(name))


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
    number = resolve(core.backend, version)
    read_committed(core.backend, number)
    core.txn.restore(number, f"restore version {number}")
    return core.version


def diff(ds: Dataset, a: object, b: object) -> VersionDiff:
    """What changed from ``a`` to ``b`` (versions, branches or tags). ``b`` None: the version ``ds``
    reads; ``a`` None too: the parent of that version (what its commit changed).

    Raises:
        RefNotFoundError: a name that is no branch or tag.
        DatasetNotFoundError: no such version.
    """
    core = core_of(ds)
    backend = core.backend
    new = core.txn.base if b is None else read_committed(backend, resolve(backend, b, "b"))
    if a is None:
        parent = new.parent
        old = read_manifest(backend, parent) if parent is not None else Manifest(version=new.version)
    else:
        old = read_committed(backend, resolve(backend, a, "a"))
    return diff_manifests(core.path, old, new)
