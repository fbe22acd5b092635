"""The worker side of an eval: what runs for each task, wherever the scheduler puts it.

A task reads its own input range (datasets: from the committed version; sequences: by index), runs the
fused pipeline per sample, checks and buffers the outputs, writes them as fragments into the task's
own slots (through the dataset layer's `lakecompute.datasets.TaskWriter`), and returns only
fragment descriptions and counts (`TaskResult`). Reading the next block and writing the previous one
overlap the function's run on the current block (``_overlap``: bounded threads, order unchanged). A
sample that fails ends the task with a `TaskFailure` in its result — a value, not an exception, so
that the engine can still wait for the tasks before it (see ``_engine``). Per-worker state (the
stages, with class-based functions instantiated) is built once per worker and eval.
"""

from __future__ import annotations

import functools
import operator
import os
import pickle
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from lakecompute.compute._inputs import Source, estimate_bytes
from lakecompute.compute._overlap import ReadAhead, Stages, WriteBehind
from lakecompute.compute._plan import BLOCK_BYTES, block_size
from lakecompute.compute._runner import (
    Stage,
    StageFailure,
    absorb_return,
    build_stages,
    run_sample,
)
from lakecompute.compute._samples import SAMPLE_ROWS, SampleOut
from lakecompute.datasets import (
    Decisions,
    FailedSample,
    OutputSchema,
    SlotGrant,
    TaskWriter,
    TensorSchema,
    written_in_place,
)
from lakecompute.errors import InvalidArgumentError, InvalidSampleError
from lakecompute.htypes import Encoded
from lakecompute.schedulers import ProgressFn, portable_exception, reseed_globals

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline
    from lakecompute.compute._options import EvalOptions
    from lakecompute.storage import Fragment

__all__ = ["Job", "Task", "TaskFailure", "TaskResult", "forget_job", "preflight", "run_task"]

#: Samples the preflight tries, at most, to find one whose outputs decide ranks and dtypes (it goes on
#: past the first only when that one failed under ``ignore_errors`` or wrote nothing).
PREFLIGHT_SCAN = 64


@dataclass(frozen=True, slots=True)
class Task:
    """A range of inputs for one worker.

    Attributes:
        number: the task's place in input order (-1 for the preflight).
        start, stop: the inputs ``data_in[start:stop]``.
        items: those inputs themselves, for streamed (length-less) input only.
        decided: the decided output schema to check outputs against (None for the preflight, which
            makes the decisions).
        warm: a warm-up: only build this worker's stages (a class-based function's ``__init__``), so
            that every worker loads its model while the first one runs the preflight.
    """

    number: int
    start: int
    stop: int
    items: list[Any] | None = None
    decided: Decided | None = None
    warm: bool = False

    @property
    def preflight(self) -> bool:
        return self.decided is None and not self.warm

    def describe(self) -> str:
        return f"{self.number} (data_in[{self.start}:{self.stop}])"  # read as "task 3 (data_in[a:b])"

    def __repr__(self) -> str:
        return f"Task({self.number}, data_in[{self.start}:{self.stop}])"


@dataclass(frozen=True, slots=True)
class Decided:
    """What the preflight's outputs decided, carried by every later task.

    Attributes:
        schema: the output schema with ranks decided.
        expected: per output tensor, the values one input writes in the common case (1 for the tensors
            the first input wrote, 0 for the others); an input that writes otherwise is checked.
        aligned: every input must write exactly ``expected`` (in place, with tensors kept).
        block: inputs read and processed at once (bounds a worker's memory; see `block_size`).
    """

    schema: OutputSchema
    expected: tuple[int, ...]
    aligned: bool
    block: int = 1


