"""The write transaction: the one way anything is committed to a dataset.

A `Transaction` belongs to one dataset handle. It holds the version the handle builds on
(``base``), the working copy that writes change (``head``), the samples buffered but not yet written,
and the slots this handle writes into. Every commit goes through it: a write call outside ``with``,
a ``with`` block, ``compact``, and an eval's checkpoints and final commit (through the
`EvalWrite` it hands out). Rolling back is forgetting the head (`lakecompute.datasets._head`):
data is written once into slots nobody else uses, and becomes part of the dataset only when a
manifest that names it is committed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.store import Store

from lakecompute.datasets._head import Checkout, Head
from lakecompute.datasets._records import EvalRecord, as_reference, parse_records, reference_of
from lakecompute.datasets._schema import TensorSchema
from lakecompute.datasets._session import WriteSession, rank_of
from lakecompute.datasets._slots import SlotAllocator
from lakecompute.errors import CommitConflictError, DatasetNotFoundError, RefNotFoundError
from lakecompute.htypes import Encoded
from lakecompute.storage import (
    DEFAULT_BRANCH,
    ArrayCache,
    Backend,
    BranchRef,
    Fragment,
    Lease,
    Manifest,
    TensorState,
    check_still_there,
    commit_version,
    dataset_id_of,
    ensure_main,
    latest_version,
    list_branches,
    moved_to,
    read_branch,
    read_manifest,
)

if TYPE_CHECKING:
    from lakecompute.datasets._eval_write import EvalWrite

__all__ = ["Transaction"]


class Transaction:
    """A dataset handle's uncommitted changes, and the only path to a commit.

    Args:
        backend: where the dataset lives.
        store: the zarr store of ``backend``.
        cache: the handle's chunk cache (slot writers tell it which chunks they replaced).
        base: the committed version the handle builds on.
        on_change: called with a tensor name when that tensor's content changed (None: all of them),
            so the handle can drop readers built on the old content.
        checkout: the branch commits move (None for a handle pinned to a version, which never commits).
    """

    def __init__(
        self,
        backend: Backend,
        store: Store,
        cache: ArrayCache,
        base: Manifest,
        on_change: Callable[[str | None], None],
        checkout: Checkout | None,
    ) -> None:
        self.backend = backend
        self.checkout = checkout
        self.store = store
        self.cache = cache
        self.base = base
        self.head = Head(base)
        self.dirty = False
        self.depth = 0  # nesting of `with ds:` blocks (and single write calls) under way
        self.notes: list[str] = []  # what a `with` block did so far, for its commit message
        self.lease = Lease(backend)
        self.slots = SlotAllocator(store, cache, self.lease)
        self.session = WriteSession(self.slots.new_slot)
        self.evals = 0  # evals whose workers may be writing: the lease is held until they finish
        self._on_change = on_change
        self._dataset_id = base.dataset_id

    @property
    def dataset_id(self) -> str:
        """The id of the dataset (made at its creation; derived once for a dataset made before ids)."""
        if not self._dataset_id:
            self._dataset_id = dataset_id_of(self.backend, self.base)
        return self._dataset_id

    # -- what the head holds ---------------------------------------------------------------------
    def state(self, name: str) -> TensorState:
        """The head's state of tensor ``name`` (KeyError if there is none)."""
        return self.head.state(name)

    def schema(self, name: str) -> TensorSchema:
        """What samples of tensor ``name`` are checked against (KeyError if there is none)."""
        return self.head.schema(name)

    def length(self, name: str) -> int:
        """Samples of ``name`` in the head, buffered ones included."""
        return self.head.state(name).length + self.session.pending(name)

    @property
    def pending(self) -> bool:
        """Whether anything is waiting to be committed."""
        return self.dirty or bool(self.session.pending_names())

    # -- checking samples ------------------------------------------------------------------------
    def encode(self, name: str, value: object) -> Encoded:
        """Check one sample of ``name`` against its schema (buffers nothing)."""
        return self.session.encode(self.head.schema(name), value)

    def encode_many(self, name: str, values: object) -> np.ndarray | list[Encoded]:
        """Check many samples of ``name``: a stacked array when the fast path applies, else a list."""
        return self.session.encode_many(self.head.schema(name), values)

    # -- changing the head -----------------------------------------------------------------------
    def add_tensor(self, state: TensorState) -> None:
        self.head.add(state)
        self._changed(state.spec.name)

    def drop_tensor(self, name: str) -> None:
        self.session.forget(name)
        self.head.drop(name)
        self._changed(name)

    def rename_tensor(self, old: str, new: str) -> None:
        """Give tensor ``old`` the name ``new``, in its place among the tensors; its data stays put."""
        self.flush(old)
        self.session.forget(old)
        self.head.rename(old, new)
        self._changed(old)
        self._changed(new)

    def set_info(self, info: dict[str, Any]) -> None:
        """Replace the dataset's own info (``ds.info``) in the head."""
        self.head.info = info
        self._changed(None)

    def set_tensor_info(self, name: str, info: dict[str, Any]) -> None:
        """Replace tensor ``name``'s info in the head (checked by the caller); its samples are kept."""
        self.head.set_info_of(name, info)
        self._changed(name)

    def write(self, name: str, item: Encoded | np.ndarray | list[Encoded]) -> None:
        """Buffer checked samples of ``name`` (see `WriteSession`); full buffers are written out. The
        first samples of a tensor decide its rank."""
        self._hold()
        schema = self.head.schema(name)
        for frag in self.session.add(schema, item):
            self.add_fragment(name, frag)
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
                self.add_fragment(n, frag)

    def add_fragment(self, name: str, frag: Fragment) -> None:
        """Append a written fragment to tensor ``name`` of the head (its schema checks rank and dtype)."""
        self.head.append(name, frag)
        self._changed(name)

    def set_fragments(self, name: str, fragments: list[Fragment] | tuple[Fragment, ...]) -> None:
        """Make ``fragments`` the whole content of tensor ``name`` (compact, in-place replacement)."""
        self.head.set_fragments(name, fragments)
        self._changed(name)

    def set_ndim(self, name: str, ndim: int | None) -> None:
        """Record tensor ``name``'s rank, as an eval decided it (None: its next samples decide it)."""
        self.head.set_ndim(name, ndim)
        self._changed(name)

    def reopen_dtype(self, name: str) -> None:
        """Let tensor ``name``'s dtype be decided again, from all its fragments, at the next commit (an
        eval whose data decides a generic tensor's dtype keeps it open until its final commit)."""
        self.head.reopen_dtype(name)

    def _hold(self) -> None:
        """Hold the lease before writing data; if it had let the old segments go, write into new ones."""
        if not self.slots.hold():
            self.session.new_slots()

    def _let_go(self) -> None:
        """Release the lease after a commit, unless an eval's workers may still be writing."""
        if not self.evals:
            self.lease.release(forget=False)

    def pin(self) -> None:
        """An eval's workers start writing into this handle's segments: keep the lease until `unpin`."""
        self.evals += 1

    def unpin(self) -> None:
        """An eval's workers are done (its final commit or abort follows)."""
        self.evals = max(0, self.evals - 1)

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
            self._let_go()
            return False
        changed = self.head.changed
        self._publish(self.head.build(), message, record, origin=origin)
        self.head = Head(self.base)
        self.dirty = False
        self.notes.clear()
        for name in changed:
            self._on_change(name)  # their specs may have changed (a dtype decided); the others did not
        self._let_go()
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

    def _publish(
        self,
        content: Manifest,
        message: str,
        record: EvalRecord | None,
        *,
        merged: Sequence[Manifest] = (),
        origin: Mapping[str, Any] | None = None,
    ) -> None:
        """Commit ``content`` as the next version of the branch, after the base, with ``message`` and
        ``record``; ``merged`` are the further parents of a merge, ``origin`` what produced it.

        Raises:
            CommitConflictError: another writer moved the branch first; nothing of this one is kept.
            RefNotFoundError: the branch was deleted meanwhile (the commit is on no branch).
        """
        ref = self._branch_ref()
        base = self.base
        dataset_id = self.dataset_id
        if base.version < ref.start:  # a handle from before the branch began (a stale pickle): never on it
            raise CommitConflictError(self.backend.url, base.version, ref.start)
        reach = _joined([base.reach_of(), *(m.reach_of() for m in merged)])

        def build(version: int) -> Manifest:
            return replace(
                content,
                version=version,
                parent=base.version,
                message=message,
                evals=_next_evals(content.evals, record, version),
                branch=ref.name,
                line=ref.line,
                merged=tuple(m.version for m in merged),
                reach=reach,
                origin=dict(origin or {}),
                dataset_id=dataset_id,  # every version names its dataset (a legacy one's, from now on)
            )

        # Last, just before the manifest lands: data written under a lapsed lease may be gone, and the
        # dataset this handle built on may have been replaced at its path (its numbers are free there).
        self.lease.check()
        check_still_there(self.backend, dataset_id)
        committed = commit_version(self.backend, build, base.version + 1, base)
        if committed is None:
            found = moved_to(self.backend, ref.line, base.version) or base.version
            raise CommitConflictError(self.backend.url, base.version, found)
        if ref.name != DEFAULT_BRANCH:
            self._check_still_there(ref)
        self.base = committed

    def _branch_ref(self) -> BranchRef:
        """The ref of the branch commits move; for ``main`` of a dataset opened before it had refs, the
        ref is written first (and this handle must still be at its start).

        Raises:
            CommitConflictError: another writer committed since this handle opened the dataset.
        """
        checkout = self.checkout
        assert checkout is not None  # handles pinned to a version never commit (check_writable)
        if checkout.ref is not None:
            return checkout.ref
        ref = ensure_main(self.backend, latest_version(self.backend) or 0)
        if ref.start != self.base.version:
            raise CommitConflictError(self.backend.url, self.base.version, ref.start)
        self.checkout = Checkout(checkout.name, ref)
        return ref

    def _check_still_there(self, ref: BranchRef) -> None:
        now = read_branch(self.backend, ref.name)
        if now is None or now.line != ref.line:
            raise RefNotFoundError(
                self.backend.url,
                ref.name,
                "branch",
                list_branches(self.backend),
                detail="It was deleted while this write committed; nothing of the write is on any branch.",
            )

    def fast_forward(self, target: Manifest) -> None:
        """Move the branch to ``target``, a version that descends from the base (a fast-forward merge):
        one atomic step, no new version.

        Raises:
            CommitConflictError: another writer moved the branch first.
        """
        from lakecompute.storage import advance, write_line_hint

        ref = self._branch_ref()
        self.lease.check()
        if not advance(self.backend, ref.line, self.base.version, target.version):
            found = moved_to(self.backend, ref.line, self.base.version) or self.base.version
            raise CommitConflictError(self.backend.url, self.base.version, found)
        write_line_hint(self.backend, ref.line, target.version)
        if ref.name != DEFAULT_BRANCH:
            self._check_still_there(ref)
        self.reset(target)

    def switch(self, checkout: Checkout | None, base: Manifest) -> None:
        """Build on ``base`` of branch ``checkout`` from now on (``None``: pinned to ``base``)."""
        self.checkout = checkout
        self.reset(base)

    def block_message(self) -> str:
        """A commit message for what a ``with`` block did: its write calls, repeats counted."""
        counts: dict[str, int] = {}
        for note in self.notes:
            counts[note] = counts.get(note, 0) + 1
        parts = [f"{note} x{n}" if n > 1 else note for note, n in counts.items()]
        text = ", ".join(parts) or "write"
        return text if len(text) <= 100 else text[:97] + "..."

    def rollback(self) -> None:
        """Drop every uncommitted change (its data is garbage: the lease lets its segments go)."""
        self.session.discard()
        self.evals = 0
        self.lease.release(forget=True)
        self.head = Head(self.base)
        self.dirty = False
        self.notes.clear()
        self._on_change(None)

    def reset(self, base: Manifest) -> None:
        """Build on ``base`` from now on, dropping uncommitted changes (``Dataset.reload``)."""
        self.base = base
        self.rollback()

    # -- evals -----------------------------------------------------------------------------------
    def records(self) -> dict[str, EvalRecord]:
        """The eval records of the base version, by fingerprint.

        Raises:
            DatasetCorruptError: a record is malformed (names the manifest file).
        """
        return parse_records(self.base, self.backend.url)

    def find_record(self, fingerprint: str) -> EvalRecord | None:
        """The record of eval ``fingerprint`` in the base version, read from the version that keeps it
        whole (when that version is gone, only its status and progress are known).

        Raises:
            DatasetCorruptError: the record or its reference is malformed.
        """
        obj = self.base.evals.get(fingerprint)
        if obj is None:
            return None
        if "at" not in obj:
            return self.records()[fingerprint]
        at, known = reference_of(fingerprint, obj, self.backend.url, self.base)
        try:
            kept = read_manifest(self.backend, at)
        except DatasetNotFoundError:
            return known  # vacuumed away: that it ran, and how far, is what is left
        return parse_records(kept, self.backend.url).get(fingerprint, known)

    def begin_eval(
        self,
        fingerprint: str | None,
        *,
        label: str,
        in_place: bool,
        resume: EvalRecord | None,
        job: str,
        origin: Mapping[str, Any] | None = None,
    ) -> EvalWrite:
        """Start an eval's writes into this dataset (see `EvalWrite`)."""
        from lakecompute.datasets._eval_write import EvalWrite

        return EvalWrite(
            self, fingerprint, label=label, in_place=in_place, resume=resume, job=job, origin=origin
        )

    def restore(self, version: int, message: str) -> None:
        """Commit, as the next version, the content and records of the older ``version`` (the tensors,
        the dataset's info and the eval records it had; no data is copied).

        How ``ds.restore(n)`` undoes later commits, and how ``rerun=True`` drops the kept outputs of an
        unfinished eval: the new version equals the one before that eval began (older versions stay
        readable).
        """
        old = read_manifest(self.backend, version)
        self.rollback()
        self._publish(old, message, None, origin={"op": "restore", "version": version})
        self.head = Head(self.base)
        self._on_change(None)

    def commit_merge(
        self, content: Manifest, message: str, theirs: Manifest, origin: Mapping[str, Any]
    ) -> None:
        """Commit ``content`` (the base's and ``theirs``'s changes combined) as a merge of ``theirs`` into
        the branch: a version with two parents.

        Raises:
            CommitConflictError: another writer moved the branch first; nothing of the merge is kept.
        """
        self.rollback()
        self._publish(content, message, None, merged=(theirs,), origin=origin)
        self.head = Head(self.base)
        self.dirty = False
        self._on_change(None)
        self._let_go()


def _joined(reaches: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """The reach of a version with these parents: per line, the newest version any of them reaches."""
    out: dict[str, int] = {}
    for reach in reaches:
        for line, at in reach.items():
            if at > out.get(line, -1):
                out[line] = at
    return out


def _unfinished_of(obj: Any, job: str) -> bool:
    return isinstance(obj, dict) and obj.get("status") == "running" and obj.get("job") == job


def _next_evals(evals: Mapping[str, Any], record: EvalRecord | None, version: int) -> dict[str, Any]:
    """The eval records of the next version: every earlier record as a reference to the version that
    keeps it whole, and ``record`` (stamped with ``version``) whole. A record of the same eval is
    replaced, and so is an unfinished record that ``record`` continues (same job, older code)."""
    out = {}
    for fp, obj in evals.items():
        if record is not None and (
            fp == record.fingerprint or (record.job and _unfinished_of(obj, record.job))
        ):
            continue
        out[fp] = as_reference(obj)
    if record is not None:
        stamped = record.to_json()
        stamped["version"] = version
        out[record.fingerprint] = stamped
    return out
