"""The version-control verbs of a dataset handle: its log, branches, tags, restore, diff, merge, and
the maintenance that commits (compact, vacuum).

`VersionControl` is a base of `lakecompute.Dataset`; each verb hands over to the module that does
the work (`_branching`, `_maintenance`, and through them the dataset's `lakecompute.versioned.Table`),
imported when it is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from lakecompute.datasets._core import core_of
from lakecompute.datasets._head import checkout_of

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.versioned import VersionDiff

__all__ = ["VersionControl"]


class VersionControl:
    """What a dataset handle does with its history (see docs/versions.md); mixed into `Dataset`."""

    def _handle(self) -> Dataset:
        # Only ever a base of Dataset: this handle, typed as the Dataset the verbs' modules take.
        return cast("Dataset", self)

    # -- history and maintenance -----------------------------------------------------------------
    def log(self, all_branches: bool = False, evals: bool = False) -> list[dict[str, Any]]:
        """The history of the version this handle reads, oldest first: it and every version it descends
        from (through every parent of a merge); with ``all_branches=True``, every version any branch or
        tag reaches (``lakecompute log PATH --graph`` draws it).

        Each entry has ``version``, ``time``, ``message``, ``samples`` (per tensor), ``parents`` (the
        branch's previous head first, then a merged one), ``branch`` (where it was committed),
        ``branches`` and ``tags`` (those whose head or name it is), and, when known, what produced it:
        ``origin`` (``{"op": "restore", "version": 3}``, ``{"op": "merge", "source": ...}``, ...) and for a
        version an eval committed ``"eval"``: its functions (``label``), ``status`` (``"running"`` at a
        checkpoint, ``"done"``), inputs ``done``, the ``seed`` its ``rng`` generators came from (pass it
        to ``eval(seed=)`` to reproduce the run), and its lineage: ``functions``, ``code`` (a fingerprint
        of their code and arguments), ``inputs`` (what it read: a dataset's location, version and content
        digest) and ``fingerprint`` (the eval's: the same for its checkpoints, its resumed runs and its end).

        With ``evals=True``, the versions an eval committed at its checkpoints fold into one entry: that of
        the version that finished it (or of its newest checkpoint), with ``eval["checkpoints"]`` listing
        the versions folded into it (``lakecompute log PATH --evals``).

        The log reads each version's header only (no tensor's fragments): its cost grows with the versions
        it lists, not with the data or the fragments behind them.
        """
        from lakecompute.parsing import parse_flag

        every = parse_flag("all_branches", all_branches)
        fold = parse_flag("evals", evals)
        ds = self._handle()
        return core_of(ds).table.log(None if every else ds.version, evals=fold)

    def reload(self) -> None:
        """Move this handle to the newest committed version of its branch (drops uncommitted changes); a
        handle opened at a version stays there.

        Raises:
            DatasetReplacedError: the path holds another dataset now (it was overwritten, or deleted and
                created again); the handle keeps reading the version it had.
        """
        core = core_of(self._handle())
        core.cache.clear()
        name = core.branch
        if name is None:
            core.txn.reset(core.txn.base)
            return
        checkout, head = checkout_of(core.table, name)
        core.move(checkout, core.table.manifest_of(head, core.dataset_id, "this handle"))

    # -- branches, tags and undo (see docs/versions.md) -----------------------------------------------
    def checkout(self, name: str, create: bool = False) -> None:
        """Switch this handle to branch ``name`` (at its newest version); with ``create=True``, start a
        new branch there from the version this handle reads (also from an old version opened with
        ``lc.load(path, version=...)``). Writes, evals, restores and merges then land on that branch,
        and other branches are left untouched.

        Raises:
            RefNotFoundError: no branch ``name`` (pass ``create=True`` to make it).
            RefExistsError: ``create=True`` and a branch or tag has that name.
            InvalidArgumentError: an invalid name, or uncommitted changes (commit or roll back first).

        Example:
            >>> ds = lc.from_numpy("mem://checkout-doc", {"x": [1, 2]}, overwrite=True)
            >>> ds.checkout("experiment", create=True)
            >>> ds.x.append(3)
            >>> ds.branch, len(ds), len(lc.load("mem://checkout-doc")), ds.branches
            ('experiment', 3, 2, ['experiment', 'main'])
        """
        from lakecompute.datasets._branching import checkout

        checkout(self._handle(), name, create)

    def delete_branch(self, name: str) -> None:
        """Delete branch ``name`` (one atomic step). Its versions stay readable by number while another
        branch or a tag reaches them; ``vacuum()`` removes the rest.

        Raises:
            RefNotFoundError: no such branch.
            InvalidArgumentError: ``"main"``, or the branch this handle is on.
        """
        from lakecompute.datasets._branching import delete_branch

        delete_branch(self._handle(), name)

    def tag(self, name: str, version: int | str | None = None) -> int:
        """Name a version (by default the one this handle reads): ``lc.load(path, version=name)`` opens
        it, and ``vacuum()`` keeps it. Tags never move. Returns the version tagged.

        Raises:
            RefExistsError: a tag or branch has that name.
            DatasetNotFoundError: no such version.
        """
        from lakecompute.datasets._branching import tag

        return tag(self._handle(), name, version)

    def delete_tag(self, name: str) -> None:
        """Delete tag ``name`` (the version stays while a branch or tag reaches it).

        Raises:
            RefNotFoundError: no such tag.
        """
        from lakecompute.datasets._branching import delete_tag

        delete_tag(self._handle(), name)

    def restore(self, version: int | str) -> int:
        """Undo: commit a new version, on this branch, whose content equals ``version`` (a number, tag or
        branch): every tensor, the dataset's info, and the evals it remembered. No data is copied, and
        the versions in between stay readable. Returns the new version.

        Raises:
            ReadOnlyError: the handle cannot write.
            InvalidArgumentError: uncommitted changes.
            DatasetNotFoundError: no such version.
        """
        from lakecompute.datasets._branching import restore

        return restore(self._handle(), version)

    def diff(self, a: int | str | None = None, b: int | str | None = None) -> VersionDiff:
        """What changed from ``a`` to ``b`` (version numbers, branches or tags), read from the two
        versions' manifests (no sample is read): per tensor, the rows appended, replaced and removed (as
        ``(start, stop)`` ranges), tensors created, deleted and renamed, spec and info changes.

        ``b`` defaults to the version this handle reads; without ``a`` either, the diff is what that
        version's commit changed. Rows count as replaced when they are stored anew, which ``compact()``
        does for every row (with equal values).

        Raises:
            RefNotFoundError: a name that is no branch or tag.
            DatasetNotFoundError: no such version.
        """
        from lakecompute.datasets._branching import diff

        return diff(self._handle(), a, b)

    def merge(self, source: int | str, conflict_resolution: str | None = None) -> int:
        """Bring the changes of ``source`` (a branch, tag or version) into this handle's branch; returns
        the version the branch is at afterwards.

        Fast-forwards when this branch has not moved since ``source`` started from it; otherwise commits
        a version with two parents that combines changes to different tensors or different rows (rows
        appended on both sides are all kept, this branch's first). Changes of the same rows or tensors on
        both sides raise `MergeConflictError` naming them, unless ``conflict_resolution`` is ``"ours"``
        (this branch's changes win) or ``"theirs"`` (``source``'s win). One atomic commit either way.

        Raises:
            MergeConflictError: overlapping changes (nothing is committed).
            RefNotFoundError: ``source`` names no branch or tag.
            InvalidArgumentError: uncommitted changes, or a bad ``conflict_resolution``.
        """
        from lakecompute.datasets._branching import merge

        return merge(self._handle(), source, conflict_resolution)

    def compact(self, progressbar: bool = True) -> int:
        """Rewrite every tensor into one fragment (content unchanged), with a progress bar of the samples
        rewritten; returns the new version."""
        from lakecompute.datasets._maintenance import compact

        return compact(self._handle(), progressbar=progressbar)

    def vacuum(
        self, grace_seconds: float = 3600.0, keep_versions: int | None = None, progressbar: bool = True
    ) -> dict[str, int]:
        """Remove stored data that no version references (see `lakecompute.datasets.vacuum`), with a
        progress bar of the stored arrays looked at."""
        from lakecompute.datasets._maintenance import vacuum

        return vacuum(
            self._handle(), grace_seconds=grace_seconds, keep_versions=keep_versions, progressbar=progressbar
        )