def decide_outputs(job: Job, decisions: Decisions, block: int) -> Decided:
    """What the preflight's ``decisions`` mean for every task (the preflight's own included): the decided
    schema, the values one input writes per tensor in the common case, whether outputs must stay
    aligned (in place, with kept tensors that hold rows), and ``block``, the inputs a task reads at
    once (sized from the first input, which only the preflight reads)."""
    schema = job.schema.decided(decisions)
    names = schema.names
    written = decisions.written or names
    aligned = False
    if job.in_place:
        replaced = written_in_place(names, decisions, replace_all=not job.options.skip_ok)
        aligned = any(job.lengths.get(n, 0) for n in names if n not in replaced)
        written = replaced if aligned else written
    return Decided(schema, tuple(int(name in written) for name in names), aligned, block)


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """The sample a task stopped at: user code failed on it (or wrote what cannot be stored).

    Attributes:
        index: the sample's position in ``data_in``.
        function: the compute function to blame.
        exc: the exception (a `RemoteError` standing in for one that cannot cross processes).
        traceback: the exception's traceback, formatted where it was raised.
        where: the innermost frame of that traceback in the user's code (two indented lines), or "".
        step: the pipeline step that failed (its position), or None when no step is to blame.
        step_input: what a later step (not the first) was given, as a dict of tensor -> value; None for
            the first step (its input is the sample, read again in the caller) or when it cannot travel.
    """

    index: int
    function: str
    exc: BaseException
    traceback: str
    where: str = ""
    step: int | None = None
    step_input: Any = None


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What a task sends back: fragment descriptions and counts, never sample data."""

    number: int
    start: int
    stop: int
    fragments: Mapping[str, Sequence[Fragment]]
    counts: Mapping[str, int]
    failed: tuple[FailedSample, ...]
    failure: TaskFailure | None = None
    decisions: Decisions | None = None  # the preflight's
    block: int = 0  # the preflight's: inputs per block, from the first input (see `block_size`)
    stages: Mapping[str, float] = field(default_factory=dict)  # seconds per stage (see _overlap.Stages)


@dataclass(frozen=True, slots=True)
class Job:
    """Everything a worker needs, fixed once before the first task starts.

    Attributes:
        token: identifies the eval (per-worker state is kept per eval).
        pipeline: the functions to run.
        source: where the inputs come from.
        grant: where the outputs go.
        schema: the output schema before any decision (the preflight decides ranks from it).
        options: the eval's options, whole; their ``seed`` is the one the plan resolved (never None).
        parent_pid: the process that planned the eval (workers elsewhere reseed global generators).
        in_place: whether the eval writes into the dataset it reads.
        lengths: in place, the lengths of ``data_out``'s tensors before the eval (which of the kept
            tensors hold rows decides whether outputs must stay aligned, see `decide_outputs`).
    """

    token: str
    pipeline: Pipeline
    source: Source
    grant: SlotGrant
    schema: OutputSchema
    options: EvalOptions
    parent_pid: int
    in_place: bool = False
    lengths: Mapping[str, int] = field(default_factory=dict)

    @property
    def seed(self) -> int:
        """The seed of the functions' ``rng`` generators (resolved by the plan)."""
        assert self.options.seed is not None, "the plan resolves the seed before a job is made"
        return self.options.seed


# -- per-worker state --------------------------------------------------------------------------------

# Keyed by eval, process and thread: a forked worker inherits the parent's entries but never matches them.
_WORKER_STATE: dict[tuple[str, int, int], list[Stage]] = {}
_WORKER_LOCK = threading.Lock()


def _stages_for(token: str, pipeline: Pipeline, parent_pid: int) -> list[Stage]:
    """This worker's stages for eval ``token``: built (class-based functions instantiated) once."""
    key = (token, os.getpid(), threading.get_ident())
    stages = _WORKER_STATE.get(key)
    if stages is None:
        with _WORKER_LOCK:
            # A worker that outlives its eval (a Ray worker, a thread of a long-lived process) would
            # otherwise keep every earlier eval's state — models included — alive.
            for old in [k for k in _WORKER_STATE if k[1:] == key[1:]]:
                del _WORKER_STATE[old]
            if os.getpid() != parent_pid:
                # The processed scheduler's workers did at start; a Ray worker has not.
                reseed_globals()
        # Built outside the lock: the key is this thread's own, and the threads of one process load
        # their models at the same time (a lock here would make them take turns).
        stages = build_stages(pipeline)
        with _WORKER_LOCK:
            _WORKER_STATE[key] = stages
    return stages


def forget_job(token: str) -> None:
    """Drop this process's per-worker state of a finished eval (its instances)."""
    with _WORKER_LOCK:
        for key in [k for k in _WORKER_STATE if k[0] == token]:
            del _WORKER_STATE[key]


# -- checks shared by the preflight and the tasks --------------------------------------------------


def check_counts(
    written: Mapping[str, int], names: Sequence[str], *, skip_ok: bool, check_lengths: bool, function: str
) -> None:
    """Check what one input wrote (tensor -> values); raises StageFailure blaming ``function``."""
    written = {k: v for k, v in written.items() if v}
    if not written:
        return  # a filter: no output for this input
    if check_lengths and len(set(written.values())) > 1:
        raise StageFailure(
            function,
            InvalidArgumentError(
                f"the function wrote different numbers of samples per tensor for one input: {written}. "
                "Write every tensor the same number of times, or pass check_lengths=False."
            ),
        )
    missing = [k for k in names if k not in written]
    if missing and not skip_ok:
        raise StageFailure(
            function,
            InvalidArgumentError(
                f"the function wrote {sorted(written)} but not {missing} of data_out. Write every tensor "
                "of data_out, or pass skip_ok=True to leave the others short."
            ),
        )


