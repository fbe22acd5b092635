"""The worker side of an eval: what runs for each task, wherever the scheduler puts it.

A task reads its own input range (datasets: from the committed version; sequences: by index),
runs the fused pipeline per sample, checks and buffers the outputs, writes them as fragments into
the task's own slots, and returns only fragment descriptions and counts (`TaskResult`).
Per-worker state (instances of class-based compute functions, the output store) is built once per
worker and job.
"""

from __future__ import annotations

import functools
import operator
import os
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.compute._inputs import Source
from lakecompute.compute._samples import InputRow, SampleOut, row_class
from lakecompute.datasets._session import WriteSession
from lakecompute.errors import InvalidArgumentError, InvalidSampleError, TransformError
from lakecompute.htypes import Encoded
from lakecompute.schedulers import ProgressFn
from lakecompute.storage import BackendSpec, SlotWriter, TensorState, open_backend

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline

__all__ = ["FailedSample", "Job", "Task", "TaskResult", "forget_job", "preflight", "run_task"]


@dataclass(frozen=True, slots=True)
class FailedSample:
    """A sample skipped with ``ignore_errors=True``.

    Attributes:
        index: its position in ``data_in``.
        function: the compute function that failed.
        error_type: the exception's type name.
        message: the exception's message.
        traceback: the formatted traceback from where it ran.
    """

    index: int
    function: str
    error_type: str
    message: str
    traceback: str

    def __repr__(self) -> str:
        return f"FailedSample(index={self.index}, {self.error_type}: {self.message!s:.80})"


@dataclass(frozen=True, slots=True)
class Task:
    """A range of inputs for one worker; ``items`` only for streamed (length-less) input."""

    number: int
    start: int
    stop: int
    slot_base: int
    items: list[Any] | None = None

    def describe(self) -> str:
        return f"{self.number} (data_in[{self.start}:{self.stop}])"  # read as "task 3 (data_in[a:b])"

    def __repr__(self) -> str:
        return f"Task({self.number}, data_in[{self.start}:{self.stop}])"


@dataclass(slots=True)
class TaskResult:
    """What a task sends back: fragment descriptions and counts, never sample data."""

    number: int
    start: int
    stop: int
    fragments: dict[str, list[list[Any]]]
    counts: dict[str, int]
    failed: list[FailedSample]


@dataclass(slots=True)
class Job:
    """Everything a worker needs, fixed before the first task starts."""

    token: str
    pipeline: Pipeline
    source: Source
    out: BackendSpec
    states: dict[str, TensorState]
    segments: dict[str, str]
    tensor_pos: dict[str, int]
    ignore_errors: bool
    check_lengths: bool
    skip_ok: bool
    batch_size: int | None
    block: int
    names: list[str] = field(default_factory=list)


# -- the worker side -------------------------------------------------------------------------------

# Keyed by process and thread: a forked worker inherits the parent's entries but never matches them.
_WORKER_STATE: dict[tuple[str, int, int], _WorkerState] = {}
_WORKER_LOCK = threading.Lock()


class _WorkerState:
    """Per worker (process or thread) and job: built once, reused by every task it runs."""

    def __init__(self, job: Job) -> None:
        # Class-based compute functions are instantiated here: once per worker.
        self.stages = [(f.instantiate(), f.name) for f in job.pipeline.functions]
        self.store = open_backend(job.out.url, job.out.storage_options).zarr_store()


def _state_for(job: Job) -> _WorkerState:
    key = (job.token, os.getpid(), threading.get_ident())
    st = _WORKER_STATE.get(key)
    if st is None:
        with _WORKER_LOCK:
            st = _WORKER_STATE.get(key)
            if st is None:
                # A worker that outlives its eval (a Ray worker, a thread of a long-lived process) would
                # otherwise keep every earlier eval's state — models included — alive.
                for old in [k for k in _WORKER_STATE if k[1:] == key[1:]]:
                    del _WORKER_STATE[old]
                st = _WORKER_STATE[key] = _WorkerState(job)
    return st


def forget_job(token: str) -> None:
    """Drop this process's per-worker state of a finished eval (its instances, its store)."""
    with _WORKER_LOCK:
        for key in [k for k in _WORKER_STATE if k[0] == token]:
            del _WORKER_STATE[key]


class _StageFailure(Exception):
    def __init__(self, function: str, exc: BaseException) -> None:
        self.function = function
        self.exc = exc


def _rows_of(out: SampleOut, index: int, function: str, check_lengths: bool) -> list[InputRow]:
    """A middle step's outputs as the next step's ``sample_in`` rows."""
    items = {k: v for k, v in out.items().items() if v}
    if not items:
        return []
    counts = {k: len(v) for k, v in items.items()}
    n = max(counts.values())
    if len(set(counts.values())) > 1:
        if check_lengths:
            raise _StageFailure(
                function,
                InvalidArgumentError(
                    f"{function} wrote different numbers of samples per tensor {counts}; the next step needs "
                    "whole rows. Write every tensor once per output sample."
                ),
            )
        n = min(counts.values())
    row = row_class(tuple(items))
    return [row({k: v[j] for k, v in items.items()}, index) for j in range(n)]


