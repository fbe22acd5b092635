"""Datasets: a handle on a versioned collection of tensors.

A `Dataset` reads one committed version (its *base*) and keeps a working copy (its *head*)
that writes change. Both live in the handle's `Transaction`, held by its `DatasetCore` with the
backend, chunk cache and column readers; the transaction is the only way anything is committed.
Writes go to this handle's own segments — nobody else writes there — and become visible to others
only when the head is committed as the next version. Outside a ``with ds:`` block every top-level
write call commits; inside one, the block commits once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.datasets._core import DatasetCore, core_of
from lakecompute.datasets._head import Checkout
from lakecompute.datasets._index import parse_index
from lakecompute.datasets._info import DatasetInfo, parse_info
from lakecompute.datasets._tensor import Tensor
from lakecompute.datasets._transaction import block_message
from lakecompute.datasets._vcs import VersionControl
from lakecompute.datasets._views import DatasetView, Row, _Samples, column_list
from lakecompute.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    TensorDoesNotExistError,
    TensorExistsError,
)
from lakecompute.htypes import CLASS_NAMED_HTYPES, check_new_tensor_name, parse_htype_info, parse_tensor_spec
from lakecompute.storage import Backend, BackendSpec, open_backend
from lakecompute.versioned import DEFAULT_BRANCH, Manifest, Table, TensorState

if TYPE_CHECKING:
    from lakecompute.datasets._upward import Viewer

__all__ = ["Dataset"]


class Dataset(_Samples, VersionControl):
    """A lakecompute dataset. Create or open one with `lc.empty`, `lc.load` or `lc.dataset`."""

    def __init__(
        self,
        backend: Backend,
        manifest: Manifest,
        *,
        read_only: bool = False,
        pinned: bool = False,
        checkout: Checkout | None = None,
    ) -> None:
        table = Table(backend)
        if checkout is None and not pinned:
            # Opened at ``manifest`` as main's head (the refs as they are now: None before branches).
            checkout = Checkout(DEFAULT_BRANCH, table.branch(DEFAULT_BRANCH))
        # Everything the handle's tensors, views, readers and maintenance share (see DatasetCore).
        self._core = DatasetCore(table, manifest, read_only=read_only, pinned=pinned, checkout=checkout)

    # -- identity ------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The location as given when the dataset was opened."""
        return self._core.path

    @property
    def location(self) -> BackendSpec:
        """Where the dataset lives: its path and storage options, enough to open it in another process."""
        return self._core.backend.spec

    @property
    def version(self) -> int:
        """The committed version this handle reads (and builds on)."""
        return self._core.version

    @property
    def id(self) -> str:
        """The dataset's identity: a random id made when it was created and kept by all its versions.

        Overwriting or recreating the path makes a new one, so ``(id, version)`` names one content where
        ``(path, version)`` names only a place. Evals, pickled handles and loader states check it.
        """
        return self._core.dataset_id

    @property
    def digest(self) -> str:
        """A digest of the content of the version this handle reads (its tensors' fragments, specs and
        info, its eval records and ``ds.info``): 64 hex digits, recorded when the version was committed.

        ``(id, version)`` names a place in one dataset's history; the digest says which content is there.
        A copy of the folder (``cp -r``) keeps the id, the versions and their digests, so it reads as the
        same data; once a commit on the copy and one on the original give the same version number other
        content, their digests differ, and evals, pickled handles, snapshots and loader states tell the
        two apart. (``lc.copy`` gives a copy its own id.)
        """
        return self._core.txn.base.digest

    @property
    def read_only(self) -> bool:
        return self._core.read_only

    @property
    def branch(self) -> str | None:
        """The branch this handle is on: its writes, evals, restores and merges move it. None for a handle
        opened at a version (``lc.load(path, version=...)``), which reads that version only."""
        return self._core.branch

    @property
    def branches(self) -> list[str]:
        """Every branch of the dataset, sorted (``"main"`` always among them)."""
        return self._core.table.branches()

    @property
    def tags(self) -> dict[str, int]:
        """Every tag of the dataset: name -> the version it names."""
        return self._core.table.tags()

    def _base_ds(self) -> Dataset:
        return self

    @property
    def tensors(self) -> dict[str, Tensor]:
        """Tensors by name, in creation order."""
        return {name: Tensor(self, name) for name in self._core.txn.head.tensors}

    def __len__(self) -> int:
        """The length of the shortest tensor (0 without tensors)."""
        txn = self._core.txn
        return min((txn.length(n) for n in txn.head.tensors), default=0)

    @property
    def max_len(self) -> int:
        """The length of the longest tensor."""
        txn = self._core.txn
        return max((txn.length(n) for n in txn.head.tensors), default=0)

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            self._core.state(key)
            return Tensor(self, key)
        columns = column_list(key)
        if columns is not None:  # a column view: ds[["labels", "boxes"]]
            shortest = min(self._core.length(name) for name in columns)  # each name checked
            return DatasetView(self, range(shortest), columns)
        pos = parse_index(key, len(self))
        if isinstance(pos, int):
            return Row(self, pos)
        return DatasetView(self, pos)

    def __iter__(self) -> Iterator[Row]:
        for i in range(len(self)):
            yield Row(self, i)

    # -- transactions --------------------------------------------------------------------------
    def __enter__(self) -> Dataset:
        self.check_writable()
        self._core.txn.depth += 1
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        txn = self._core.txn
        txn.depth -= 1
        if txn.depth:
            return
        if exc_type is not None:
            self.rollback()
            return
        try:
            txn.commit(block_message(txn.notes))
        except BaseException:
            self.rollback()  # a failed commit (disk full, conflict) keeps none of the block's writes
            raise

    def check_writable(self) -> None:
        """Raise `ReadOnlyError`, saying why and what to do, unless this handle can write."""
        self._core.check_writable()

    def rollback(self) -> None:
        """Drop every uncommitted change (what ``with ds:`` does when its block raises)."""
        self._core.txn.rollback()

    def commit(self, message: str = "commit") -> int:
        """Commit pending changes now (inside ``with``, or before an eval); returns the version.

        Does nothing when nothing is pending.
        """
        self.check_writable()
        self._core.txn.commit(message)
        return self.version

    @property
    def has_pending_changes(self) -> bool:
        """Whether this handle holds writes that are not committed yet (inside ``with``, say)."""
        return self._core.txn.pending

    # -- schema --------------------------------------------------------------------------------
    def create_tensor(
        self,
        name: str,
        htype: str | None = None,
        dtype: Any = None,
        sample_compression: str | None = None,
        chunk_compression: str | None = "default",
        class_names: Sequence[str] | None = None,
        **info: Any,
    ) -> Tensor:
        """Add a tensor.

        Args:
            name: letters, digits, ``_`` and ``-``, at most 128 characters, not starting with ``-``.
            htype: ``generic`` (default), ``image``, ``class_label``, ``embedding``, ``text``, ``json``,
                or for detection and segmentation ``bbox``, ``binary_mask``, ``segment_mask``,
                ``keypoints``, ``polygon`` (see docs/detection.md).
            dtype: a numpy dtype; implied by image (uint8), class_label (uint32), embedding (float32).
            sample_compression: ``png``, ``jpeg`` or ``webp`` for images.
            chunk_compression: ``zstd``, ``lz4``, ``gzip`` or None (uncompressed); the default is zstd
                for numeric tensors and none for encoded images, text and json.
            class_names: label names for ``class_label`` and ``segment_mask`` tensors.
            **info: extra JSON-serialisable information kept in ``tensor.info``; for ``bbox``
                tensors ``format`` (``"xyxy"``, ``"xywh"``, ``"cxcywh"``) and ``normalized``, for
                ``keypoints`` tensors ``keypoint_names`` and ``skeleton``.

        Raises:
            TensorExistsError: the name is taken.
            InvalidArgumentError: a bad name, htype, dtype or compression.
        """
        with self._core.write(f"create tensor {name}"):
            check_new_tensor_name(name)
            if name in self._core.txn.head.tensors:
                raise TensorExistsError(name)
            spec = parse_tensor_spec(name, htype, dtype, sample_compression, chunk_compression)
            meta: dict[str, Any] = dict(info)
            if class_names is not None:
                if not spec.declaration.class_named:
                    raise InvalidArgumentError(
                        f"class_names is for htypes {list(CLASS_NAMED_HTYPES)!r}; tensor {name!r} has "
                        f"htype {spec.htype!r}."
                    )
                names = list(class_names)
                if not all(isinstance(c, str) for c in names) or len(set(names)) != len(names):
                    raise InvalidArgumentError(f"class_names must be distinct strings. Got {names!r}.")
                meta["class_names"] = names
            elif spec.declaration.class_names == "always":
                meta["class_names"] = []
            info = parse_htype_info(spec, meta)
            self._core.txn.head.add(TensorState(spec, info, tid=uuid.uuid4().hex))
        return Tensor(self, name)

    def create_tensor_like(self, name: str, source: Tensor) -> Tensor:
        """Add a tensor with the same htype, dtype, compression and info as ``source``."""
        state = core_of(source).state(source.name)
        spec = state.spec
        dtype = spec.dtype if spec.declaration.numeric else None
        info = {k: v for k, v in state.info.items() if k != "class_names"}
        return self.create_tensor(
            name,
            htype=spec.htype,
            dtype=dtype,
            sample_compression=spec.sample_compression,
            chunk_compression=spec.chunk_compression,
            class_names=state.info.get("class_names") if spec.declaration.class_named else None,
            **info,
        )

    def rename_tensor(self, name: str, new_name: str) -> Tensor:
        """Rename a tensor (older versions keep the old name); its data is not copied.

        Raises:
            TensorDoesNotExistError: there is no tensor ``name``.
            TensorExistsError: ``new_name`` is taken.
            InvalidArgumentError: ``new_name`` is not a valid tensor name.
        """
        with self._core.write(f"rename tensor {name} to {new_name}"):
            self._core.state(name)
            check_new_tensor_name(new_name)
            if new_name in self._core.txn.head.tensors:
                raise TensorExistsError(new_name)
            self._core.txn.rename_tensor(name, new_name)
        return Tensor(self, new_name)

    @property
    def info(self) -> DatasetInfo:
        """The dataset's own metadata: JSON values by key, versioned with the data.

        ``ds.info["source"] = "COCO val2017"`` and ``ds.info.update(license="CC-BY")`` commit (or join the
        ``with`` block); ``ds.info.source`` reads. Tensor metadata is ``ds.<tensor>.info``.
        """
        return DatasetInfo(self._core.txn.head.info, self._update_info)

    def _update_info(self, changes: dict[str, Any], deleted: tuple[str, ...]) -> dict[str, Any]:
        """Commit ``changes`` (and the removal of ``deleted`` keys) to the info as it is now; returns it."""
        with self._core.write("update info"):
            current = self._core.txn.head.info
            info = parse_info(
                {k: v for k, v in current.items() if k not in deleted} | changes, "Dataset info"
            )
            self._core.txn.head.set_info(info)
        return info

    def delete_tensor(self, name: str) -> None:
        """Remove a tensor from the next version (older versions keep it)."""
        with self._core.write(f"delete tensor {name}"):
            self._core.state(name)
            self._core.txn.drop_tensor(name)

    # -- writing -------------------------------------------------------------------------------
    def _check_keys(self, keys: Sequence[str], skip_ok: bool, what: str) -> None:
        head = self._core.txn.head
        unknown = [k for k in keys if k not in head.tensors]
        if unknown:
            raise TensorDoesNotExistError(unknown[0], self._core.names())
        given = set(keys)
        missing = [k for k in head.tensors if k not in given]
        if missing and not skip_ok:
            raise InvalidArgumentError(
                f"{what} is missing tensors {missing!r} (it has {sorted(keys)!r}). "
                "Give a value for every tensor, or pass skip_ok=True to leave the others short."
            )

    def append(self, sample: Mapping[str, Any], skip_ok: bool = False) -> None:
        """Append one sample: ``{"images": array, "labels": 0}``."""
        if not isinstance(sample, Mapping):
            raise InvalidTypeError(f"Expected a dict of tensor name -> value. Got {type(sample).__name__}.")
        with self._core.write("append"):
            self._check_keys(list(sample), skip_ok, "append()")
            # Check every value before buffering any, so a bad value leaves nothing half-appended.
            txn = self._core.txn
            checked = [(k, txn.encode(k, v)) for k, v in sample.items()]
            for name, enc in checked:
                txn.write(name, enc)

    def extend(self, samples: Mapping[str, Any], skip_ok: bool = False) -> None:
        """Append many samples: ``{"images": [a, b], "labels": [0, 1]}`` (lists or stacked arrays)."""
        if not isinstance(samples, Mapping):
            raise InvalidTypeError(
                f"Expected a dict of tensor name -> list of values. Got {type(samples).__name__}."
            )
        with self._core.write("extend"):
            self._check_keys(list(samples), skip_ok, "extend()")
            samples = {k: _as_sequence(k, v) for k, v in samples.items()}
            lengths = {k: len(v) for k, v in samples.items()}
            if len(set(lengths.values())) > 1:
                raise InvalidArgumentError(
                    f"extend() needs the same number of samples for every tensor. Got {lengths}."
                )
            txn = self._core.txn
            checked = [(k, txn.encode_many(k, v)) for k, v in samples.items()]
            for name, enc in checked:
                txn.write(name, enc)

    # -- display ---------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        from lakecompute.datasets._upward import (
            dataset_html,  # the notebook view: summary table and thumbnails
        )

        return dataset_html(self)

    def view(
        self,
        expr: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        open_browser: bool | None = None,
    ) -> Viewer:
        """Open this dataset in the viewer (docs/viewer.md): the version this handle reads, or its
        branch's newest version. In a notebook the viewer shows in an inline frame; in a script it opens
        the browser (unless ``open_browser=False``). Call ``.stop()`` on the returned handle to stop it,
        or ``.wait()`` to serve until Ctrl-C (a script's last line).

        Args:
            expr: an expression (API.md §7) the first page opens with.
            host: the address to bind; other than loopback warns (anyone who can reach it reads the data).
            port: the port (0: any free one).
            open_browser: open the browser (default: yes, unless in a notebook).

        Returns:
            The running `lakecompute.viewer.Viewer`, with ``.url``, ``.stop()`` and ``.wait()``.
        """
        from lakecompute.datasets._upward import serve  # the viewer sits above the dataset layer

        spec = self.location
        branch = self.branch
        return serve(
            spec.url,
            version=self.version if branch is None else None,
            branch=branch,
            storage_options=dict(spec.storage_options) or None,
            host=host,
            port=port,
            open_browser=open_browser,
            expr=expr,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as where it lives and the version it reads, reopened on unpickling (in another process
        too: ``torch.multiprocessing.spawn``, Lightning's ``ddp_spawn``, a Ray task). Nothing of the data
        travels. A handle with uncommitted writes refuses: they exist only in this process.
        """
        if self.has_pending_changes:
            raise InvalidArgumentError(
                f"Dataset {self.path!r} has uncommitted changes, which cannot travel to another process. "
                "Commit them first (leave the `with` block or call ds.commit()), then pickle it."
            )
        spec = self.location
        core = self._core
        where = core.txn.checkout
        args = (spec.url, dict(spec.storage_options), self.version, core.opened_read_only, core.pinned, where)
        disk = core.backend.disk
        cache = None if disk is None else (disk.directory, disk.max_bytes)
        return (_reopen, (*args, core.dataset_id, core.txn.base.digest, cache))

    def __repr__(self) -> str:
        mode = ", read_only=True" if self._core.read_only else ""
        branch = self._core.branch
        on = f", branch={branch!r}" if branch not in (None, DEFAULT_BRANCH) else ""
        return (
            f"Dataset(path={self.path!r}, version={self.version}{on}, tensors={self._core.names()!r}, "
            f"samples={len(self)}{mode})"
        )


def _reopen(
    url: str,
    storage_options: dict[str, Any],
    version: int,
    read_only: bool,
    pinned: bool,
    checkout: Checkout | None = None,
    dataset_id: str = "",
    digest: str = "",
    cache: tuple[str, int] | None = None,
) -> Dataset:
    """A pickled `Dataset`, opened again at the version it read, on its branch (`Dataset.__reduce__`).

    Raises:
        DatasetReplacedError: another dataset was made at ``url`` since the handle was pickled, or the
            folder was replaced by a copy whose version holds other content (``digest``).
    """
    folder, size = cache if cache is not None else (None, None)
    backend = open_backend(url, storage_options, cache_dir=folder, cache_size=size)
    table = Table(backend)
    manifest = (
        table.manifest_of(version, dataset_id, "the pickled handle", digest=digest)
        if dataset_id
        else table.manifest(version)
    )
    return Dataset(backend, manifest, read_only=read_only, pinned=pinned, checkout=checkout)


def _as_sequence(name: str, values: Any) -> Any:
    """``values`` if it has a length, a list of it if it is another iterable (a generator)."""
    if isinstance(values, (str, bytes, Mapping)) or (isinstance(values, np.ndarray) and values.ndim == 0):
        pass
    elif hasattr(values, "__len__"):
        return values
    elif isinstance(values, Iterable):
        return list(values)
    raise InvalidTypeError(
        f"extend() takes a sequence of samples for each tensor. Got {type(values).__name__} for {name!r}; "
        "use append() for one sample."
    )