def _alignment_error(function: str, written: Mapping[str, int], expected: Mapping[str, int]) -> StageFailure:
    replaced = sorted(k for k, v in expected.items() if v)
    kept = sorted(k for k, v in expected.items() if not v)
    written = {k: v for k, v in written.items() if v or expected[k]}
    return StageFailure(
        function,
        InvalidArgumentError(
            f"in place, with tensors {kept} kept, every input must give exactly one value to each of "
            f"{replaced} and nothing else, so that rows stay aligned; this input gave {dict(written)}. "
            "To filter, or to write several outputs per input, write into a new dataset "
            "(data_out=lc.like(path, ds)) instead of in place."
        ),
    )


def _failure(
    index: int, function: str, exc: BaseException, parent_pid: int, failure: StageFailure | None = None
) -> TaskFailure:
    """The failure of ``data_in[index]``; its exception (and a later step's input) made portable when
    they must cross processes."""
    text = "".join(traceback.format_exception(exc))
    here = os.getpid() == parent_pid
    portable = exc if here else portable_exception(exc, text)
    step = failure.step if failure is not None else None
    step_input = None
    if failure is not None and step:  # the first step's input is the sample: the caller reads it again
        step_input = failure.step_input
        step_input = step_input.to_dict() if isinstance(step_input, SAMPLE_ROWS) else step_input
        step_input = step_input if here or _travels(step_input) else None
    return TaskFailure(index, function, portable, text, _user_frame(exc), step, step_input)


