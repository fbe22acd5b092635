"""The engine's port into an output dataset: its eval records, and an eval's part of its transaction.

The transform engine (and a resumable copy) reaches these through one function, `evals_of`, never
through methods of the user's `lakecompute.Dataset`: what a dataset remembers of the evals written
into it (`lakecompute.datasets.EvalRecord`, kept in its version manifests), starting an eval's writes
(`EvalWrite`), and dropping the kept outputs of an unfinished eval (``rerun=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lakecompute.datasets._core import core_of
from lakecompute.datasets._eval_write import EvalWrite
from lakecompute.datasets._records import EvalRecord, parse_records, reference_of
from lakecompute.errors import DatasetNotFoundError, InvalidArgumentError
from lakecompute.versioned import Fragment, Manifest

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset

__all__ = ["EvalPort", "evals_of", "parked_of"]


class EvalPort:
    """An output dataset handle as the engine uses it (made by `evals_of`).

    Args:
        ds: the dataset handle (its branch, its version and its write transaction).
    """

    def __init__(self, ds: Dataset) -> None:
        self._ds = ds
        self._core = core_of(ds)

    def records(self) -> dict[str, EvalRecord]:
        """The records of the evals that committed the handle's version, by fingerprint (see
        `EvalRecord`); earlier evals are found with `record`.

        Raises:
            DatasetCorruptError: a record in the version's manifest is malformed (names the file).
        """
        return parse_records(self._core.txn.base, self._core.path)

    def record(self, fingerprint: str) -> EvalRecord | None:
        """The record of eval ``fingerprint`` as the handle's version remembers it (committed there or
        before), read from the version that keeps it whole (when that version is gone, only its status
        and progress are known).

        Raises:
            DatasetCorruptError: the record or its reference is malformed.
        """
        base = self._core.txn.base
        obj = base.evals.get(fingerprint)
        if obj is None:
            return None
        if "at" not in obj:
            return self.records()[fingerprint]
        at, known = reference_of(fingerprint, obj, self._core.path, base)
        try:
            kept = self._core.table.manifest(at)
        except DatasetNotFoundError:
            return known  # vacuumed away: that it ran, and how far, is what is left
        return parse_records(kept, self._core.path).get(fingerprint, known)

    def begin(
        self,
        fingerprint: str | None,
        *,
        label: str,
        in_place: bool,
        resume: EvalRecord | None = None,
        job: str = "",
        origin: Mapping[str, Any] | None = None,
    ) -> EvalWrite:
        """Start an eval's writes into the dataset: its part of the write transaction.

        Pending changes must be committed first (``commit()``), so that the eval's commits hold only
        its own outputs. ``origin`` is the lineage every version the eval commits records (its
        functions, the fingerprint of their code, what it read); its commits land on the handle's branch.

        Raises:
            ReadOnlyError: the dataset was opened read-only or at an old version.
            InvalidArgumentError: the handle has uncommitted changes.
        """
        self._core.check_writable()
        if self._core.txn.pending:
            raise InvalidArgumentError(
                f"Dataset {self._core.path!r} has uncommitted changes; commit them before starting an eval."
            )
        return EvalWrite(
            self._core.txn, fingerprint, label=label, in_place=in_place, resume=resume, job=job, origin=origin
        )

    def drop_unfinished(self, record: EvalRecord) -> int:
        """Drop the kept outputs of the unfinished eval ``record`` (``rerun=True``): commit a version
        equal to the one before it began; returns the new version.

        Raises:
            ReadOnlyError: the dataset was opened read-only or at an old version.
        """
        self._core.check_writable()
        version = record.base_version
        old = self._core.table.manifest(version)
        message = f"drop unfinished eval {record.label} (rerun=True)"
        self._core.txn.commit_content(old, message, {"op": "restore", "version": version})
        return self._core.version


def evals_of(ds: Dataset) -> EvalPort:
    """The engine's port into output dataset ``ds``: its eval records and an eval's writes."""
    return EvalPort(ds)


def parked_of(url: str) -> Callable[[Manifest], Iterable[Fragment]]:
    """What a version keeps aside besides its tensors' fragments: those an interrupted in-place eval
    parked in its record (a rerun commits them), for ``vacuum`` (``url`` names the dataset in errors).

    Raises (when called):
        DatasetCorruptError: a record in the manifest is malformed.
    """

    def parked(manifest: Manifest) -> list[Fragment]:
        records = parse_records(manifest, url).values()
        return [f for record in records for kept in record.parked.values() for f in kept]

    return parked
