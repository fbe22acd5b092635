"""The head a transaction edits, and the branch it sits on.

`Head` is the one mutable copy of a dataset's metadata (what the next commit publishes); `Checkout`
names the branch a handle's commits move. `lakecompute.datasets._transaction` commits through both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from lakecompute.datasets._schema import TensorSchema
from lakecompute.versioned import BranchRef, Fragment, Manifest, Table, TensorState, append_fragment

__all__ = ["Checkout", "Head", "checkout_of"]


@dataclass(frozen=True, slots=True)
class Checkout:
    """The branch a handle is on: the one its commits move.

    Attributes:
        name: the branch's name.
        ref: its ref as read when the handle got onto it; None for ``main`` of a dataset that had no refs
            then (written before branches): its first commit writes ``main``'s ref.
    """

    name: str
    ref: BranchRef | None


def checkout_of(table: Table, name: str) -> tuple[Checkout, int]:
    """Branch ``name`` of the dataset, and the version it is at.

    Raises:
        RefNotFoundError: there is no such branch.
        DatasetCorruptError: its ref or a move is damaged.
    """
    ref, head = table.checkout(name)
    return Checkout(name, ref), head


class Head:
    """The one mutable copy of a dataset's metadata: what a transaction's commit will publish.

    Versions (`Manifest`) and tensor states (`TensorState`) are frozen; the head starts from the base
    version's, changes only through the explicit updates below, and `build` makes the next frozen
    manifest from it. Tensors it did not change are carried over as the same objects, so a commit costs
    nothing for them (their JSON is not even encoded again).

    Args:
        base: the version the head starts from.
        on_change: called after each update below (but `reopen_dtype`) with the tensor it changed (None:
            the dataset's info), so the transaction knows it has something to commit and the handle can
            drop readers built on the old content.
    """

    def __init__(self, base: Manifest, on_change: Callable[[str | None], None] = lambda name: None) -> None:
        self._base = base
        self._on_change = on_change
        self._states: dict[str, TensorState] = dict(base.tensors)
        # Fragments appended since a tensor's state was last frozen (merged as they come, frozen on read).
        self._drafts: dict[str, list[Fragment]] = {}
        self._schemas: dict[str, TensorSchema] = {}
        self._view = MappingProxyType(self._states)
        self.info: dict[str, Any] = base.info
        self.changed: set[str] = set()  # tensors whose state may differ from the base's

    @property
    def tensors(self) -> Mapping[str, TensorState]:
        """The tensors' states by name, in order (a read-only view)."""
        if self._drafts:
            for name in list(self._drafts):
                self.state(name)
        return self._view

    def __contains__(self, name: str) -> bool:
        return name in self._states

    def names(self) -> list[str]:
        return list(self._states)

    def state(self, name: str) -> TensorState:
        """Tensor ``name``'s state as of now (KeyError if there is none)."""
        state = self._states[name]
        draft = self._drafts.pop(name, None)
        if draft is not None:
            state = self._states[name] = replace(state, fragments=tuple(draft))
        return state

    def schema(self, name: str) -> TensorSchema:
        """What samples of tensor ``name`` are checked against (KeyError if there is none)."""
        schema = self._schemas.get(name)
        if schema is None:
            schema = self._schemas[name] = TensorSchema.of(self._states[name])
        return schema

    # -- explicit updates ------------------------------------------------------------------------
    def _put(self, state: TensorState) -> None:
        name = state.spec.name
        self._drafts.pop(name, None)
        self._schemas.pop(name, None)
        self._states[name] = state
        self.changed.add(name)

    def add(self, state: TensorState) -> None:
        """Add a new tensor (after the others)."""
        self._put(state)
        self._on_change(state.spec.name)

    def drop(self, name: str) -> None:
        self.state(name)
        del self._states[name]
        self._schemas.pop(name, None)
        self.changed.discard(name)
        self._on_change(name)

    def rename(self, old: str, new: str) -> None:
        """Give tensor ``old`` the name ``new``, in its place among the tensors."""
        renamed = {}
        for name in list(self._states):
            state = self.state(name)
            if name == old:
                state = replace(state, spec=replace(state.spec, name=new))
            renamed[new if name == old else name] = state
        self._states = renamed
        self._view = MappingProxyType(renamed)
        self._schemas.pop(old, None)
        self.changed.discard(old)
        self.changed.add(new)
        self._on_change(old)
        self._on_change(new)

    def set_info(self, info: dict[str, Any]) -> None:
        """Replace the dataset's own info (``ds.info``)."""
        self.info = info
        self._on_change(None)

    def append(self, name: str, frag: Fragment) -> None:
        """Append a written run to tensor ``name``, checked by its schema; the first run decides the
        rank of a tensor that has none yet."""
        schema = self.schema(name)
        schema.check_fragment(frag)
        if schema.ndim is None:
            self._set_ndim(name, frag.ndim)
        draft = self._drafts.get(name)
        if draft is None:
            draft = self._drafts[name] = list(self._states[name].fragments)
        append_fragment(draft, frag)
        self.changed.add(name)
        self._on_change(name)

    def set_fragments(self, name: str, fragments: list[Fragment] | tuple[Fragment, ...]) -> None:
        """Make ``fragments`` the whole content of tensor ``name`` (merged where contiguous)."""
        merged: list[Fragment] = []
        for frag in fragments:
            append_fragment(merged, frag)
        self._put(replace(self.state(name), fragments=tuple(merged)))
        self._on_change(name)

    def set_ndim(self, name: str, ndim: int | None) -> None:
        """Record the samples' rank (None: the next samples decide it again)."""
        self._set_ndim(name, ndim)
        self._on_change(name)

    def _set_ndim(self, name: str, ndim: int | None) -> None:
        state = self.state(name)
        if state.ndim != ndim:
            self._put(replace(state, ndim=ndim))

    def set_info_of(self, name: str, info: dict[str, Any]) -> None:
        """Make ``info`` tensor ``name``'s info (its samples' schema, class names included, follows)."""
        self._put(replace(self.state(name), info=info))
        self._on_change(name)

    def reopen_dtype(self, name: str) -> None:
        """Let a generic tensor's dtype be decided again, from all its fragments, at the next commit."""
        state = self.state(name)
        self._put(replace(state, spec=self.schema(name).reopened_spec()))

    def build(self) -> Manifest:
        """The next version's content, frozen (the base's version fields: `Transaction` sets them): a
        generic tensor's dtype is decided here, at its first commit that holds data."""
        tensors = dict(self.tensors)
        for name in self.changed:
            state = tensors[name]
            spec = self.schema(name).decided_spec(state.fragments)
            if spec != state.spec:
                tensors[name] = replace(state, spec=spec)
        return replace(self._base, tensors=tensors, info=self.info)