def _run_sample(
    stages: list[tuple[Callable[[Any, Any], Any], str]],
    sample: Any,
    index: int,
    final: SampleOut,
    check_lengths: bool,
) -> None:
    current = [sample]
    last = len(stages) - 1
    for k, (fn, name) in enumerate(stages):
        out = final if k == last else SampleOut(None)
        for s in current:
            try:
                fn(s, out)
            except Exception as exc:
                raise _StageFailure(name, exc) from exc
        if k != last:
            current = _rows_of(out, index, name, check_lengths)
            if not current:
                return


def _failure_error(function: str, index: int, exc: BaseException) -> TransformError:
    err = TransformError(
        f"Transform {function!r} failed on data_in[{index}]: {type(exc).__name__}: {exc}",
        index,
        None,
        function,
    )
    err.__cause__ = exc
    return err


def _check_sample_counts(job: Job, before: dict[str, int], after: dict[str, int], last_fn: str) -> None:
    written = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}
    if not written:
        return  # a filter: no output for this input
    if job.check_lengths and len(set(written.values())) > 1:
        raise _StageFailure(
            last_fn,
            InvalidArgumentError(
                f"the function wrote different numbers of samples per tensor for one input: {written}. "
                "Write every tensor the same number of times, or pass check_lengths=False."
            ),
        )
    if not job.skip_ok:
        missing = [k for k in job.names if k not in written]
        if missing:
            raise _StageFailure(
                last_fn,
                InvalidArgumentError(
                    f"the function wrote {sorted(written)} but not {missing} of data_out. Write every tensor "
                    "of data_out, or pass skip_ok=True to leave the others short."
                ),
            )


def _fast_block(values: list[Any]) -> np.ndarray | None:
    """Stack a tensor's values when they are arrays (or numbers) of one shape and dtype."""
    first = values[0]
    if isinstance(first, np.ndarray):
        shape, dtype = first.shape, first.dtype
        if dtype.kind not in "biufc":
            return None
        nd = np.ndarray
        exact = True
        for v in values:
            # Exact type first (the common case, cheap), then what isinstance would accept.
            if v.__class__ is not nd:
                if not isinstance(v, nd):
                    return None
                exact = False
            if v.shape != shape or v.dtype != dtype:
                return None
        if not exact:
            return np.stack(values)
        # The same result as np.stack, without its per-array expand_dims: 1.5x faster on small
        # images, 10x on scalars (once per output value, so it shows on small samples).
        if not shape:
            return np.array(values, dtype=dtype)
        return np.concatenate(values).reshape((len(values), *shape))
    if isinstance(first, (int, float, np.generic)) and not isinstance(first, (bool, str)):
        arr = np.asarray(values)
        if arr.ndim == 1 and arr.dtype.kind in "biuf":
            return arr
    return None


def _owners(marks: list[tuple[int, list[int]]], k: int) -> list[int]:
    """The input index of each buffered value of tensor ``k``, from the per-sample marks."""
    out: list[int] = []
    prev = 0
    for index, after in marks:
        grew = after[k] - prev
        if grew:
            out.extend([index] * grew)
        prev = after[k]
    return out


def _encode_outputs(
    job: Job,
    session: WriteSession,
    name: str,
    values: list[Any],
    owners: Callable[[], list[int]],
    function: str,
) -> np.ndarray | list[Encoded]:
    state = job.states[name]
    if state.spec.kind == "array":
        block = _fast_block(values)
        if block is not None:
            try:
                return session.encode_many(state, block)
            except InvalidSampleError:
                pass  # find the sample to blame below
    items = []
    for v, owner in zip(values, owners(), strict=True):
        try:
            items.append(session.encode(state, v))
        except InvalidSampleError as exc:
            raise _failure_error(function, owner, exc) from exc
    return items


