"""Saved views and copies: the rows of a dataset or view written as a dataset of their own.

``view.save(dest)`` and ``lc.copy(src, dest)`` read the selected rows and write them into the
destination through its write transaction, like any other write: the same segment writers, fragments
and commits. Encoded samples (PNG, JPEG and WebP images, text, json, masks) are copied as the bytes they
are stored as, never decoded and encoded again: a JPEG in the copy is the same bytes as in the source.

A copy commits every ``checkpoint_interval`` rows with a record of how far it got (an
`lakecompute.datasets.EvalRecord` under a key made of the source's location, version and rows, as an
eval's). Run the same copy again after a failure or a kill and it continues after the last checkpoint;
run it after it completed and it writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.datasets._core import core_of
from lakecompute.datasets._dataset import Dataset
from lakecompute.datasets._evals import evals_of
from lakecompute.datasets._lifecycle import PathLike, check_apart, empty, is_dataset, load
from lakecompute.datasets._records import EvalRecord
from lakecompute.datasets._views import DatasetView, base_dataset
from lakecompute.errors import DatasetExistsError, InvalidArgumentError, InvalidTypeError, warn
from lakecompute.htypes import Encoded
from lakecompute.parsing import parse_count, parse_flag
from lakecompute.progress import progress_bar
from lakecompute.storage import open_backend

if TYPE_CHECKING:
    from lakecompute.datasets._reader import ColumnReader
    from lakecompute.datasets._transaction import Transaction

__all__ = ["COPY_ROWS", "CopyPlan", "copy"]

#: Rows read and written at a time (each tensor's buffer is written out every 16 MiB besides).
_BLOCK = 1024
#: Rows between checkpoints when ``checkpoint_interval`` is not given.
COPY_ROWS = 16_384


class CopyPlan:
    """What a copy reads: a committed version of a dataset, some of its rows, all its tensors.

    Args:
        data: the dataset or view to copy (its pending changes must be committed).

    Raises:
        InvalidArgumentError: ``data`` has uncommitted changes.
    """

    def __init__(self, data: Dataset | DatasetView) -> None:
        self.base = base_dataset(data)
        if self.base.has_pending_changes:
            raise InvalidArgumentError(
                f"Dataset {self.base.path!r} has uncommitted changes, which a copy would not hold. Commit "
                "them first (leave the `with` block or call ds.commit())."
            )
        n = len(self.base)
        view = data if isinstance(data, DatasetView) else None
        self.positions: range | np.ndarray = view.positions if view is not None else range(n)
        self.names = tuple(view.keys() if view is not None else core_of(self.base).names())
        #: The objects the view keeps of each row (filter_labels): those tensors are re-encoded.
        self.objects = view.kept_objects if view is not None else None
        self.identity = {
            "dataset": core_of(self.base).dataset_id,
            "path": self.base.location.url,
            "version": self.base.version,
            "digest": self.base.digest,
            "rows": _rows_key(self.positions),
            "tensors": list(self.names),
        }
        if view is not None and view.selected_by:
            # How the view was selected, with the version above that it was evaluated on (ds.log()).
            self.identity["query"] = list(view.selected_by)
        if self.objects is not None:
            self.identity["objects"] = self.objects.describe()
        blob = json.dumps(self.identity, sort_keys=True).encode()
        self.key = "copy-" + hashlib.sha256(blob).hexdigest()[:40]
        self.label = f"copy of {self.base.path} v{self.base.version}"
        if view is not None and view.selected_by:  # what the log shows: the selection and where it was made
            self.label += f" where {' | '.join(view.selected_by)}"
        self._base_version = 0

    def __len__(self) -> int:
        return len(self.positions)

    # -- the destination ---------------------------------------------------------------------------
    def progress_in(self, out: Dataset) -> EvalRecord | None:
        """The record of this copy in ``out`` when ``out``'s newest version is one of its checkpoints (or
        its end), else None."""
        record = evals_of(out).record(self.key)
        return record if record is not None and record.version == out.version else None

    def prepare(self, out: Dataset) -> None:
        """Give a fresh ``out`` (no samples, no eval records) the source's tensors and info, in one commit.

        Raises:
            DatasetExistsError: ``out`` holds samples or other data (pass ``overwrite=True``).
            InvalidArgumentError: ``out`` has tensors that differ from the source's.
        """
        if any(len(t) for t in out.tensors.values()) or evals_of(out).records():
            raise DatasetExistsError(out.path)
        theirs = dict(out.tensors)
        mine = {name: self.base.tensors[name] for name in self.names}  # a column view's tensors only
        if theirs and _specs(out) != _specs(self.base, self.names):
            raise InvalidArgumentError(
                f"Cannot copy into {out.path!r}: its tensors {_specs(out)!r} differ from the source's "
                f"{_specs(self.base, self.names)!r}. Copy into a new path, or pass overwrite=True."
            )
        with out:
            for name, tensor in mine.items():
                if name not in theirs:
                    out.create_tensor_like(name, tensor)
            if dict(self.base.info) and not dict(out.info):
                out.info.update(dict(self.base.info))
            out.commit(f"create tensors like {self.base.path}")

    # -- copying -----------------------------------------------------------------------------------
    def run(
        self, out: Dataset, resume: EvalRecord | None, checkpoint_interval: int, progressbar: bool
    ) -> None:
        """Copy the rows into ``out`` (after those ``resume``, the record of an unfinished run of this copy,
        says are done), committing every ``checkpoint_interval`` rows and at the end.

        Raises:
            ReadOnlyError: ``out`` cannot write.
            DatasetCorruptError: the source's stored data is damaged (the copy keeps its checkpoints).
        """
        core = core_of(out)
        core.check_writable()
        txn = core.txn
        start = resume.done if resume is not None else 0
        # The version before the copy began: what `rerun=True` of another eval goes back to.
        self._base_version = resume.base_version if resume is not None else txn.base.version
        src = core_of(self.base)
        readers = {name: src.reader(name) for name in self.names}
        bar = progress_bar(len(self), self.label, unit="row", enabled=progressbar, initial=start)
        since = 0
        block = min(_BLOCK, checkpoint_interval)
        try:
            for a in range(start, len(self), block):
                b = min(len(self), a + block)
                rows = np.asarray(self.positions[a:b], dtype=np.int64)
                for name, reader in readers.items():
                    objects = self.objects
                    if objects is None or objects.group(name) is None:
                        txn.write(name, _stored(txn, name, reader, rows))
                    else:  # some of the objects left out: the samples are stored anew
                        kept = objects.samples(name, range(a, b), reader.read_at(rows, stack="fragments"))
                        txn.write(name, txn.encode_many(name, kept))
                since += b - a
                if since >= checkpoint_interval or b == len(self):
                    self._commit(txn, b)
                    since = 0
                bar.update(b - a)
            if start >= len(self):
                self._commit(txn, len(self))  # nothing to copy: the record says it is done
        except BaseException:
            txn.rollback()  # the checkpoints stay
            raise
        finally:
            bar.close()

    def _commit(self, txn: Transaction, done: int) -> None:
        complete = done == len(self)
        record = EvalRecord(
            fingerprint=self.key,
            status="done" if complete else "running",
            done=done,
            outputs=dict.fromkeys(self.names, done),
            base_version=self._base_version,
            label=self.label,
            job=self.key,
        )
        what = "" if complete else f": checkpoint at {done}"
        txn.commit(f"{self.label}{what}", record, {"op": "copy", "inputs": self.identity})


def _specs(
    ds: Dataset, names: tuple[str, ...] | None = None
) -> list[tuple[str, str, str | None, str | None]]:
    """Each tensor's name, htype, dtype and sample compression (of ``names`` only, when given): what a
    copy's rows must fit."""
    return [
        (n, t.htype, None if t.dtype is None else str(t.dtype), t.sample_compression)
        for n, t in ds.tensors.items()
        if names is None or n in names
    ]


