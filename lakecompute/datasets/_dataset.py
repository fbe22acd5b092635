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
from lakecompute.datasets._eval_write import EvalWrite
from lakecompute.datasets._head import Checkout, checkout_of
from lakecompute.datasets._index import parse_index
from lakecompute.datasets._info import DatasetInfo, parse_info
from lakecompute.datasets._records import EvalRecord
from lakecompute.datasets._tensor import Tensor
from lakecompute.datasets._views import DatasetView, Row, _Samples
from lakecompute.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    TensorDoesNotExistError,
    TensorExistsError,
)
from lakecompute.htypes import CLASS_NAMED_HTYPES, check_new_tensor_name, parse_htype_info, parse_tensor_spec
from lakecompute.storage import (
    DEFAULT_BRANCH,
    Backend,
    BackendSpec,
    Manifest,
    TensorState,
    list_branches,
    open_backend,
    read_branch,
    read_manifest,
    read_manifest_of,
)

if TYPE_CHECKING:
    from lakecompute.datasets._diff import VersionDiff

__all__ = ["Dataset"]


class Dataset(_Samples):
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
        if checkout is None and not pinned:
            # Opened at ``manifest`` as main's head (the refs as they are now: None before branches).
            checkout = Checkout(DEFAULT_BRANCH, read_branch(backend, DEFAULT_BRANCH))
        # Everything the handle's tensors, views, readers and maintenance share (see DatasetCore).
        self._core = DatasetCore(backend, manifest, read_only=read_only, pinned=pinned, checkout=checkout)

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
        return list_branches(self._core.backend)

    @property
    def tags(self) -> dict[str, int]:
        """Every tag of the dataset: name -> the version it names."""
        from lakecompute.datasets._versions import tags

        return tags(self)

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
            txn.commit(txn.block_message())
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

    # -- for the transform engine --------------------------------------------------------------
    def eval_records(self) -> dict[str, EvalRecord]:
        """The records of the evals that committed this version, by fingerprint (see ``EvalRecord``);
        earlier evals are found with `eval_record`.

        Raises:
            DatasetCorruptError: a record in the version's manifest is malformed.
        """
        return self._core.txn.records()

    def eval_record(self, fingerprint: str) -> EvalRecord | None:
        """The record of eval ``fingerprint`` as this version remembers it (committed here or before).

        Raises:
            DatasetCorruptError: the record is malformed.
        """
        return self._core.txn.find_record(fingerprint)

    def begin_eval(
        self,
        fingerprint: str | None,
        *,
        label: str,
        in_place: bool,
        resume: EvalRecord | None = None,
        job: str = "",
        origin: Mapping[str, Any] | None = None,
    ) -> EvalWrite:
        """Start an eval's writes into this dataset: its part of the write transaction.

        Pending changes must be committed first (``commit()``), so that the eval's commits hold only
        its own outputs. ``origin`` is the lineage every version the eval commits records (its
        functions, the fingerprint of their code, what it read); its commits land on the handle's branch.

        Raises:
            ReadOnlyError: the dataset was opened read-only or at an old version.
        """
        self.check_writable()
        if self._core.txn.pending:
            raise InvalidArgumentError(
                f"Dataset {self.path!r} has uncommitted changes; commit them before starting an eval."
            )
        return self._core.txn.begin_eval(
            fingerprint, label=label, in_place=in_place, resume=resume, job=job, origin=origin
        )

    def drop_unfinished(self, record: EvalRecord) -> int:
        """Drop the kept outputs of the unfinished eval ``record`` (``rerun=True``): commit a version
        equal to the one before it began; returns the new version.

        Raises:
            ReadOnlyError: the dataset was opened read-only or at an old version.
        """
        self.check_writable()
        self._core.txn.restore(record.base_version, f"drop unfinished eval {record.label} (rerun=True)")
        return self.version

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
            self._core.txn.add_tensor(TensorState(spec, info, tid=uuid.uuid4().hex))
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
            self._core.txn.set_info(info)
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

    # -- history and maintenance -----------------------------------------------------------------
    def log(self, all_branches: bool = False) -> list[dict[str, Any]]:
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
        of their code and arguments) and ``inputs`` (what it read: a dataset's location and version).
        """
        from lakecompute.datasets._history import log_entries
        from lakecompute.parsing import parse_flag

        every = parse_flag("all_branches", all_branches)
        return log_entries(self._core.backend, None if every else self.version, self.path)

    def reload(self) -> None:
        """Move this handle to the newest committed version of its branch (drops uncommitted changes); a
        handle opened at a version stays there.

        Raises:
            DatasetReplacedError: the path holds another dataset now (it was overwritten, or deleted and
                created again); the handle keeps reading the version it had.
        """
        core = self._core
        core.cache.clear()
        name = core.branch
        if name is None:
            core.txn.reset(core.txn.base)
            return
        checkout, head = checkout_of(core.backend, name)
        core.move(checkout, read_manifest_of(core.backend, head, core.dataset_id, "this handle"))

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
            >>> import lakecompute as lc
            >>> ds = lc.from_numpy("mem://checkout-doc", {"x": [1, 2]}, overwrite=True)
            >>> ds.checkout("experiment", create=True)
            >>> ds.x.append(3)
            >>> ds.branch, len(ds), len(lc.load("mem://checkout-doc")), ds.branches
            ('experiment', 3, 2, ['experiment', 'main'])
        """
        from lakecompute.datasets._versions import checkout

        checkout(self, name, create)

    def delete_branch(self, name: str) -> None:
        """Delete branch ``name`` (one atomic step). Its versions stay readable by number while another
        branch or a tag reaches them; ``vacuum()`` removes the rest.

        Raises:
            RefNotFoundError: no such branch.
            InvalidArgumentError: ``"main"``, or the branch this handle is on.
        """
        from lakecompute.datasets._versions import delete_branch

        delete_branch(self, name)

    def tag(self, name: str, version: int | str | None = None) -> int:
        """Name a version (by default the one this handle reads): ``lc.load(path, version=name)`` opens
        it, and ``vacuum()`` keeps it. Tags never move. Returns the version tagged.

        Raises:
            RefExistsError: a tag or branch has that name.
            DatasetNotFoundError: no such version.
        """
        from lakecompute.datasets._versions import tag

        return tag(self, name, version)

    def delete_tag(self, name: str) -> None:
        """Delete tag ``name`` (the version stays while a branch or tag reaches it).

        Raises:
            RefNotFoundError: no such tag.
        """
        from lakecompute.datasets._versions import delete_tag

        delete_tag(self, name)

    def restore(self, version: int | str) -> int:
        """Undo: commit a new version, on this branch, whose content equals ``version`` (a number, tag or
        branch): every tensor, the dataset's info, and the evals it remembered. No data is copied, and
        the versions in between stay readable. Returns the new version.

        Raises:
            ReadOnlyError: the handle cannot write.
            InvalidArgumentError: uncommitted changes.
            DatasetNotFoundError: no such version.
        """
        from lakecompute.datasets._versions import restore

        return restore(self, version)

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
        from lakecompute.datasets._versions import diff

        return diff(self, a, b)

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
        from lakecompute.datasets._merge import merge

        return merge(self, source, conflict_resolution)

    def compact(self) -> int:
        """Rewrite every tensor into one fragment (content unchanged); returns the new version."""
        from lakecompute.datasets._maintenance import compact

        return compact(self)

    def vacuum(self, grace_seconds: float = 3600.0, keep_versions: int | None = None) -> dict[str, int]:
        """Remove stored data that no version references (see `lakecompute.datasets.vacuum`)."""
        from lakecompute.datasets._maintenance import vacuum

        return vacuum(self, grace_seconds=grace_seconds, keep_versions=keep_versions)

    # -- display ---------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        from lakecompute.viz import dataset_html  # the notebook view: summary table and thumbnails

        return dataset_html(self)

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
        return (_reopen, (*args, core.dataset_id))

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
) -> Dataset:
    """A pickled `Dataset`, opened again at the version it read, on its branch (`Dataset.__reduce__`).

    Raises:
        DatasetReplacedError: another dataset was made at ``url`` since the handle was pickled.
    """
    backend = open_backend(url, storage_options)
    manifest = (
        read_manifest_of(backend, version, dataset_id, "the pickled handle")
        if dataset_id
        else read_manifest(backend, version)
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