def _travels(value: Any) -> bool:
    """Whether ``value`` can be sent back to the caller's process."""
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_frame(exc: BaseException) -> str:
    """Where in the user's code ``exc`` was raised: its innermost frame outside lakecompute."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_PACKAGE)]
    if not frames:
        return ""
    frame = frames[-1]
    code = f"\n    {frame.line}" if frame.line else ""
    return f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}{code}\n'


class _Stop(Exception):
    """Ends a task at its first failing sample (carried in its result, see TaskFailure)."""

    def __init__(self, failure: TaskFailure) -> None:
        super().__init__(failure.index)
        self.failure = failure


# -- one task ----------------------------------------------------------------------------------------


class _TaskRun:
    """One task in a worker: reading blocks, running samples, buffering and writing outputs."""

    def __init__(self, job: Job, task: Task, progress: ProgressFn, overlap: bool = True) -> None:
        assert task.decided is not None
        self.job = job
        self.task = task
        self.decided = task.decided
        self.progress = progress
        self.stages = _stages_for(job.token, job.pipeline, job.parent_pid)
        self.writer = TaskWriter(job.grant, task.decided.schema, task.number)
        self.names = task.decided.schema.names
        self.final = SampleOut(self.names)
        # The per-sample bookkeeping is the engine's overhead on small samples, so it works on plain
        # lists: the output lists of ``final`` (stable objects: reset and truncate empty them in place),
        # their lengths before and after each sample, the input index of each kept sample (``marks``),
        # and the lengths after the few kept samples that wrote other than ``expected`` (``unusual``, by
        # their place in ``marks``): from these a failing value's input index is found when needed. Only
        # numbers are kept per sample: objects kept per sample would wake the garbage collector.
        self.lists = [self.final.items()[n] for n in self.names]
        self.marks: list[int] = []
        self.unusual: dict[int, list[int]] = {}
        # Kept samples buffered between drains: set from the outputs of the task's first sample (see
        # _kept), since a block is sized from its inputs, which may be far smaller than the outputs.
        self.drain_every = 0
        self.counts = dict.fromkeys(self.names, 0)
        # Outputs checked already, by tensor (the preflight's): the next drain writes them as they are.
        self.checked: dict[str, np.ndarray | list[Encoded]] = {}
        self.failed: list[FailedSample] = []
        self.last_fn = self.stages[-1].name
        single = len(self.stages) == 1 and not self.stages[0].wants_rng
        self.call = self._call_one if single else self._call_all
        options = job.options
        #: The common case, run by the shortest loop (`_run_plain`): one function, one input at a time.
        self.plain = single and options.batch_size is None and not options.ignore_errors
        #: Check each input's outputs as it is run, so that a refused value skips only its own input
        #: (``ignore_errors``); the values checked are written as they are.
        self.check_each = options.ignore_errors
        self.seconds = Stages()
        self.overlap = overlap
        self.writes = WriteBehind(overlap, self.seconds)

    def run(self) -> TaskResult:
        """Run the task: its blocks read ahead, run here, written behind; its result, or its first failure."""
        t0 = time.perf_counter()
        blocks = self.blocks()
        busy = 0.0
        try:
            for samples in blocks:
                t1 = time.perf_counter()
                self.run_block(samples)
                self.drain()
                busy += time.perf_counter() - t1
            result = self.result()
        except _Stop as stop:
            first = self.writes.settle(stop)  # an earlier block's write may have failed first
            if not isinstance(first, _Stop):
                raise first from None
            return TaskResult(self.task.number, self.task.start, self.task.stop, {}, {}, (), first.failure)
        finally:
            blocks.close()
            self.writes.close()
        self.seconds.run = busy - self.writes.waited
        self.seconds.wall = time.perf_counter() - t0
        return replace(result, stages=self.seconds.as_dict())

    # -- reading ---------------------------------------------------------------------------------
    def blocks(self) -> ReadAhead[Iterable[tuple[int, Any]]]:
        """The task's inputs, a block at a time, as ``(index, sample_in)`` pairs, read ahead of their use
        on reader threads (see `_readers`); the rows of a block read ahead are made as they are run."""
        task, job, block = self.task, self.job, self.decided.block
        ranges = [(s, min(task.stop, s + block)) for s in range(task.start, task.stop, block)]
        threads = _readers(job) if self.overlap else 0
        return ReadAhead(functools.partial(_samples, job, task), ranges, threads, self.seconds)

    # -- running ---------------------------------------------------------------------------------
    def _call_one(self, sample: Any, index: int, before: list[int]) -> None:
        stage = self.stages[0]
        try:
            value = stage.call(sample, self.final)
            if value is not None and value is not self.final:
                wrote = list(map(len, self.lists)) != before
                absorb_return(value, self.final, wrote, stage.name, self.job.options.batch_size is not None)
        except Exception as error:
            raise StageFailure(stage.name, error, 0, sample) from error

    def _call_all(self, sample: Any, index: int, before: list[int]) -> None:
        job = self.job
        run_sample(
            self.stages, sample, index, self.final, check_lengths=job.options.check_lengths, seed=job.seed,
            batched=job.options.batch_size is not None,
        )  # fmt: skip

    def run_block(self, samples: Iterable[tuple[int, Any]]) -> None:
        """Run the pipeline on each sample of a block; outputs stay in ``final`` until drained."""
        if self.plain and self.call == self._call_one:
            self._run_plain(samples)
            return
        lists, expected, call, sub = self.lists, list(self.decided.expected), self.call, operator.sub
        progress = self.progress
        step = self.job.options.batch_size or 1
        done = 0
        before = list(map(len, lists))  # then each sample's "after" (or, if it failed, its "before")
        for index, sample in samples:
            try:
                call(sample, index, before)
                after = list(map(len, lists))
                usual = list(map(sub, after, before)) == expected
                if not usual:  # not the common case: check it
                    self._check(before, after, min(step, self.task.stop - index))
                if self.check_each:
                    self._check_values(before)
            except (StageFailure, InvalidSampleError) as failure:
                self._failed(index, failure, before)
            else:
                before = self._kept(index, before, after, usual)
            progress(0)  # a cancellation point: a failed or stopped run ends this task here
            done += min(step, self.task.stop - index)
            if done >= 64:
                progress(done)
                done = 0
        if done:
            progress(done)

    def _run_plain(self, samples: Iterable[tuple[int, Any]]) -> None:
        """`run_block` for one function given one input at a time, errors not ignored: the same checks
        and the same outcome, in the fewest steps per sample (this loop is the engine's whole cost on
        small samples)."""
        stage, final, lists, expected = self.stages[0], self.final, self.lists, list(self.decided.expected)
        fn, marks, progress, sub = stage.call, self.marks, self.progress, operator.sub
        before = list(map(len, lists))
        done = 0
        for index, sample in samples:
            try:
                value = fn(sample, final)
                if value is not None and value is not final:
                    absorb_return(value, final, list(map(len, lists)) != before, stage.name)
            except Exception as error:
                self._failed(index, StageFailure(stage.name, error, 0, sample), before)  # raises
            after = list(map(len, lists))
            if list(map(sub, after, before)) == expected and self.drain_every:
                marks.append(index)  # the common case: nothing else to do
                before = after
                if len(marks) >= self.drain_every:
                    self.drain()
                    before = list(map(len, lists))
            else:
                try:
                    self._check(before, after, 1)
                except (StageFailure, InvalidSampleError) as failure:
                    self._failed(index, failure, before)  # raises
                before = self._kept(index, before, after, list(map(sub, after, before)) == expected)
            progress(0)  # a cancellation point: a failed or stopped run ends this task here
            done += 1
            if done == 64:
                progress(64)
                done = 0
        if done:
            progress(done)

    def _kept(self, index: int, before: list[int], after: list[int], usual: bool) -> list[int]:
        """Mark a sample's outputs as kept (``usual``: it wrote ``expected``); drain once BLOCK_BYTES of
        outputs are buffered. Returns the output lengths the next sample starts from.

        A block holds BLOCK_BYTES of *input*: a file name or an annotation's JSON in, an image and its
        masks out, and a block of 8,192 inputs would hold gigabytes of outputs until its end (and every
        one of them a new allocation the kernel must fault in and zero)."""
        if not usual:
            self.unusual[len(self.marks)] = after
        self.marks.append(index)
        if not self.drain_every:  # the first sample that wrote something sets it
            grew = [v for values, b, a in zip(self.lists, before, after, strict=True) for v in values[b:a]]
            if grew:
                self.drain_every = max(1, BLOCK_BYTES // max(1, sum(map(estimate_bytes, grew))))
        if not self.drain_every or len(self.marks) < self.drain_every:
            return after
        self.drain()
        return list(map(len, self.lists))

    def _check(self, before: list[int], after: list[int], inputs: int) -> None:
        """Check what one input (or one batch of ``inputs`` inputs) wrote, when it was unusual."""
        job, names = self.job, self.names
        written = {n: a - b for n, a, b in zip(names, after, before, strict=True)}
        expected = {n: e * inputs for n, e in zip(names, self.decided.expected, strict=True)}
        if self.decided.aligned and written != expected:
            raise _alignment_error(self.last_fn, written, expected)
        check_counts(
            written,
            names,
            skip_ok=job.options.skip_ok,
            check_lengths=job.options.check_lengths,
            function=self.last_fn,
        )

    def _check_values(self, before: list[int]) -> None:
        """Check this sample's outputs now, so that a bad value skips only its own sample; keep them, as
        checked, for the drain (all of the sample's, or, when one is refused, none)."""
        encoded = {}
        for name, values, b in zip(self.names, self.lists, before, strict=True):
            if len(values) > b:
                encoded[name] = [self.writer.encode(name, v) for v in values[b:]]
        for name, items in encoded.items():
            kept = self.checked.setdefault(name, [])
            assert isinstance(kept, list)
            kept.extend(items)

    def _failed(self, index: int, failure: StageFailure | InvalidSampleError, before: list[int]) -> None:
        self.final.truncate(dict(zip(self.names, before, strict=True)))
        function = failure.function if isinstance(failure, StageFailure) else self.last_fn
        exc = failure.exc if isinstance(failure, StageFailure) else failure
        if not self.job.options.ignore_errors:
            stage = failure if isinstance(failure, StageFailure) else None
            raise _Stop(_failure(index, function, exc, self.job.parent_pid, stage))
        tb = "".join(traceback.format_exception(exc))
        self.failed.append(FailedSample(index, function, type(exc).__name__, str(exc), tb))

    # -- writing ---------------------------------------------------------------------------------
    def drain(self) -> None:
        """Hand the outputs buffered in ``final`` to the writer, which checks, encodes, buffers and (when
        buffers fill) writes them behind the function (`WriteBehind`); empty ``final``. What the writer
        needs is taken now (the lists, a batched function's columns, the marks, what was checked
        already), since ``final`` is emptied for the next samples."""
        checked, self.checked = self.checked, {}
        batched = self.job.options.batch_size is not None
        taken = []
        for k, (name, values) in enumerate(self.final.items().items()):
            if values:
                runs = self.final.runs(name) if batched else None
                taken.append((k, name, list(values), runs, checked.get(name)))
                self.counts[name] += len(values)
        marks, unusual = list(self.marks), dict(self.unusual)
        self.final.reset()
        self.marks.clear()
        self.unusual.clear()
        if taken:
            self.writes.submit(functools.partial(self._write, taken, marks, unusual))

    def _write(self, taken: list[_Taken], marks: list[int], unusual: dict[int, list[int]]) -> None:
        """Check, encode and buffer one drain's outputs (on the writer thread; in order)."""
        expected = self.decided.expected
        for k, name, values, runs, done in taken:
            if done is not None:  # checked already (the preflight's, or ignore_errors' per sample)
                self.writer.add(name, done)
                continue
            owners = functools.partial(_owners, marks, unusual, expected[k], k)
            self.writer.add(name, self._encode(name, values, owners, runs))

    def _encode(
        self, name: str, values: list[Any], owners: Any, runs: list[np.ndarray] | None
    ) -> np.ndarray | list[Encoded]:
        try:
            return check_values(self.writer, name, values, runs, owners)
        except _BadValue as bad:
            raise _Stop(_failure(bad.index, self.last_fn, bad.exc, self.job.parent_pid)) from bad.exc

    def result(self) -> TaskResult:
        """The task's result, once every write has ended (raises a write's error)."""
        self.writes.wait()
        t0 = time.perf_counter()
        fragments = self.writer.finish()
        self.seconds.write += time.perf_counter() - t0
        task = self.task
        return TaskResult(task.number, task.start, task.stop, fragments, self.counts, tuple(self.failed))


#: One tensor's outputs of a drain, as the writer thread takes them: its position, name, values, a
#: batched function's columns (or None) and the values checked already (or None).
_Taken = tuple[int, str, list[Any], list[np.ndarray] | None, "np.ndarray | list[Encoded] | None"]


def _readers(job: Job) -> int:
    """Reader threads per task: what the source allows (none for input already in memory, one for a
    sequence whose ``__getitem__`` is the user's), and for datasets a share of this machine's CPUs per
    worker (decoding, which releases the GIL, then runs in parallel)."""
    allowed = job.source.parallel_reads
    if allowed <= 1:
        return allowed
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(allowed, cpus // max(1, job.options.num_workers)))


def _samples(job: Job, task: Task, start: int, stop: int) -> Iterable[tuple[int, Any]]:
    """Inputs ``start..stop`` of ``task`` as ``(index, sample_in)`` pairs (batches with batch_size), read
    now; the pairs and rows of dataset input are made as they are taken."""
    batch = job.options.batch_size
    if task.items is not None:
        items = task.items[start - task.start : stop - task.start]
        if batch:
            return [(start + b, items[b : b + batch]) for b in range(0, len(items), batch)]
        return list(zip(range(start, stop), items, strict=True))
    source = job.source
    if batch:
        return list(zip(range(start, stop, batch), source.read_batches(start, stop, batch), strict=True))
    return zip(range(start, stop), source.read_block(start, stop, batch=False), strict=True)


class _BadValue(Exception):
    """A value refused by its tensor's checks, and the input that wrote it."""

    def __init__(self, index: int, exc: InvalidSampleError) -> None:
        super().__init__(index, exc)
        self.index = index
        self.exc = exc


class _Checks(Protocol):
    """What checks a tensor's values: a `TaskWriter` (against the decided schema), or `_SchemaChecks`."""

    @property
    def schemas(self) -> Mapping[str, TensorSchema]: ...

    def encode(self, name: str, value: object) -> Encoded: ...
    def encode_many(self, name: str, values: object) -> np.ndarray | list[Encoded]: ...
    def encode_ragged(self, name: str, values: list[Any]) -> list[Encoded] | None: ...


class _SchemaChecks:
    """The preflight's checks: the first outputs against the undecided schema, as a `TaskWriter` checks
    later outputs against the decided one (so that they are checked once, and written as checked)."""

    def __init__(self, schema: OutputSchema) -> None:
        self._schemas = schema.tensors

    @property
    def schemas(self) -> Mapping[str, TensorSchema]:
        return self._schemas

    def encode(self, name: str, value: object) -> Encoded:
        return self.schemas[name].encode(value)

    def encode_many(self, name: str, values: object) -> np.ndarray | list[Encoded]:
        schema = self.schemas[name]
        assert isinstance(values, np.ndarray)
        block = schema.encode_block(values)
        if block is not None:
            return block
        out: list[Encoded] = []
        for v in values:
            out.append(schema.encode(v, len(out[0].shape) if out else None))
        return out

    def encode_ragged(self, name: str, values: list[Any]) -> list[Encoded] | None:
        return self.schemas[name].encode_ragged(values)


def check_values(
    checks: _Checks, name: str, values: list[Any], runs: list[np.ndarray] | None, owners: Any
) -> np.ndarray | list[Encoded]:
    """Check a tensor's buffered values: as one block when they stack (or are a batched function's
    columns, ``runs``), joined when they are ragged arrays, else one by one, to blame the value refused.

    Raises:
        _BadValue: a value is refused; with the input (from ``owners()``) that wrote it.
    """
    if checks.schemas[name].spec.kind == "array":
        block = _joined_runs(runs)
        if block is None:
            block = _fast_block(values)
        if block is not None:
            try:
                return checks.encode_many(name, block)
            except InvalidSampleError:
                pass  # find the sample to blame below
        else:
            # Arrays whose first dimension varies (an image's boxes): checked joined, unless a value is
            # refused, which the per-sample loop below then finds and blames.
            ragged = checks.encode_ragged(name, values)
            if ragged is not None:
                return ragged
    items = []
    first: int | None = None
    for v, owner in zip(values, owners(), strict=True):
        try:
            enc = checks.encode(name, v)
            if isinstance(checks, _SchemaChecks):  # the rank is not decided: one rank per tensor
                checks.schemas[name].check_rank(len(enc.shape), first)
                first = len(enc.shape) if first is None else first
            items.append(enc)
        except InvalidSampleError as exc:
            raise _BadValue(owner, exc) from exc
    return items


def _joined_runs(runs: list[np.ndarray] | None) -> np.ndarray | None:
    """A batched function's output columns joined (one copy), as `_fast_block` would stack their rows:
    None unless they share dtype (numeric) and row shape."""
    if not runs:
        return None
    first = runs[0]
    if first.dtype.kind not in "biufc" or first.ndim < 1:
        return None
    if any(r.dtype != first.dtype or r.shape[1:] != first.shape[1:] for r in runs):
        return None
    return np.concatenate(runs) if len(runs) > 1 else np.ascontiguousarray(first)


def _fast_block(values: list[Any]) -> np.ndarray | None:
    """Stack a tensor's values when they are arrays (or numbers) of one shape and dtype."""
    first = values[0]
    if isinstance(first, np.ndarray):
        return _stack_arrays(values, first) if first.dtype.kind in "biufc" else None
    if isinstance(first, (int, float, np.generic)) and not isinstance(first, (bool, str)):
        arr = np.asarray(values)
        if arr.ndim == 1 and arr.dtype.kind in "biuf":
            return arr
    return None


_SHAPE, _DTYPE = operator.attrgetter("shape"), operator.attrgetter("dtype")


def _stack_arrays(values: list[Any], first: np.ndarray) -> np.ndarray | None:
    # The checks run in C (map over the values, a set of what they give): a Python loop over 8,192 small
    # images costs as much as stacking them.
    types = set(map(type, values))
    exact = types == {np.ndarray}
    if not exact and not all(issubclass(t, np.ndarray) for t in types):
        return None
    if set(map(_SHAPE, values)) != {first.shape} or set(map(_DTYPE, values)) != {first.dtype}:
        return None
    if not exact:
        return np.stack(values)
    # The same result as np.stack, without its per-array expand_dims: 1.5x faster on small images, 10x
    # on scalars (once per output value, so it shows on small samples).
    if not first.shape:
        return np.array(values, dtype=first.dtype)
    return np.concatenate(values).reshape((len(values), *first.shape))


def _owners(marks: list[int], unusual: dict[int, list[int]], expected: int, k: int) -> list[int]:
    """The input index of each buffered value of tensor ``k``: each kept sample (``marks``) wrote
    ``expected`` values of it, but for the ``unusual`` ones, whose lengths after them are recorded."""
    out: list[int] = []
    prev = 0
    for position, index in enumerate(marks):
        after = unusual[position][k] if position in unusual else prev + expected
        if after > prev:
            out.extend([index] * (after - prev))
        prev = after
    return out


def run_task(job: Job, task: Task, progress: ProgressFn) -> TaskResult:
    """Run one task: read its inputs, run the pipeline per sample, write fragments (or, for the
    preflight task, decide how every later task writes)."""
    if task.warm:
        _stages_for(job.token, job.pipeline, job.parent_pid)
        return TaskResult(task.number, task.start, task.stop, {}, {}, ())
    if task.preflight:
        return _run_preflight(job, task, progress)
    return _TaskRun(job, task, progress).run()


# -- the preflight -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Checked:
    """What the preflight computed for one input: its outputs, and the same checked (by tensor)."""

    values: dict[str, list[Any]]
    checked: dict[str, np.ndarray | list[Encoded]]


#: What the preflight computed for one input: its outputs (checked), or what it failed with.
_Outcome = _Checked | StageFailure | InvalidSampleError


def preflight(
    job: Job, samples: Iterable[tuple[int, Any]]
) -> tuple[Decisions, TaskFailure | None, dict[int, _Outcome]]:
    """Run the first samples here and derive the output decisions from the first that writes something.

    ``job``'s schema is the undecided one. Normally one sample is enough. Under ``ignore_errors`` a failing
    sample is passed over, and a sample that writes nothing (a filter) is too, up to `PREFLIGHT_SCAN`
    samples. ``samples`` is consumed no further than the samples run (it may read them as it goes).

    Returns:
        The decisions (empty if no sample wrote anything); the failure of the first sample when it
        failed and errors are not ignored (the eval stops there); and what each sample run gave, by
        input index, so that the preflight's task writes those outputs instead of computing them again.
    """
    stages = _stages_for(job.token, job.pipeline, job.parent_pid)
    outcomes: dict[int, _Outcome] = {}
    for n, (index, sample) in enumerate(samples):
        final = SampleOut(job.schema.names)
        try:
            run_sample(
                stages, sample, index, final, check_lengths=job.options.check_lengths, seed=job.seed,
                batched=job.options.batch_size is not None,
            )  # fmt: skip
            check_counts(
                final.counts(),
                job.schema.names,
                skip_ok=job.options.skip_ok,
                check_lengths=job.options.check_lengths,
                function=stages[-1].name,
            )
            checked = _check_first(job, final, index)
            decisions = job.schema.decide_checked(checked)
        except (StageFailure, InvalidSampleError) as failure:
            if not job.options.ignore_errors:
                function = failure.function if isinstance(failure, StageFailure) else stages[-1].name
                exc = failure.exc if isinstance(failure, StageFailure) else failure
                stage = failure if isinstance(failure, StageFailure) else None
                return Decisions({}, ()), _failure(index, function, exc, job.parent_pid, stage), outcomes
            outcomes[index] = failure
            continue
        outcomes[index] = _Checked(final.items(), checked)
        if decisions.written or n + 1 >= PREFLIGHT_SCAN:
            return decisions, None, outcomes
    return Decisions({}, ()), None, outcomes


def _check_first(job: Job, final: SampleOut, index: int) -> dict[str, np.ndarray | list[Encoded]]:
    """Check one input's outputs against the undecided schema, as tasks check theirs (so the preflight's
    task writes them as checked here: nothing is checked, or encoded, twice).

    Raises:
        InvalidSampleError: a value is refused.
    """
    checks = _SchemaChecks(job.schema)
    runs = job.options.batch_size is not None
    out: dict[str, np.ndarray | list[Encoded]] = {}
    for name, values in final.items().items():
        if values:
            owners = functools.partial(operator.mul, [index], len(values))
            try:
                out[name] = check_values(checks, name, values, final.runs(name) if runs else None, owners)
            except _BadValue as bad:
                raise bad.exc from None
    return out


class _PreflightInputs:
    """The preflight task's inputs, read one at a time (a batch at a time with ``batch_size``) as the
    preflight runs them: it reads only the inputs it runs, and the first of them sizes every task's
    blocks (`block_size`), so that nothing reads an input before the worker that runs it."""

    def __init__(self, job: Job, task: Task) -> None:
        self.job, self.task = job, task
        self.step = job.options.batch_size or 1
        self.read: list[tuple[int, Any]] = []
        # The first input (or batch) is read ahead, on a thread, while the worker builds its stages
        # (a class's ``__init__``: a model load, CUDA's start), not after it (see `_FirstRead`); not for
        # input already in memory, which costs nothing to read.
        ahead = job.source.parallel_reads and task.stop > task.start
        self.first = _FirstRead(job, task, self.step) if ahead else None

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        task = self.task
        for start in range(task.start, task.stop, self.step):
            if start == task.start and self.first is not None:
                pairs = self.first.take()
            else:
                pairs = _samples(self.job, task, start, min(task.stop, start + self.step))
            for pair in pairs:
                self.read.append(pair)
                yield pair

    @property
    def stop(self) -> int:
        """Where the inputs read end: the preflight's task covers ``task.start`` to here."""
        return min(self.task.stop, self.read[-1][0] + self.step) if self.read else self.task.start

    def block(self) -> int:
        """Inputs per block for every task, from the first input read."""
        return block_size(self.read[0][1] if self.read else None, self.job.options.batch_size)


class _FirstRead:
    """The preflight's first input (or batch), read on a thread started at once, so that reading it
    overlaps the worker's build of its stages. `take` gives its ``(index, sample_in)`` pairs, or raises
    what reading raised, where the preflight would have read it itself."""

    def __init__(self, job: Job, task: Task, step: int) -> None:
        self._read = functools.partial(_samples, job, task, task.start, min(task.stop, task.start + step))
        self._pairs: list[tuple[int, Any]] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lakecompute-first-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._pairs = list(self._read())
        except BaseException as exc:  # raised in the task's thread by take()
            self._error = exc

    def take(self) -> list[tuple[int, Any]]:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._pairs


def _run_preflight(job: Job, task: Task, progress: ProgressFn) -> TaskResult:
    """The preflight task: decide from the first samples, then write their outputs as this task's (the
    first inputs are computed once, here) and send back the decisions with the fragments."""
    inputs = _PreflightInputs(job, task)
    decisions, failure, outcomes = preflight(job, inputs)
    stop, block = inputs.stop, inputs.block()
    if failure is not None:
        return TaskResult(task.number, task.start, stop, {}, {}, (), failure, decisions, block)
    ran = [s for s in inputs.read if s[0] in outcomes]
    decided = decide_outputs(job, decisions, block)
    run = _TaskRun(job, replace(task, stop=stop, decided=decided), progress, False)
    run.call = functools.partial(_replay, outcomes, run.lists, run.names)
    # Only the deciding input wrote anything (the ones before it failed or wrote nothing), and its
    # outputs were checked deciding: they are written as they are, not checked again.
    run.checked = next((o.checked for o in outcomes.values() if isinstance(o, _Checked) and o.checked), {})
    run.plain = run.check_each = False  # replayed outcomes, checked already
    try:
        run.run_block(ran)
        run.drain()
    except _Stop as stop_at:
        return TaskResult(task.number, task.start, stop, {}, {}, (), stop_at.failure, decisions, block)
    return replace(run.result(), decisions=decisions, block=block)


def _replay(
    outcomes: dict[int, _Outcome],
    lists: list[list[Any]],
    names: Sequence[str],
    sample: Any,
    index: int,
    before: list[int],
) -> None:
    """Give the preflight's task what the preflight computed for ``index``: its outputs, or its failure."""
    outcome = outcomes[index]
    if isinstance(outcome, (StageFailure, InvalidSampleError)):
        raise outcome
    for name, values in zip(names, lists, strict=True):
        values.extend(outcome.values.get(name, ()))
