"""An eval's writes into its output dataset, on both sides of the process boundary.

In the calling process, `EvalWrite` (made by the engine's port, `lakecompute.datasets.evals_of`) owns
the eval's part of the output dataset's write transaction: applying the decisions about ranks and
dtypes (made once, from the first outputs, before any worker writes, by each tensor's `TensorSchema`),
the segments its tasks write into, the fragments applied in input order, checkpoints and the final
commit. In the workers, a `TaskWriter` built from the frozen `lakecompute.versioned.SlotGrant` and
`OutputSchema` checks, buffers and writes one task's outputs into the slots reserved for that task, and
hands back only fragment descriptions.

::

    EvalWrite.schema ──▶ preflight: schema.decide(first outputs) ──▶ EvalWrite.decide(decisions)
    EvalWrite.grant + decided schema ──▶ workers: TaskWriter(grant, schema, task) ──▶ fragments
    fragments, in input order ──▶ EvalWrite.apply ──▶ checkpoint(...) / commit(...)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lakecompute.datasets._records import EvalProgress, EvalRecord
from lakecompute.datasets._schema import TensorSchema
from lakecompute.datasets._session import WriteSession, rank_of
from lakecompute.datasets._transaction import Transaction
from lakecompute.errors import TransformError
from lakecompute.htypes import Encoded
from lakecompute.versioned import Fragment, SlotGrant

__all__ = [
    "Decisions",
    "EvalWrite",
    "OutputSchema",
    "SlotGrant",
    "TaskWriter",
    "TensorSchema",
    "written_in_place",
]


# -- what workers check outputs against ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decisions:
    """Ranks decided from an eval's first outputs, and which tensors those wrote.

    A generic tensor without a dtype is not decided here: it gets the smallest dtype that holds every
    value the eval writes (numpy's ``result_type``), at each commit, never narrowing: a checkpoint taken
    before the first float keeps int64, the final version says float64, and no value changes.

    Attributes:
        ndims: rank per tensor that received values.
        written: the tensors that received values.
    """

    ndims: Mapping[str, int]
    written: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """The output tensors of an eval, in ``data_out``'s order, as workers check samples against them.

    Attributes:
        tensors: tensor name -> `TensorSchema`.
    """

    tensors: Mapping[str, TensorSchema]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.tensors)

    def decide(self, values: Mapping[str, Sequence[Any]]) -> Decisions:
        """Check one input's outputs (tensor -> values) and derive the decisions they imply.

        Raises:
            InvalidSampleError: a value cannot be stored in its tensor (wrong dtype, rank, label, ...).
        """
        ndims: dict[str, int] = {}
        for name, vals in values.items():
            if vals:
                schema = self.tensors[name]
                ndims[name] = schema.decide_rank(len(schema.encode(v).shape) for v in vals)
        return Decisions(ndims, tuple(n for n, v in values.items() if v))

    def decide_checked(self, checked: Mapping[str, np.ndarray | list[Encoded]]) -> Decisions:
        """The decisions of one input's outputs that were checked against this schema already (by tensor:
        a stacked block, or the encoded samples, each list of one rank): as `decide`, without checking
        them again."""
        ndims: dict[str, int] = {}
        for name, item in checked.items():
            rank = rank_of(item)
            if rank is not None:
                ndims[name] = self.tensors[name].decide_rank([rank])
        return Decisions(ndims, tuple(ndims))

    def decided(self, decisions: Decisions) -> OutputSchema:
        """This schema with ``decisions`` applied."""
        out = dict(self.tensors)
        for name, ndim in decisions.ndims.items():
            out[name] = replace(out[name], ndim=ndim)
        return OutputSchema(out)


def written_in_place(names: tuple[str, ...], decisions: Decisions, *, replace_all: bool) -> tuple[str, ...]:
    """In place, the tensors an eval replaces: all of them with ``replace_all`` (``skip_ok=False``: the
    outputs are the dataset's new rows, however many), else those the first input that wrote anything
    wrote, and none when the first inputs wrote nothing; the others keep their content.

    With ``skip_ok`` the set is the whole eval's: while a kept tensor holds rows, every later input must
    write exactly these tensors, once each (`Decided.aligned`), which the workers check per input and
    `EvalWrite.check_aligned` at the end; an eval that writes nothing keeps every tensor (Hugging Face's
    ``map(lambda x: None)`` keeps the data too).
    """
    return names if replace_all else decisions.written


class TaskWriter:
    """Checks, buffers and writes one task's outputs into the slots its grant reserves for it.

    Args:
        grant: where the eval's tasks write.
        schema: the decided output schema.
        task: the task's number.
        flush_bytes: a tensor's buffer is written out once it holds this many bytes (the worker's budget's).
        flush_threads: threads storing the buffers of four tensors or more at once, at the task's end.
    """

    def __init__(
        self, grant: SlotGrant, schema: OutputSchema, task: int, flush_bytes: int, flush_threads: int
    ) -> None:
        self._grant = grant
        self._task = task
        self._store = grant.open_store()
        self.schemas = dict(schema.tensors)
        # The slot of each tensor, from the grant (not a method of this writer: its session holding that
        # would be a cycle that only the garbage collector frees).
        slot = functools.partial(grant.writer, self._store, task)
        self._session = WriteSession(slot, flush_bytes, flush_threads)
        self._fragments: dict[str, list[Fragment]] = {name: [] for name in schema.tensors}

    def encode(self, name: str, value: object) -> Encoded:
        """Check one sample of ``name`` (raises InvalidSampleError; buffers nothing)."""
        return self._session.encode(self.schemas[name], value)

    def encode_many(self, name: str, values: object) -> np.ndarray | list[Encoded]:
        """Check many samples of ``name``: a stacked array when the fast path applies, else a list."""
        return self._session.encode_many(self.schemas[name], values)

    def encode_ragged(self, name: str, values: list[Any]) -> list[Encoded] | None:
        """Check arrays of ``name`` whose first dimension varies in one go; None when that does not apply
        or a value would be refused (then `encode` each to find which)."""
        return self._session.encode_ragged(self.schemas[name], values)

    def add(self, name: str, item: Encoded | np.ndarray | list[Encoded]) -> None:
        """Buffer checked samples of ``name``; a full buffer is written out."""
        self._fragments[name].extend(self._session.add(self.schemas[name], item))

    def finish(self) -> dict[str, list[Fragment]]:
        """Write out everything buffered, and the last chunks the slot writers held back (`SlotGrant.writer`);
        the task's fragments per tensor, in order."""
        for name, frags in self._session.flush_many(list(self.schemas.values()), seal=True).items():
            self._fragments[name].extend(frags)
        return self._fragments


# -- the calling side -------------------------------------------------------------------------------


class EvalWrite:
    """One eval's part of its output dataset's write transaction.

    Made by the engine's port (``evals_of(ds).begin(...)``). For an eval into another dataset the new
    fragments are appended to the output's tensors; in place, the tensors the eval writes are rebuilt
    beside the old ones and the others keep their content (their fragments carry over, nothing of them
    is rewritten).

    Args:
        txn: the output dataset's transaction.
        fingerprint: the eval's fingerprint, or None when it has none (then no record is kept).
        label: the compute functions, for commit messages.
        in_place: whether the eval transforms the dataset it reads.
        resume: the record of an interrupted run of the same eval to continue from, if any.
        job: what the eval is for (see `EvalRecord.job`); its record replaces an unfinished one of the
            same job.
        origin: the lineage each version the eval commits records (``Manifest.origin``).
    """

    def __init__(
        self,
        txn: Transaction,
        fingerprint: str | None,
        *,
        label: str,
        in_place: bool,
        resume: EvalRecord | None,
        job: str = "",
        origin: Mapping[str, Any] | None = None,
    ) -> None:
        self._txn = txn
        self.job = job
        self.origin = dict(origin or {})
        self.fingerprint = fingerprint
        self.label = label
        self.in_place = in_place
        self.resume = resume
        self.base_version = resume.base_version if resume is not None else txn.base.version
        self.written: tuple[str, ...] = ()
        self._grant: SlotGrant | None = None
        # Generic tensors whose dtype the eval's data decides: kept open (None) in the head until the
        # final commit, also across checkpoints and a resume, so that a later float widens it.
        self.open_dtypes = tuple(
            n for n, s in txn.head.tensors.items() if s.spec.dtype is None and s.spec.kind == "array"
        ) + (resume.open_dtypes if resume is not None else ())
        self._reopen()
        self.schema = OutputSchema(
            {name: TensorSchema.of(s, rank=not in_place) for name, s in txn.head.tensors.items()}
        )

    # -- before the workers ----------------------------------------------------------------------
    def decide(self, decisions: Decisions, *, replace_all: bool) -> OutputSchema:
        """Fix ranks and dtypes once, before any worker writes; in place, start the written tensors anew.

        Args:
            decisions: from `OutputSchema.decide` on the first outputs.
            replace_all: in place, whether every tensor is rewritten (else only those the first
                outputs wrote; the others are kept).

        Returns:
            The decided schema the workers check against.
        """
        self.schema = self.schema.decided(decisions)
        head = self._txn.head
        for name, ndim in decisions.ndims.items():
            head.set_ndim(name, ndim)
        if self.in_place:
            self.written = written_in_place(self.schema.names, decisions, replace_all=replace_all)
            parked = self.resume.parked if self.resume is not None else {}
            for name in self.written:
                head.set_ndim(name, decisions.ndims.get(name))
                head.set_fragments(name, tuple(parked.get(name, ())))
        return self.schema

    def check_aligned(self, inputs: int) -> None:
        """In place, while kept tensors hold rows: check that every replaced tensor got one value for each
        of the eval's ``inputs``, so that its rows line up with the kept ones (the workers check each
        input; this checks the whole, before the final commit).

        Raises:
            TransformError: a replaced tensor has another length (nothing is committed).
        """
        lengths = {n: self._txn.length(n) for n in self.written} if self.in_place else {}
        wrong = {n: k for n, k in lengths.items() if k != inputs}
        if wrong:
            raise TransformError(
                f"In place, the tensors {sorted(wrong)} got {wrong} values for {inputs} inputs, while "
                f"{sorted(self.kept())} keep theirs: their rows would not line up. Nothing was committed. "
                "Write each tensor once for every input, or write into a new dataset "
                "(data_out=lc.like(path, ds)).",
                None,
                None,
                self.label,
            )

    def kept(self) -> dict[str, int]:
        """In place: the tensors the eval does not write, with their lengths."""
        if not self.in_place:
            return {}
        return {n: self._txn.length(n) for n in self.schema.names if n not in self.written}

    @property
    def grant(self) -> SlotGrant:
        """The slots the eval's tasks write into (its segments are created on first use, here)."""
        if self._grant is None:
            codecs = {
                s.spec.chunk_compression or "none": s.spec.chunk_compression
                for s in self.schema.tensors.values()
            }
            # Held from here to the final commit (or abort), checkpoints included: workers write meanwhile.
            self._grant = self._txn.writer.grant(codecs, self.schema.names)
        return self._grant

    # -- in input order --------------------------------------------------------------------------
    def apply(self, fragments: Mapping[str, Iterable[Fragment]]) -> None:
        """Append a task's fragments (tasks must be applied in input order)."""
        for name, frags in fragments.items():
            for frag in frags:
                self._txn.head.append(name, frag)

    def checkpoint(self, progress: EvalProgress) -> None:
        """Commit the outputs so far as a checkpoint a rerun resumes from.

        In place, the content readers see does not change: the new fragments are parked in the record.
        """
        message = f"eval {self.label}: checkpoint at {progress.done}"
        record = self._record("running", progress)
        if not self.in_place:
            self._txn.commit(message, record, self.origin)
            self._reopen()
        elif record is not None:  # in place, checkpoints exist only to be resumed: they need the record
            self._txn.commit_record(message, record, self.origin)

    def commit(self, progress: EvalProgress) -> int:
        """The final commit; returns the version that holds the eval's result."""
        suffix = " (in place)" if self.in_place else ""
        if self._grant is not None:
            self._txn.writer.unpin()  # the workers are done: the final commit releases the lease
        self._txn.commit(f"eval {self.label}{suffix}", self._record("done", progress), self.origin)
        return self._txn.base.version

    def _reopen(self) -> None:
        for name in self.open_dtypes:
            self._txn.head.reopen_dtype(name)

    def abort(self) -> None:
        """Forget everything of the eval not committed yet (checkpoints stay)."""
        self._txn.rollback()

    def _record(self, status: str, progress: EvalProgress) -> EvalRecord | None:
        if self.fingerprint is None:
            return None
        parked: dict[str, tuple[Fragment, ...]] = {}
        if self.in_place and status == "running":
            parked = {n: tuple(self._txn.head.state(n).fragments) for n in self.written}
        return EvalRecord(
            fingerprint=self.fingerprint,
            status="done" if status == "done" else "running",
            done=progress.done,
            outputs=dict(progress.outputs),
            failed=tuple(progress.failed),
            failed_count=len(progress.failed),
            base_version=self.base_version,
            label=self.label,
            seed=progress.seed,
            in_place=self.in_place,
            written=self.written,
            open_dtypes=self.open_dtypes if status != "done" else (),
            parked=parked,
            seconds=progress.seconds,
            job=self.job,
        )
