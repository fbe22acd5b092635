"""Planning an eval: what to read, where to write, whether it already ran, and how to split it.

Everything here happens in the calling process before any user code runs, and decides nothing that
depends on timing: the same call plans the same eval, so every scheduler and worker count gives the
same result and a rerun can be recognised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakecompute.compute._fingerprint import fingerprint_code, fingerprint_eval, fingerprint_job
from lakecompute.compute._inputs import Source, make_source
from lakecompute.compute._options import EvalOptions, draw_seed
from lakecompute.compute._reading import check_decode_on_device
from lakecompute.compute._sizes import estimate_bytes
from lakecompute.datasets import Dataset, DatasetView, EvalRecord, base_dataset, evals_of
from lakecompute.errors import (
    EvalConflictError,
    FingerprintError,
    InvalidArgumentError,
    InvalidTypeError,
    ReadOnlyError,
    warn,
)
from lakecompute.schedulers import Scheduler
from lakecompute.storage import backend_class

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline

__all__ = [
    "MAX_TASK",
    "EvalPlan",
    "block_size",
    "checked_scheduler",
    "plan_eval",
    "plan_ranges",
    "task_floor",
    "task_size",
]

MAX_TASK = 8192  # inputs per task: small enough to balance load, large enough to amortise a task's cost
#: What a task costs beyond its inputs, per output tensor it writes: the tail of its slot, padded to a
#: whole chunk (storage's 1 MiB), compressed and stored as one more file: about what writing 1 MiB costs.
TAIL_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class EvalPlan:
    """An eval, planned: everything decided before user code runs.

    Attributes:
        pipeline: the functions.
        options: the checked options.
        source: the input.
        out: the dataset written.
        in_place: whether ``out`` is also the input.
        fingerprint: what identifies the eval, or None when something it depends on cannot be
            fingerprinted (then nothing is recorded and a rerun is a new eval).
        record: a record of the same eval in ``out``: completed (the eval is a no-op) or interrupted
            (it resumes after ``record.done``).
        seed: the seed of the ``rng`` generators (the resumed run's, when resuming without one).
        label: the functions' names, for messages, logs and the progress bar.
        job: what the eval is for (names, input, output; not code), or None when the input cannot be
            fingerprinted.
        drop: an unfinished eval whose kept outputs ``rerun=True`` drops before this eval starts.
    """

    pipeline: Pipeline
    options: EvalOptions
    source: Source
    out: Dataset
    in_place: bool
    fingerprint: str | None
    record: EvalRecord | None
    seed: int
    label: str
    job: str | None = None
    drop: EvalRecord | None = None
    origin: Mapping[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.record is not None and self.record.complete

    @property
    def resume(self) -> EvalRecord | None:
        return self.record if self.record is not None and not self.record.complete else None

    @property
    def resume_from(self) -> int:
        return self.record.done if self.record is not None else 0


def plan_eval(pipeline: Pipeline, data_in: Any, data_out: Any, options: EvalOptions) -> EvalPlan:
    """Check the arguments, commit pending changes, and find an earlier run of the same eval.

    Raises:
        InvalidArgumentError, InvalidTypeError, ReadOnlyError: bad arguments (nothing is changed).
        FingerprintError: ``checkpoint_interval`` without a fingerprintable eval.
        EvalConflictError: ``data_out`` holds the kept outputs of an unfinished eval this one does not
            continue, or an interrupted run's output was changed since its last checkpoint.
    """
    out, in_place = _target(data_in, data_out)
    _commit_pending(out, data_in)
    source = make_source(data_in, options.pad_data_in, in_place)
    check_decode_on_device(source, options)
    fingerprint, job = _fingerprint(pipeline, source, out, in_place, options)
    label = _label(pipeline)
    unfinished = _unfinished(out)
    drop = None
    if unfinished is not None and options.rerun:
        record, drop = None, unfinished
    elif unfinished is not None:
        record = _continue(out, unfinished, fingerprint, job)
    else:
        record = _earlier_run(out, fingerprint, in_place, options)
    if options.seed is not None:
        seed = options.seed
    elif record is not None and record.seed is not None:
        seed = record.seed
    else:
        seed = draw_seed()
    origin = _lineage(pipeline, source)
    return EvalPlan(
        pipeline, options, source, out, in_place, fingerprint, record, seed, label, job, drop, origin
    )


def _lineage(pipeline: Pipeline, source: Source) -> dict[str, Any]:
    """What the versions an eval commits record of it: its functions, a fingerprint of their code and
    arguments, and what it read (None where they cannot be fingerprinted)."""
    origin: dict[str, Any] = {"op": "eval", "functions": [f.name for f in pipeline.functions]}
    origin["code"] = fingerprint_code(pipeline)
    try:
        # What identifies the input (a dataset's id, version and selection; a Hugging Face dataset's
        # fingerprint) and where it was (a dataset's path): the input's identity plus its description.
        described = {**source.identity(), **source.describe()}
        origin["inputs"] = json.loads(json.dumps(described, default=str))
    except FingerprintError:
        origin["inputs"] = None
    return origin


def _label(pipeline: Pipeline) -> str:
    return " → ".join(f.name for f in pipeline.functions)


def _target(data_in: Any, data_out: Any) -> tuple[Dataset, bool]:
    if data_out is None:
        if not isinstance(data_in, Dataset):
            raise InvalidArgumentError(
                "data_out=None transforms data_in in place, so data_in must be a Dataset (not a view or a "
                f"sequence). Got {type(data_in).__name__}; pass a data_out dataset."
            )
        data_out = data_in
    if isinstance(data_out, DatasetView):
        raise ReadOnlyError("data_out is a dataset view, which is read-only. Pass a Dataset as data_out.")
    if not isinstance(data_out, Dataset):
        raise InvalidTypeError(f"data_out must be a lakecompute Dataset. Got {type(data_out).__name__}.")
    data_out.check_writable()
    if not data_out.tensors:
        raise InvalidArgumentError(
            f"data_out {data_out.path!r} has no tensors. Create them first (ds.create_tensor or lc.like)."
        )
    return data_out, data_out is data_in


def _commit_pending(out: Dataset, data_in: Any) -> None:
    """Commit what the caller wrote but did not commit yet (inside ``with ds:``, say), as its own version:
    the workers read committed versions, and the eval's commits hold only its own outputs."""
    for ds in (out, base_dataset(data_in) if isinstance(data_in, (Dataset, DatasetView)) else None):
        if ds is not None and not ds.read_only and ds.has_pending_changes:
            ds.commit("changes before eval")


def _fingerprint(
    pipeline: Pipeline, source: Source, out: Dataset, in_place: bool, options: EvalOptions
) -> tuple[str | None, str | None]:
    """The eval's fingerprint and its job (see `fingerprint_job`); None for what cannot be fingerprinted.

    An input without an identity (a torch dataset, a generator) warns at the call that the eval is not
    recorded (a rerun appends its outputs again); a value the functions bind that cannot be fingerprinted
    (a model object bound as an argument) is identified by its type, and `fingerprint_eval` warns.
    """
    try:
        identity = source.identity()
    except FingerprintError as exc:
        if options.checkpoint_interval:
            raise
        warn(
            f"This eval ({_label(pipeline)}) is not recorded in {out.path!r}, so running it again appends "
            f"its outputs again (no resume, no no-op rerun): {exc.args[0].split('. ')[0]}. Use a lakecompute "
            "dataset, a Hugging Face datasets.Dataset or a list as data_in to have it recorded."
        )
        return None, None
    if in_place:
        # The input is the version the eval started from; and its tensors are not part of the
        # identity, so that the eval that filled a new column is the same eval once it holds data
        # (a completed in-place eval is recognised only right after itself: nothing changed since).
        identity = {**identity, "version": None, "digest": None, "tensors": None}
    output = {
        "id": out.id,  # the dataset, not its path: one made again at the path has no records
        "in_place": in_place,
        # Not the dtypes: a generic tensor's is decided by the eval's own data (at its checkpoints too).
        "tensors": {n: [t.htype, t.sample_compression] for n, t in out.tensors.items()},
    }
    try:
        job = fingerprint_job(pipeline, identity, output)
        return fingerprint_eval(pipeline, identity, {**output, "options": options.identity()}), job
    except FingerprintError:
        if options.checkpoint_interval:
            raise
        return None, None  # nothing to resume from: the eval runs, unrecorded


def _unfinished(out: Dataset) -> EvalRecord | None:
    """The unfinished eval whose kept outputs ``out``'s latest version holds (its checkpoint), if any."""
    return next(
        (r for r in evals_of(out).records().values() if not r.complete and r.version == out.version), None
    )


def _continue(out: Dataset, unfinished: EvalRecord, fingerprint: str | None, job: str | None) -> EvalRecord:
    """The unfinished eval to resume: this eval, or this eval with its code fixed (warned);
    any other eval would append after its kept outputs, which is refused."""
    if fingerprint == unfinished.fingerprint:
        return unfinished
    if fingerprint is not None and job is not None and job == unfinished.job:
        warn(
            f"Resuming the unfinished eval ({unfinished.label}) into {out.path!r} after its first "
            f"{unfinished.done} inputs, with changed code, arguments or globals: the outputs of those "
            "inputs were made by the earlier code. Pass rerun=True to drop them and start over."
        )
        return unfinished
    raise EvalConflictError(out.path, unfinished.done, unfinished.version, out.version, unfinished.label)


def _earlier_run(
    out: Dataset, fingerprint: str | None, in_place: bool, options: EvalOptions
) -> EvalRecord | None:
    """The record of the same eval to skip (completed) or resume (interrupted), if there is one."""
    record = evals_of(out).record(fingerprint) if fingerprint is not None else None
    if record is None:
        return None
    if record.complete:
        # In place, the eval is the same only right after it ran: later versions are other input.
        same_input = not in_place or record.version == out.version
        return record if same_input and not options.rerun else None
    if record.version == out.version:
        return record
    if not in_place:
        # Its checkpointed outputs are visible in data_out, and something was committed after them:
        # neither resuming nor starting over would give each output once, in order.
        raise EvalConflictError(out.path, record.done, record.version, out.version)
    return None


def checked_scheduler(sched: Scheduler, reads: list[str], writes: str | None = None) -> Scheduler:
    """``sched``, checked against where the data it reads (and writes) lives: machine-local paths are
    refused on a cluster, object stores are never used from forked children (then the scheduler without
    fork is returned), and in-memory output needs workers that share this process's memory.

    Raises:
        InvalidArgumentError: the scheduler cannot reach the data (naming the ways out).
    """
    locations = ([writes] if writes is not None else []) + reads
    local = [url for url in locations if backend_class(url).machine_local]
    if local and sched.spans_machines:
        raise InvalidArgumentError(
            f"{local[0]!r} is a path on this machine's disk, which the other machines of the cluster do "
            "not see. Keep the datasets on object storage (s3://...) that every node reaches, or, if the "
            "path is on a file system every node mounts, say so: lc.schedulers.Ray(shared_filesystem=True)."
        )
    # Object-store clients hang or refuse to work in a child forked after the parent used them
    # (STORAGE-NOTES.md, "Processes"): with remote data, workers must not be forked from here.
    if sched.needs_fork_safe_storage and not all(backend_class(url).fork_safe for url in locations):
        sched = sched.without_fork()
    if writes is not None and not sched.shares_memory and not backend_class(writes).shared_between_processes:
        raise InvalidArgumentError(
            f"data_out {writes!r} lives in this process's memory, which worker processes cannot "
            "write. Use a local path, or scheduler='threaded' (or num_workers=0)."
        )
    return sched


# -- splitting the input into tasks -----------------------------------------------------------------


def task_floor(length: int, num_workers: int, tensors: int, bytes_per_input: float) -> int:
    """The fewest inputs a task should have, from what the first inputs wrote (deterministic: their
    stored bytes, not their time): enough that the task's fixed cost, a padded tail chunk per tensor
    it writes (`TAIL_BYTES`), is at most a quarter of what it writes; but never more than half a
    worker's share, so that every worker still gets two tasks or more and the end still balances.

    The floor is rounded up so that the input splits into the same number of tasks for every worker
    (``k`` each, ``k >= 2``, tasks of at most `MAX_TASK`): a floor that leaves five equal tasks for two
    workers has one worker run three while the other waits (W3's 20,000 vectors in tasks of 4,096: 18 %
    longer than 4 of 5,000; W1's 60,000 images in 7 of 8,192 and one of 2,655: 9 % longer than 8 of 7,500).

    Without workers there is nothing to balance and tasks are as large as allowed anyway (1).
    """
    if num_workers <= 1 or tensors <= 0:
        return 1
    wanted = math.ceil(4 * tensors * TAIL_BYTES / max(1.0, bytes_per_input))
    per_worker = max(2, length // (num_workers * max(1, wanted)))  # tasks per worker at that floor
    # Tasks are at most MAX_TASK: as many more per worker as that takes, all of one size.
    per_worker = max(per_worker, math.ceil(length / (num_workers * MAX_TASK)))
    return max(1, math.ceil(length / (per_worker * num_workers)))


def task_size(
    length: int | None, num_workers: int, checkpoint_interval: int, batch_size: int | None, min_task: int = 1
) -> int:
    """The largest task: about a quarter of a worker's share (so one slow region does not hold up the
    rest), at least ``min_task`` (see `task_floor`), at most MAX_TASK; `plan_ranges` makes the later
    tasks smaller.

    Without workers there is nothing to balance, and a task's start and end are where its reads and
    writes cannot overlap its function (the first block is read before it, the last written after
    it): a dataset's input is one task (W1 at 0 workers: 0.41 s in one, 0.49 s in tasks of 8,192).
    Checkpoints still bound it."""
    if num_workers == 0 and length is not None:
        size = max(1, length)
    elif length is None:
        size = 1024
    else:
        size = min(MAX_TASK, max(1, math.ceil(length / (4 * num_workers))))
        size = min(MAX_TASK, max(size, min_task))
    if checkpoint_interval:
        size = min(size, checkpoint_interval)
    if batch_size:
        size = max(batch_size, (size // batch_size) * batch_size)
    return size


def plan_ranges(
    length: int,
    size: int,
    num_workers: int,
    checkpoint_interval: int,
    batch_size: int | None,
    start: int = 0,
    min_task: int = 1,
) -> list[tuple[int, int]]:
    """Task ranges from ``start`` that never cross a checkpoint boundary.

    With several workers the sizes are *guided*: each task takes a share of what is left (about
    1 / (2 * num_workers)), down to a floor (at least ``min_task``, see `task_floor`), so tasks shrink
    towards the end and the workers finish together instead of one idling while another runs a last
    large task. ``size`` caps every task.
    """
    floor = max(batch_size or 1, math.ceil(length / max(1, 16 * num_workers)), min_task)
    ranges = []
    while start < length:
        step = size
        if num_workers > 1:
            step = min(size, max(floor, math.ceil((length - start) / (2 * num_workers))))
            if batch_size:
                step = max(batch_size, (step // batch_size) * batch_size)
        stop = min(length, start + step)
        if checkpoint_interval:
            boundary = (start // checkpoint_interval + 1) * checkpoint_interval
            stop = min(stop, boundary)
        ranges.append((start, stop))
        start = stop
    return ranges


def block_size(first: Any, batch_size: int | None, block_bytes: int) -> int:
    """Inputs per block, from the size of the first input: few, large reads (zarr's cost per call is
    ~ms), within ``block_bytes`` of input (a worker's budget's)."""
    sample_bytes = estimate_bytes(first) // (batch_size or 1)
    block = max(1, min(MAX_TASK, block_bytes // max(1, sample_bytes)))
    if batch_size:
        block = max(batch_size, (block // batch_size) * batch_size)
    return block