def _stored(txn: Transaction, name: str, reader: ColumnReader, rows: np.ndarray) -> Any:
    """Rows ``rows`` of a tensor as they are stored: encoded blobs as they are, numbers as arrays."""
    if reader.spec.kind == "bytes":
        blobs: list[Encoded] = reader.read_encoded_at(rows)
        return blobs
    return txn.encode_many(name, reader.read_at(rows, stack="fragments"))


def _rows_key(positions: range | np.ndarray) -> str:
    if isinstance(positions, range):
        return f"range({positions.start}, {positions.stop}, {positions.step})"
    digest = hashlib.sha256(np.ascontiguousarray(positions, dtype=np.int64).tobytes()).hexdigest()
    return f"rows:{len(positions)}:{digest[:32]}"


def copy(
    src: Dataset | DatasetView | PathLike,
    dest: PathLike,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    progressbar: bool = True,
    checkpoint_interval: int | None = None,
) -> Dataset:
    """Write the rows of ``src`` (a dataset, a view such as ``ds.filter(...)`` or ``ds[::10]``, or a
    dataset's path) as a new dataset at ``dest``; returns it. ``view.save(dest)`` is the same.

    The copy has the source's tensors (htypes, dtypes, compressions, class names, info) and the
    dataset's info, and one version of history: its rows are the source's committed version, in the
    view's order. Encoded samples (PNG, JPEG, WebP images, text, json) are copied as the bytes they are
    stored as, not decoded and encoded again. Every ``checkpoint_interval`` rows (default 16,384) the
    copy commits with a record of its progress: after a failure or a kill, the same call continues
    after the last checkpoint; after it completed, it writes nothing.

    Args:
        src: what to copy.
        dest: where the new dataset goes (a path, ``mem://name`` or ``s3://bucket/prefix``).
        overwrite: replace what is at ``dest`` (an unfinished copy there included).
        storage_options: options for ``dest``'s object-store client (a path ``src`` uses them too).
        progressbar: show a progress bar of the rows copied.
        checkpoint_interval: rows between checkpoints.

    Raises:
        DatasetExistsError: ``dest`` holds a dataset that is not an unfinished copy of the same rows.
        InvalidArgumentError: ``src`` is ``dest``, has uncommitted changes, or bad options.

    Example:
        >>> ds = lc.from_numpy("mem://copy-doc", {"x": [5, 6, 7, 8]}, overwrite=True)
        >>> small = lc.copy(ds[[3, 1]], "mem://copy-doc-small", overwrite=True, progressbar=False)
        >>> small.x.numpy().tolist()
        [8, 6]
    """
    interval = parse_count(
        "checkpoint_interval", COPY_ROWS if checkpoint_interval is None else checkpoint_interval, 1
    )
    progressbar = parse_flag("progressbar", progressbar)
    data = (
        src
        if isinstance(src, (Dataset, DatasetView))
        else load(src, read_only=True, storage_options=storage_options)
    )
    if not isinstance(data, (Dataset, DatasetView)):
        raise InvalidTypeError(f"Expected a Dataset, a view or a path to copy. Got {type(src).__name__}.")
    plan = CopyPlan(data)
    out, resume = _copy_destination(plan, dest, overwrite, storage_options)
    if resume is not None and resume.complete:
        warn(f"{plan.label} already completed into {out.path!r} (version {out.version}); nothing was copied.")
        return out
    plan.run(out, resume, interval, progressbar)
    return out


def _copy_destination(
    plan: CopyPlan, dest: PathLike, overwrite: bool, storage_options: dict[str, Any] | None
) -> tuple[Dataset, EvalRecord | None]:
    """The dataset a copy writes into, and the record of an earlier run of the same copy there (finished
    or to resume), if any."""
    backend = open_backend(dest, storage_options)
    check_apart(backend, base_dataset(plan.base), "copy")
    if is_dataset(backend) and not overwrite:
        out = load(dest, storage_options=storage_options)
        record = plan.progress_in(out)
        if record is not None:
            return out, record
    else:
        out = empty(dest, overwrite=overwrite, storage_options=storage_options)
    plan.prepare(out)
    return out, None
