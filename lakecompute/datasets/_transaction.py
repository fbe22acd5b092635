"""The write transaction: the one way anything is committed to a dataset.

A `Transaction` belongs to one dataset handle. It holds the version the handle builds on
(``base``), the working copy that writes change (``head``, a `lakecompute.datasets._head.Head`), the
samples buffered but not yet written (its ``session``), and the storage side of its writes (its
``writer``: the lease and the slots of the handle's own segments, `lakecompute.versioned.Writer`). Every
commit goes through it, and through it the table's one commit call (`lakecompute.versioned.Table.commit`):
a write call outside ``with``, a ``with`` block, ``compact``, a restore, a merge, and an eval's
checkpoints and final commit (through its `lakecompute.datasets._eval_write.EvalWrite`). Rolling back
is forgetting the head: data is written once into slots nobody else uses, and becomes part of the
dataset only when a manifest that names it is committed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lakecompute import compression
from lakecompute.datasets._head import Checkout, Head
from lakecompute.datasets._records import EvalRecord
from lakecompute.datasets._session import WriteSession, rank_of
from lakecompute.htypes import Encoded
from lakecompute.storage import ArrayCache
from lakecompute.versioned import BranchRef, Manifest, Table

__all__ = ["Transaction", "block_message"]


class Transaction:
    """A dataset handle's uncommitted changes, and the only path to a commit.

    The head is changed through its own methods (``txn.head.add(state)``, ``txn.head.set_fragments``,
    ...), which tell the transaction; samples go through `write`, which checks, buffers and writes them.

    Args:
        table: the dataset's versioned table.
        cache: the handle's chunk cache (slot writers tell it which chunks they replaced).
        base: the committed version the handle builds on.
        on_change: called with a tensor name when that tensor's content changed (None: all of them),
            so the handle can drop readers built on the old content. A bound method is held weakly
            (see `_weakly`).
        checkout: the branch commits move (None for a handle pinned to a version, which never commits).
    """

    def __init__(
        self,
        table: Table,
        cache: ArrayCache,
        base: Manifest,
        on_change: Callable[[str | None], None],
        checkout: Checkout | None,
    ) -> None:
        self.table = table
        self.checkout = checkout
        self.base = base
        self._on_change = _weakly(on_change)
        self.head = Head(base, _weakly(self._changed))
        self.dirty = False
        self.depth = 0  # nesting of `with ds:` blocks (and single write calls) under way
        self.notes: list[str] = []  # what a `with` block did so far, for its commit message
        self.writer = table.writer(cache, compression.zarr_compressors)
        self.session = WriteSession(self.writer.new_slot)
        self._dataset_id = base.dataset_id

    @property
    def dataset_id(self) -> str:
        """The id of the dataset (made at its creation; derived once for a dataset made before ids)."""
        if not self._dataset_id:
            self._dataset_id = self.table.dataset_id(self.base)
        return self._dataset_id

    # -- what the head holds ---------------------------------------------------------------------
    def length(self, name: str) -> int:
        """Samples of ``name`` in the head, buffered ones included."""
        return self.head.state(name).length + self.session.pending(name)

    @property
    def pending(self) -> bool:
        """Whether anything is waiting to be committed."""
        return self.dirty or bool(self.session.pending_names())

    # -- checking and writing samples ------------------------------------------------------------
    def encode(self, name: str, value: object) -> Encoded:
        """Check one sample of ``name`` against its schema (buffers nothing)."""
        return self.session.encode(self.head.schema(name), value)

    def encode_many(self, name: str, values: object) -> np.ndarray | list[Encoded]:
        """Check many samples of ``name``: a stacked array when the fast path applies, else a list."""
        return self.session.encode_many(self.head.schema(name), values)

    def write(self, name: str, item: Encoded | np.ndarray | list[Encoded]) -> None:
        """Buffer checked samples of ``name`` (see `WriteSession`); full buffers are written out. The
        first samples of a tensor decide its rank."""
        self._hold()
        schema = self.head.schema(name)
        for frag in self.session.add(schema, item):
            self.head.append(name, frag)
        if schema.ndim is None:
            self.head.set_ndim(name, rank_of(item))
        self._changed(name)

    def flush(self, name: str | None = None) -> None:
        """Write out buffered samples (of one tensor, or of all) as fragments of the head."""
        names = [name] if name is not None else self.session.pending_names()
        if not any(self.session.pending(n) for n in names):
            return
        self._hold()
        written = self.session.flush_many([self.head.schema(n) for n in names])
        for n, frags in written.items():
            for frag in frags:
                self.head.append(n, frag)

    def drop_tensor(self, name: str) -> None:
        """Remove tensor ``name`` from the head, with its buffered samples."""
        self.session.forget(name)
        self.head.drop(name)

    def rename_tensor(self, old: str, new: str) -> None:
        """Give tensor ``old`` the name ``new``, in its place among the tensors; its data stays put."""
        self.flush(old)
        self.session.forget(old)
        self.head.rename(old, new)

    def _hold(self) -> None:
        """Hold the lease before writing data; if it had let the old segments go, write into new ones."""
        if not self.writer.hold():
            self.session.new_slots()

    def _changed(self, name: str | None) -> None:
        self.dirty = True
        self._on_change(name)

    # -- committing ------------------------------------------------------------------------------
    def commit(
        self, message: str, record: EvalRecord | None = None, origin: Mapping[str, Any] | None = None
    ) -> bool:
        """Commit the head as the next version; False (nothing done) when there is nothing to commit.

        Args:
            message: what the commit did.
            record: the record of the eval committing, if any.
            origin: what produced the version (an eval's functions, code and input), if known.

        Raises:
            CommitConflictError: another writer committed that version first; nothing of this one is kept.
        """
        self.flush()
        if not self.dirty and record is None:
            self.writer.let_go()
            return False
        changed = self.head.changed
        self._publish(self.head.build(), message, record, origin=origin)
        self.head = Head(self.base, _weakly(self._changed))
        self.dirty = False
        self.notes.clear()
        for name in changed:
            self._on_change(name)  # their specs may have changed (a dtype decided); the others did not
        self.writer.let_go()
        return True

    def commit_record(
        self, message: str, record: EvalRecord, origin: Mapping[str, Any] | None = None
    ) -> None:
        """Commit the base's content with ``record`` added, keeping the head as it is.

        An in-place eval checkpoints this way: its progress is saved (with its new fragments parked in
        the record), but readers keep seeing the old content until its final commit swaps them in.
        """
        self.flush()
        self._publish(self.base, message, record, origin=origin)

    def commit_content(
        self, content: Manifest, message: str, origin: Mapping[str, Any], merged: Sequence[Manifest] = ()
    ) -> None:
        """Commit ``content`` as the next version, dropping uncommitted changes: the content and records
        of an older version (``ds.restore(n)``; ``rerun=True`` dropping the kept outputs of an unfinished
        eval: no data is copied, older versions stay readable), or the base's and ``merged``'s changes
        combined (a merge: a version with two parents).

        Raises:
            CommitConflictError: another writer moved the branch first; nothing of this one is kept.
        """
        self.rollback()
        self._publish(content, message, None, merged=merged, origin=origin)
        self.head = Head(self.base, _weakly(self._changed))
        self._on_change(None)
        self.writer.let_go()

    def _publish(
        self,
        content: Manifest,
        message: str,
        record: EvalRecord | None,
        *,
        merged: Sequence[Manifest] = (),
        origin: Mapping[str, Any] | None = None,
    ) -> None:
        """Commit ``content`` as the next version of the branch, after the base (the table's one commit
        call), and build on it from now on.

        Raises:
            CommitConflictError: another writer moved the branch first; nothing of this one is kept.
            RefNotFoundError: the branch was deleted meanwhile (the commit is on no branch).
        """
        self.base = self.table.commit(
            self.base,
            content,
            self._branch_ref(),
            message,
            origin,
            record=None if record is None else {record.fingerprint: record.to_json()},
            merged=merged,
            lease=self.writer.lease,
            dataset_id=self.dataset_id,
        )

    def _branch_ref(self) -> BranchRef | None:
        """The ref of the branch commits move (None: ``main`` of a dataset opened before it had refs,
        whose ref the first commit writes; then it is read here, for the next ones)."""
        checkout = self.checkout
        assert checkout is not None  # handles pinned to a version never commit (check_writable)
        if checkout.ref is None and self.base.line is not None:
            # The last commit wrote main's ref (a version committed on a branch names its line).
            checkout = self.checkout = Checkout(checkout.name, self.table.branch(checkout.name))
        return checkout.ref

    def fast_forward(self, target: Manifest) -> None:
        """Move the branch to ``target``, a version that descends from the base (a fast-forward merge):
        one atomic step, no new version.

        Raises:
            CommitConflictError: another writer moved the branch first.
        """
        self.table.fast_forward(self.base, target, self._branch_ref(), self.writer.lease)
        self.reset(target)

    def rollback(self) -> None:
        """Drop every uncommitted change (its data is garbage: the lease lets its segments go)."""
        self.session.discard()
        self.writer.abandon()
        self.head = Head(self.base, _weakly(self._changed))
        self.dirty = False
        self.notes.clear()
        self._on_change(None)

    def reset(self, base: Manifest) -> None:
        """Build on ``base`` from now on, dropping uncommitted changes (``Dataset.reload``, a switch of
        branch, a fast-forward)."""
        self.base = base
        self.rollback()


def block_message(notes: Sequence[str]) -> str:
    """A commit message for what a ``with`` block did: its write calls (``notes``), repeats counted."""
    counts: dict[str, int] = {}
    for note in notes:
        counts[note] = counts.get(note, 0) + 1
    parts = [f"{note} x{n}" if n > 1 else note for note, n in counts.items()]
    text = ", ".join(parts) or "write"
    return text if len(text) <= 100 else text[:97] + "..."


def _weakly(callback: Callable[[str | None], None]) -> Callable[[str | None], None]:
    """``callback`` (a bound method) held through a weak reference to its object, a call after that object
    is gone doing nothing: a handle's transaction calls the handle back, and its head the transaction,
    and holding them strongly made cycles that only the garbage collector broke, so that a dataset
    handle, its chunk cache (a loader's decoded chunks: 120 MB after an epoch) and its lease outlived
    the last reference to them until a collection ran."""
    if not hasattr(callback, "__self__"):
        return callback
    method = weakref.WeakMethod(callback)

    def call(name: str | None) -> None:
        bound = method()
        if bound is not None:
            bound(name)

    return call
