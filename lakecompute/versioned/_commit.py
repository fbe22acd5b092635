"""The one commit call: a new version on a branch, after the version a writer built on.

Every commit of a dataset goes through `commit`: a write outside ``with``, a ``with`` block, an eval's
checkpoints and final commit, an in-place eval's checkpoint that keeps the content as it was, a restore,
a merge. Its steps (``_versions.commit_version``): the manifest is stored under a free version number,
then the branch is moved there by creating its move exclusively; the move is the commit. A kill before
it leaves a manifest no branch reaches (``vacuum`` removes it), never a half-moved branch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lakecompute.errors import CommitConflictError, RefNotFoundError
from lakecompute.storage import Backend
from lakecompute.versioned._evals import next_evals
from lakecompute.versioned._leases import Lease
from lakecompute.versioned._manifest import Manifest
from lakecompute.versioned._refs import (
    DEFAULT_BRANCH,
    BranchRef,
    advance,
    ensure_main,
    list_branches,
    moved_to,
    read_branch,
    write_line_hint,
)
from lakecompute.versioned._versions import (
    check_base_unchanged,
    check_still_there,
    commit_version,
    dataset_id_of,
    latest_version,
)

__all__ = ["commit", "fast_forward"]


def commit(
    backend: Backend,
    base: Manifest,
    head: Manifest,
    ref: BranchRef | None,
    message: str,
    origin: Mapping[str, Any] | None = None,
    *,
    record: Mapping[str, Mapping[str, Any]] | None = None,
    merged: Sequence[Manifest] = (),
    lease: Lease | None = None,
    dataset_id: str = "",
) -> Manifest:
    """Commit ``head``'s content as the next version of branch ``ref``, after ``base`` (its head as the
    writer read it); the version committed.

    Args:
        backend: where the dataset lives.
        base: the version the writer built on: the new version's parent.
        head: the content to commit (its tensors, info and eval records; its version fields are set here).
        ref: the branch; None for ``main`` of a dataset written before refs (its ref is written first,
            and ``base`` must still be its newest version).
        message: what the commit did.
        origin: what produced the version (an eval's functions, code and input), if known.
        record: the record of the eval committing (fingerprint -> its JSON), kept whole in this version;
            earlier records are kept as references (`lakecompute.versioned._evals`).
        merged: the further parents of a merge.
        lease: the writer's lease, checked just before the manifest lands (data written under a lapsed
            lease may be gone).
        dataset_id: the id of the dataset the writer opened ("": ``base``'s).

    Raises:
        CommitConflictError: another writer moved the branch first; nothing of this commit is kept.
        RefNotFoundError: the branch was deleted meanwhile (the commit is on no branch).
        DatasetReplacedError: another dataset is at the location now, or a copy of this one whose
            history diverged (``base``'s version holds other content there).
        LeaseExpiredError: ``lease`` lapsed.
    """
    ref = _branch_ref(backend, ref, base)
    dataset_id = dataset_id or dataset_id_of(backend, base)
    if base.version < ref.start:  # a handle from before the branch began (a stale pickle): never on it
        raise CommitConflictError(backend.url, base.version, ref.start)
    reach = _joined([base.reach_of(), *(m.reach_of() for m in merged)])

    def build(version: int) -> Manifest:
        return replace(
            head,
            version=version,
            parent=base.version,
            message=message,
            evals=next_evals(head.evals, record, version),
            branch=ref.name,
            line=ref.line,
            merged=tuple(m.version for m in merged),
            reach=reach,
            origin=dict(origin or {}),
            dataset_id=dataset_id,  # every version names its dataset (a legacy one's, from now on)
        )

    # Last, just before the manifest lands: data written under a lapsed lease may be gone, and the
    # dataset the writer built on may have been replaced at its path (its numbers are free there).
    if lease is not None:
        lease.check()
    check_still_there(backend, dataset_id)
    check_base_unchanged(backend, base, dataset_id)
    committed = commit_version(backend, build, base.version + 1, base)
    if committed is None:
        found = moved_to(backend, ref.line, base.version) or base.version
        raise CommitConflictError(backend.url, base.version, found)
    if ref.name != DEFAULT_BRANCH:
        _check_branch_still_there(backend, ref)
    return committed


def fast_forward(
    backend: Backend, base: Manifest, target: Manifest, ref: BranchRef | None, lease: Lease | None = None
) -> None:
    """Move branch ``ref`` from ``base`` to ``target``, a version that descends from it (a fast-forward
    merge): one atomic step, no new version.

    Raises:
        CommitConflictError: another writer moved the branch first.
        RefNotFoundError: the branch was deleted meanwhile.
        DatasetReplacedError: the folder holds a copy of the dataset whose history diverged.
    """
    ref = _branch_ref(backend, ref, base)
    if lease is not None:
        lease.check()
    check_base_unchanged(backend, base, dataset_id_of(backend, base))
    if not advance(backend, ref.line, base.version, target.version):
        found = moved_to(backend, ref.line, base.version) or base.version
        raise CommitConflictError(backend.url, base.version, found)
    write_line_hint(backend, ref.line, target.version)
    if ref.name != DEFAULT_BRANCH:
        _check_branch_still_there(backend, ref)


def _branch_ref(backend: Backend, ref: BranchRef | None, base: Manifest) -> BranchRef:
    """The ref of the branch a commit moves; for ``main`` of a dataset opened before it had refs, the
    ref is written first (and ``base`` must still be at its start).

    Raises:
        CommitConflictError: another writer committed since the writer opened the dataset.
    """
    if ref is not None:
        return ref
    ref = ensure_main(backend, latest_version(backend) or 0)
    if ref.start != base.version:
        raise CommitConflictError(backend.url, base.version, ref.start)
    return ref


def _check_branch_still_there(backend: Backend, ref: BranchRef) -> None:
    now = read_branch(backend, ref.name)
    if now is None or now.line != ref.line:
        raise RefNotFoundError(
            backend.url,
            ref.name,
            "branch",
            list_branches(backend),
            detail="It was deleted while this write committed; nothing of the write is on any branch.",
        )


def _joined(reaches: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """The reach of a version with these parents: per line, the newest version any of them reaches."""
    out: dict[str, int] = {}
    for reach in reaches:
        for line, at in reach.items():
            if at > out.get(line, -1):
                out[line] = at
    return out
