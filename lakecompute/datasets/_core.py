"""The dataset core: what one dataset handle's parts share, in one object.

A `lakecompute.Dataset` is the public handle; its tensors, views, rows, readers and maintenance all
work on the same backend, chunk cache, write transaction and column readers. `DatasetCore` holds
those, and every module of the package reaches them through it by public names, never through the
handle's private attributes. The handle builds its core when it is opened; tensors, views and rows
made from the handle share it, and the functions that receive a dataset (readers, ``compact``,
``vacuum``, `snapshot`) find it with `core_of`.

Tests reach internals the same way, through ``lakecompute.testing.dataset_core``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from lakecompute.datasets._head import Checkout
from lakecompute.datasets._transaction import Transaction
from lakecompute.errors import ReadOnlyError, TensorDoesNotExistError
from lakecompute.storage import Backend
from lakecompute.versioned import Manifest, Table, TensorState

if TYPE_CHECKING:
    from lakecompute.datasets._reader import ColumnReader

__all__ = ["DatasetCore", "HasCore", "core_of"]


class DatasetCore:
    """The internals of one dataset handle, shared by its tensors, views, rows, readers and maintenance.

    One per `lakecompute.Dataset` handle (a pickled handle opens a new one); not thread-safe, like
    the handle. Writes go through `write`, reads of a tensor through `reader`.

    Attributes:
        table: the dataset's versioned table (its versions, refs and commits; `lakecompute.versioned.Table`).
        cache: the handle's one chunk cache: every read, and the arrays writes create, go through it.
        txn: the write transaction: the committed version read (``txn.base``), the working copy that
            writes change (``txn.head``), the pending samples, and commits.
        read_only: whether the handle refuses writes (opened read-only, or ``pinned``).
        pinned: whether the handle was opened at an old version (``version=``), which stays read-only.
        readers: a column reader per tensor read since its state last changed (see `reader`).
    """

    def __init__(
        self,
        table: Table,
        manifest: Manifest,
        *,
        read_only: bool,
        pinned: bool,
        checkout: Checkout | None,
    ) -> None:
        self.table = table
        self.cache = table.chunk_cache()
        self.opened_read_only = read_only
        self.read_only = read_only or pinned
        self.pinned = pinned
        self.readers: dict[str, ColumnReader] = {}
        self.txn = Transaction(table, self.cache, manifest, self.forget_reader, None if pinned else checkout)
        # A remote dataset opened with cache_dir= reads its chunks through the local disk cache, by what
        # the working copy uses of each (written samples included).
        if table.backend.disk is not None:
            table.read_through_disk(self.cache, self.dataset_id, self._states)

    def _states(self) -> tuple[TensorState, ...]:
        head = self.txn.head
        return tuple(head.state(name) for name in head.tensors)

    # -- what the handle reads -------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        """Where the dataset lives (its path, storage options, how its bytes are stored)."""
        return self.table.backend

    @property
    def path(self) -> str:
        """The location as given when the dataset was opened."""
        return self.backend.url

    @property
    def version(self) -> int:
        """The committed version the handle reads (and builds on)."""
        return self.txn.base.version

    @property
    def branch(self) -> str | None:
        """The branch the handle is on (its commits move it); None when pinned to a version."""
        checkout = self.txn.checkout
        return None if checkout is None else checkout.name

    def move(self, checkout: Checkout | None, base: Manifest) -> None:
        """Put the handle on branch ``checkout`` at ``base`` (``None``: pinned to ``base``, read-only);
        uncommitted changes are dropped, cached chunks kept (stored data never changes)."""
        self.pinned = checkout is None
        self.read_only = self.opened_read_only or self.pinned
        self.txn.checkout = checkout
        self.txn.reset(base)

    @property
    def dataset_id(self) -> str:
        """The dataset's id: made when it was created, the same in every version."""
        return self.txn.dataset_id

    def names(self) -> list[str]:
        """The tensors' names in the working copy, in creation order."""
        return list(self.txn.head.tensors)

    def state(self, name: str) -> TensorState:
        """Tensor ``name`` as the working copy has it.

        Raises:
            TensorDoesNotExistError: there is no such tensor (naming the ones there are).
        """
        try:
            return self.txn.head.state(name)
        except KeyError:
            raise TensorDoesNotExistError(name, self.names()) from None

    def length(self, name: str) -> int:
        """Samples of tensor ``name``, pending ones included.

        Raises:
            TensorDoesNotExistError: there is no such tensor.
        """
        self.state(name)
        return self.txn.length(name)

    def reader(self, name: str) -> ColumnReader:
        """The reader of tensor ``name``: its pending samples are written out first, so it reads them
        too; kept until the tensor's state changes (the transaction calls `forget_reader`).

        Raises:
            TensorDoesNotExistError: there is no such tensor.
        """
        if self.txn.session.pending(name):
            self.txn.flush(name)
        reader = self.readers.get(name)
        if reader is None:
            # Imported here: the reader module builds on this one (RowReader finds a dataset's core).
            from lakecompute.datasets._reader import ColumnReader

            reader = self.readers[name] = ColumnReader(self.state(name), self.cache)
        return reader

    def forget_reader(self, name: str | None) -> None:
        """Drop the reader of ``name`` (of every tensor with None): its state changed."""
        if name is None:
            self.readers.clear()
        else:
            self.readers.pop(name, None)

    # -- writing ---------------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Raise `ReadOnlyError`, saying why and what to do, unless the handle can write."""
        if self.pinned:
            raise ReadOnlyError(
                f"Version {self.version} of {self.path!r} was opened with lc.load(path, "
                f"version={self.version}), and old versions are read-only. "
                "Open the latest with lc.load(path) to write, or start a branch from this version with "
                "ds.checkout(name, create=True)."
            )
        if self.read_only:
            raise ReadOnlyError(
                f"Dataset {self.path!r} was opened read-only. Open it with lc.load(path) to write."
            )

    @contextlib.contextmanager
    def write(self, message: str) -> Iterator[None]:
        """One top-level write call: its own commit outside ``with ds:``, part of the block inside.

        A write that raises outside a block leaves nothing behind (the transaction rolls back).

        Raises:
            ReadOnlyError: the handle cannot write.
        """
        self.check_writable()
        if self.txn.depth:
            yield
            self.txn.notes.append(message)  # for the block's commit message
            return
        self.txn.depth = 1
        try:
            yield
            self.txn.commit(message)
        except BaseException:
            self.txn.rollback()
            raise
        finally:
            self.txn.depth = 0


class HasCore:
    """Anything that works on a dataset through its core: datasets, views, rows, tensors."""

    _core: DatasetCore


def core_of(data: HasCore) -> DatasetCore:
    """The core of a dataset handle, or of the handle a view, row or tensor belongs to."""
    return data._core