def run_task(job: Job, task: Task, progress: ProgressFn) -> TaskResult:
    """Run one task: read its inputs, run the pipeline per sample, write fragments."""
    st = _state_for(job)
    seg_of = job.segments
    store = st.store

    def slot_for(spec: Any) -> SlotWriter:
        codec = spec.chunk_compression or "none"
        return SlotWriter(store, seg_of[codec], task.slot_base + job.tensor_pos[spec.name])

    session = WriteSession(slot_for)
    fragments: dict[str, list[list[Any]]] = {n: [] for n in job.names}
    counts = dict.fromkeys(job.names, 0)
    failed: list[FailedSample] = []
    last_fn = st.stages[-1][1]
    final = SampleOut(job.names)
    batch = job.batch_size
    # The per-sample bookkeeping is the engine's overhead on small samples, so it works on plain
    # lists: the output lists of ``final`` (stable objects: reset and truncate empty them in
    # place), their lengths before and after each sample, and one mark per kept sample (its index
    # and the lengths after it), from which a failing value's input index is found when needed.
    names = job.names
    lists = [final.items()[n] for n in names]
    ones = [1] * len(names)
    marks: list[tuple[int, list[int]]] = []
    stages = st.stages
    single = len(stages) == 1
    only_fn, only_name = stages[0]
    check_each = job.ignore_errors
    sub = operator.sub

    def drain() -> None:
        for k, (name, values) in enumerate(final.items().items()):
            if not values:
                continue
            owners = functools.partial(_owners, marks, k)
            encoded = _encode_outputs(job, session, name, values, owners, last_fn)
            for frag in session.add(job.states[name], encoded):
                fragments[name].append(frag.to_json())
            counts[name] += len(values)
        final.reset()
        marks.clear()

    step = batch or 1
    for block_start in range(task.start, task.stop, job.block):
        block_stop = min(task.stop, block_start + job.block)
        if task.items is not None:
            items = task.items[block_start - task.start : block_stop - task.start]
            samples: list[tuple[int, Any]] = []
            if batch:
                for b in range(0, len(items), batch):
                    samples.append((block_start + b, items[b : b + batch]))
            else:
                samples = list(zip(range(block_start, block_stop), items, strict=True))
        elif batch:
            samples = []
            for b in range(block_start, block_stop, batch):
                samples.append((b, job.source.read(b, min(b + batch, block_stop), batch=True)[0]))
        else:
            samples = list(
                zip(
                    range(block_start, block_stop),
                    job.source.read(block_start, block_stop, batch=False),
                    strict=True,
                )
            )
        done = 0
        before = list(map(len, lists))  # then each sample's "after" (or, if it failed, its "before")
        for index, sample in samples:
            try:
                if single:
                    try:
                        only_fn(sample, final)
                    except Exception as error:
                        raise _StageFailure(only_name, error) from error
                else:
                    _run_sample(stages, sample, index, final, job.check_lengths)
                after = list(map(len, lists))
                if list(map(sub, after, before)) != ones:  # not one value per tensor: check it
                    counted = dict(zip(names, before, strict=True)), dict(zip(names, after, strict=True))
                    _check_sample_counts(job, *counted, last_fn)
                if check_each:
                    # Check this sample's outputs now, so a bad value skips only its own sample.
                    for name, values, b in zip(names, lists, before, strict=True):
                        for v in values[b:]:
                            session.encode(job.states[name], v)
            except (_StageFailure, InvalidSampleError) as failure:
                final.truncate(dict(zip(names, before, strict=True)))
                fn_name = failure.function if isinstance(failure, _StageFailure) else last_fn
                exc = failure.exc if isinstance(failure, _StageFailure) else failure
                if not job.ignore_errors:
                    raise _failure_error(fn_name, index, exc) from exc
                failed.append(
                    FailedSample(
                        index, fn_name, type(exc).__name__, str(exc), "".join(traceback.format_exception(exc))
                    )
                )
            else:
                marks.append((index, after))
                before = after
            done += 1 if step == 1 else min(step, task.stop - index)
            if done >= 64:
                progress(done)
                done = 0
        drain()
        if done:
            progress(done)
    for name in job.names:
        for frag in session.flush(job.states[name]):
            fragments[name].append(frag.to_json())
    return TaskResult(task.number, task.start, task.stop, fragments, counts, failed)


def preflight(job: Job, first: Any, index: int) -> None:
    """Run the first sample here, before any worker starts, and check its outputs against data_out.

    The functions are instantiated through this thread's worker state, so when tasks also run in
    this thread (``num_workers=0``) a class-based function is built once, not twice.
    """
    stages = _state_for(job).stages
    final = SampleOut(job.names)
    last_fn = stages[-1][1]
    try:
        _run_sample(stages, first, index, final, job.check_lengths)
        _check_sample_counts(job, dict.fromkeys(job.names, 0), final.counts(), last_fn)
        session = WriteSession(lambda spec: None)  # type: ignore[arg-type,return-value]  # encode only, never writes
        for name, values in final.items().items():
            state = job.states[name]
            for v in values:
                enc = session.encode(state, v)
                if state.ndim is None:
                    # A new tensor's rank is decided here, once, from the first sample. Workers then
                    # blame the input whose output has another rank, rather than each task choosing
                    # its own and the tasks disagreeing at commit, where no input index is known.
                    state.ndim = len(enc.shape)
    except _StageFailure as failure:
        raise _failure_error(failure.function, index, failure.exc) from failure.exc
    except InvalidSampleError as exc:
        raise _failure_error(last_fn, index, exc) from exc
