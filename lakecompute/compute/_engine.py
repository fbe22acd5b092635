"""How ``eval`` runs, on the calling side: plan, preflight, tasks on a scheduler, commits in input
order. What each task does in its worker is in :mod:`lakecompute.compute._worker`.

::

    eval ─▶ plan (check arguments, resolve in place, split into tasks)
         ─▶ preflight (run the first sample here, check it against data_out)
         ─▶ scheduler.run(run_task, tasks)   each task reads its input range, runs the fused
         │                                    pipeline per sample, writes fragments into its own
         │                                    slots, and returns only their descriptions
         ─▶ apply results in task order, commit (at checkpoints and at the end) ─▶ EvalResult

Nothing per sample crosses a process boundary: tasks are ranges, results are fragment metadata.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute import compression
from lakecompute.compute._fingerprint import fingerprint_eval
from lakecompute.compute._inputs import DatasetSource, IterableSource, Source, make_source
from lakecompute.compute._samples import InputRow
from lakecompute.compute._worker import FailedSample, Job, Task, TaskResult, forget_job, preflight, run_task
from lakecompute.datasets import Dataset, DatasetView
from lakecompute.errors import (
    EvalConflictError,
    InvalidArgumentError,
    InvalidTypeError,
    LakeComputeError,
    ReadOnlyError,
    TransformError,
)
from lakecompute.schedulers import get_scheduler
from lakecompute.storage import (
    Fragment,
    TensorState,
    create_segment,
    new_segment_id,
)
from lakecompute.storage._segments import MAX_SLOTS

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline

__all__ = ["EvalResult", "FailedSample", "run_eval"]

MAX_TASK = 8192  # inputs per task: small enough to balance load, large enough to amortise a task's cost
BLOCK_BYTES = 16 << 20  # input read and output buffered per block, bounding a worker's memory


@dataclass(slots=True)
class EvalResult:
    """What an eval did.

    Attributes:
        inputs: input samples processed (skipped failures included).
        outputs: samples written, per tensor.
        failed: samples skipped with ``ignore_errors=True``, in input order.
        seconds: wall time.
        version: the version of ``data_out`` that holds the result.
        resumed_from: inputs already done by an earlier, interrupted run of the same eval.
    """

    inputs: int
    outputs: dict[str, int]
    failed: list[FailedSample]
    seconds: float
    version: int
    resumed_from: int = 0

    @property
    def failed_indices(self) -> list[int]:
        return [f.index for f in self.failed]

    def __repr__(self) -> str:
        extra = f", resumed_from={self.resumed_from}" if self.resumed_from else ""
        return (
            f"EvalResult(inputs={self.inputs}, outputs={self.outputs}, failed={len(self.failed)}, "
            f"seconds={self.seconds:.3f}, version={self.version}{extra})"
        )


# -- the parent side -------------------------------------------------------------------------------


def _parse_options(num_workers: Any, scheduler: Any, checkpoint_interval: Any, batch_size: Any) -> None:
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
        raise InvalidArgumentError(f"num_workers must be an int >= 0. Got {num_workers!r}.")
    if not isinstance(scheduler, str):
        raise InvalidTypeError(f"scheduler must be a name such as 'processed'. Got {scheduler!r}.")
    if (
        not isinstance(checkpoint_interval, int)
        or isinstance(checkpoint_interval, bool)
        or checkpoint_interval < 0
    ):
        raise InvalidArgumentError(
            f"checkpoint_interval must be an int >= 0 (0: no checkpoints). Got {checkpoint_interval!r}."
        )
    if batch_size is not None and (
        not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
    ):
        raise InvalidArgumentError(f"batch_size must be None or an int >= 1. Got {batch_size!r}.")


def _task_size(length: int | None, num_workers: int, checkpoint_interval: int, batch_size: int | None) -> int:
    # The largest task: about a quarter of a worker's share (so one slow region does not hold up the
    # rest), at most MAX_TASK; _plan_ranges makes the later tasks smaller.
    size = 1024 if length is None else min(MAX_TASK, max(1, math.ceil(length / max(1, 4 * num_workers))))
    if checkpoint_interval:
        size = min(size, checkpoint_interval)
    if batch_size:
        size = max(batch_size, (size // batch_size) * batch_size)
    return size


def _plan_ranges(
    length: int, size: int, num_workers: int, checkpoint_interval: int, batch_size: int | None, start: int = 0
) -> list[tuple[int, int]]:
    """Task ranges from ``start`` that never cross a checkpoint boundary.

    With several workers the sizes are *guided*: each task takes a share of what is left (about
    1 / (2 * num_workers)), down to a floor, so tasks shrink towards the end and the workers finish
    together instead of one idling while another runs a last large task. ``size`` caps every task.
    """
    floor = max(batch_size or 1, math.ceil(length / max(1, 16 * num_workers)))
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


def _block_size(sample_bytes: int, batch_size: int | None) -> int:
    block = max(
        1, min(MAX_TASK, BLOCK_BYTES // max(1, sample_bytes))
    )  # few, large reads: zarr's cost per call is ~ms
    if batch_size:
        block = max(batch_size, (block // batch_size) * batch_size)
    return block


def _estimate_bytes(value: Any) -> int:
    if isinstance(value, InputRow):
        return sum(_estimate_bytes(v) for v in value.to_dict().values())
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(_estimate_bytes(v) for v in value[:16]) * max(1, len(value)) // max(1, min(16, len(value)))
    return 64


def run_eval(
    pipeline: Pipeline,
    data_in: Any,
    data_out: Any,
    *,
    num_workers: int,
    scheduler: str,
    progressbar: bool,
    skip_ok: bool,
    check_lengths: bool,
    pad_data_in: bool,
    ignore_errors: bool,
    checkpoint_interval: int,
    batch_size: int | None,
) -> EvalResult:
    """Run ``pipeline`` over ``data_in`` into ``data_out`` (see :meth:`Pipeline.eval`)."""
    t0 = time.perf_counter()
    _parse_options(num_workers, scheduler, checkpoint_interval, batch_size)
    in_place = data_out is None
    if in_place:
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
    data_out._check_writable()
    if data_out._dirty or data_out._depth:
        raise InvalidArgumentError(
            f"data_out {data_out.path!r} has uncommitted changes or is inside a `with` block. Commit first: "
            "an eval commits on its own."
        )
    names = list(data_out._head.tensors)
    if not names:
        raise InvalidArgumentError(
            f"data_out {data_out.path!r} has no tensors. Create them first (ds.create_tensor or lc.like)."
        )
    source = make_source(data_in, pad_data_in)
    # Object-store clients (obstore, s3fs) hang or refuse to work in a child forked after the
    # parent used them, even when the child builds a fresh client (STORAGE-NOTES.md, "Processes").
    # So when any dataset involved is remote, a scheduler that forks its workers from this process
    # starts them another way (processed: from a clean fork server).
    involved = [data_out, data_in._base_ds() if isinstance(data_in, (Dataset, DatasetView)) else None]
    remote = any(ds is not None and not ds._backend.fork_safe for ds in involved)
    sched = get_scheduler(scheduler, num_workers)
    if remote and sched.needs_fork_safe_storage:
        sched = sched.without_fork()
    if not sched.shares_memory and not data_out._backend.shared_between_processes:
        raise InvalidArgumentError(
            f"data_out {data_out.path!r} lives in this process's memory, "
            "which worker processes cannot write. "
            "Use a local path, or scheduler='threaded' (or num_workers=0)."
        )

    # Snapshot of the output tensors the workers check samples against (no fragments: kept small).
    states = {
        n: TensorState(s.spec, dict(s.info), None if in_place else s.ndim)
        for n, s in data_out._head.tensors.items()
    }
    job = Job(
        token=uuid.uuid4().hex,
        pipeline=pipeline,
        source=source,
        out=data_out._backend.spec,
        states=states,
        segments={},
        tensor_pos={n: i for i, n in enumerate(names)},
        ignore_errors=ignore_errors,
        check_lengths=check_lengths,
        skip_ok=skip_ok,
        batch_size=batch_size,
        block=1,
        names=names,
    )

    # Checkpointed evals are identified by a fingerprint; a matching record in data_out's latest
    # version says how far an earlier run of the same eval got (or that it finished). Looked up
    # before the preflight, so that a completed rerun runs no user code at all.
    fp: str | None = None
    record: dict[str, Any] | None = None
    if checkpoint_interval:
        identity = source.identity()
        if in_place:
            identity = {
                **identity,
                "version": None,
            }  # in place, the input is the version the eval started from
        options = {
            "skip_ok": skip_ok, "check_lengths": check_lengths, "pad_data_in": pad_data_in,
            "ignore_errors": ignore_errors, "checkpoint_interval": checkpoint_interval,
            "batch_size": batch_size,
        }  # fmt: skip
        output = {
            "path": data_out.path,
            "in_place": in_place,
            "tensors": {n: s.spec.to_json() for n, s in data_out._head.tensors.items()},
            "options": options,
        }
        fp = fingerprint_eval(pipeline, identity, output)
        found = data_out._base.evals.get(fp)
        # A record counts only if nothing else was committed after it: otherwise this is a new eval.
        if isinstance(found, dict) and found.get("version") == data_out.version:
            record = found
        elif isinstance(found, dict) and found.get("status") == "running" and not in_place:
            # Its checkpointed outputs are visible in data_out, and something was committed after
            # them: neither resuming nor starting over would give each output once, in order.
            raise EvalConflictError(
                data_out.path, int(found["done"]), int(found["version"]), data_out.version
            )
        if record is not None and record.get("status") == "done":
            return EvalResult(
                int(record["inputs"]),
                {k: int(v) for k, v in record["outputs"].items()},
                [FailedSample(*f) for f in record.get("failed", [])],
                time.perf_counter() - t0,
                data_out.version,
                resumed_from=int(record["inputs"]),
            )
        if record is not None and in_place and isinstance(source, DatasetSource):
            source.version = int(record["base_version"])
            source._ds = None
    # The first sample: from the source, without consuming a streamed iterable.
    stream_items: Iterator[Any] | None = None
    if isinstance(source, IterableSource):
        it = iter(source.data)
        try:
            first_item = next(it)
        except StopIteration:
            return EvalResult(0, dict.fromkeys(names, 0), [], time.perf_counter() - t0, data_out.version)
        stream_items = itertools.chain([first_item], it)
        first: Any = [first_item] if batch_size else first_item
    else:
        if source.length == 0:
            return EvalResult(0, dict.fromkeys(names, 0), [], time.perf_counter() - t0, data_out.version)
        first = source.read(0, min(batch_size or 1, source.length or 1), batch=bool(batch_size))[0]
    job.block = _block_size(_estimate_bytes(first) // (batch_size or 1), batch_size)
    if not ignore_errors:
        try:
            preflight(job, first, 0)
        except TransformError as err:
            err.sample = first
            raise

    resume_from = int(record["done"]) if record is not None else 0
    base_version = int(record["base_version"]) if record is not None else data_out.version

    for name in names:
        codec = states[name].spec.chunk_compression or "none"
        if codec not in job.segments:
            seg = new_segment_id()
            create_segment(
                data_out._store, seg, compression.zarr_compressors(states[name].spec.chunk_compression)
            )
            job.segments[codec] = seg

    size = _task_size(source.length, num_workers, checkpoint_interval, batch_size)
    n_tensors = len(names)
    in_flight: dict[int, Task] = {}

    def tasks() -> Iterator[Task]:
        if stream_items is not None:
            assert isinstance(source, IterableSource)
            start = 0
            for number, chunk in enumerate(IterableSource(stream_items).chunks(size)):
                task = Task(number, start, start + len(chunk), _slot(number), chunk)
                in_flight[number] = task
                yield task
                start += len(chunk)
        else:
            assert source.length is not None
            for number, (a, b) in enumerate(
                _plan_ranges(source.length, size, num_workers, checkpoint_interval, batch_size, resume_from)
            ):
                task = Task(number, a, b, _slot(number))
                in_flight[number] = task
                yield task

    def _slot(number: int) -> int:
        slot = number * n_tensors
        if slot + n_tensors > MAX_SLOTS:
            raise LakeComputeError(f"Too many tasks for one eval ({number}); use a larger task size.")
        return slot

    if in_place:
        # The new content is built beside the old: the head starts empty (or with what a checkpoint
        # of an earlier run kept aside) and replaces the old tensors only at the final commit.
        kept = record.get("pending", {}) if record is not None else {}
        for name in names:
            state = data_out._head.tensors[name]
            state.fragments = []
            state.ndim = None
            for row in kept.get(name, []):
                data_out._add_fragment(name, Fragment.from_json(row))
            data_out._readers.pop(name, None)
        data_out._dirty = True

    outputs = {n: int(record["outputs"].get(n, 0)) if record else 0 for n in names}
    failed: list[FailedSample] = [FailedSample(*f) for f in record.get("failed", [])] if record else []
    inputs_done = resume_from
    pending: dict[int, TaskResult] = {}
    next_number = 0
    label = " → ".join(f.name for f in pipeline.functions)
    bar = _progress_bar(progressbar, source.length, label)

    def eval_record(status: str) -> dict[str, Any]:
        assert fp is not None
        rec: dict[str, Any] = {
            "status": status,
            "done": inputs_done,
            "inputs": inputs_done,
            "outputs": dict(outputs),
            "failed": [[f.index, f.function, f.error_type, f.message, f.traceback] for f in failed],
            "base_version": base_version,
            "functions": label,
            "version": data_out.version + 1,
        }
        if in_place and status != "done":
            rec["pending"] = {n: [f.to_json() for f in data_out._head.tensors[n].fragments] for n in names}
        evals = dict(data_out._base.evals)
        evals[fp] = rec
        return evals

    def checkpoint() -> None:
        message = f"eval {label}: checkpoint at {inputs_done}"
        if in_place:
            data_out._commit_record(message, eval_record("running"))
        else:
            data_out._commit(message, evals=eval_record("running") if fp else None)

    def apply(res: TaskResult) -> None:
        nonlocal inputs_done
        for name, rows in res.fragments.items():
            for row in rows:
                data_out._add_fragment(name, Fragment.from_json(row))
        for name, c in res.counts.items():
            outputs[name] += c
        failed.extend(res.failed)
        inputs_done = res.stop

    if bar is not None and resume_from:
        bar.update(resume_from)
    runner = sched.run(
        lambda task, progress: run_task(job, task, progress),
        tasks(),
        on_progress=bar.update if bar is not None else None,
    )
    try:
        with _sigterm_as_interrupt(), contextlib.closing(runner):
            for _position, res in runner:
                pending[res.number] = res
                while next_number in pending:
                    done = pending.pop(next_number)
                    in_flight.pop(next_number, None)
                    apply(done)
                    next_number += 1
                    at_end = source.length is not None and done.stop == source.length
                    if checkpoint_interval and done.stop % checkpoint_interval == 0 and not at_end:
                        checkpoint()
            data_out._commit(
                f"eval {label}" + (" (in place)" if in_place else ""),
                evals=eval_record("done") if fp else None,
            )
    except TransformError as err:
        data_out.rollback()
        if err.sample is None and err.index is not None:
            err.sample = _sample_for(source, in_flight, err.index)
        raise
    except BaseException:
        data_out.rollback()
        raise
    finally:
        if bar is not None:
            bar.close()
        forget_job(job.token)
    return EvalResult(inputs_done, outputs, failed, time.perf_counter() - t0, data_out.version, resume_from)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while an eval runs, so it stops workers and commits nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"eval stopped by signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _sample_for(source: Source, in_flight: dict[int, Task], index: int) -> Any:
    """The failing input sample for TransformError.sample, read here (it never travels back)."""
    for task in in_flight.values():
        if task.items is not None and task.start <= index < task.stop:
            return task.items[index - task.start]  # a streamed sample: only its task holds it
    try:
        return source.sample(index)  # None for a stream whose task is gone
    except Exception:
        return None  # the error itself matters more than a sample we cannot re-read


def _progress_bar(enabled: bool, total: int | None, label: str) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"eval {label}", unit="sample", dynamic_ncols=True, leave=False)
