"""The worker side of an eval: what runs for each task, wherever the scheduler puts it.

A task reads its own input range (datasets: from the committed version; sequences: by index), runs the
fused pipeline per sample, checks and buffers the outputs, writes them as fragments into the task's
own slots (through the dataset layer's `lakecompute.datasets.TaskWriter`), and returns only
fragment descriptions and counts (`TaskResult`). Reading the next block and writing the previous one
overlap the function's run on the current block (``_overlap``: bounded threads, order unchanged). A
sample that fails ends the task with a `TaskFailure` in its result — a value, not an exception, so
that the engine can still wait for the tasks before it (see ``_engine``). What a task and its result
are, and the per-worker state (built once per worker and eval), are in ``_job``; the checks of outputs,
shared with the preflight (below), in ``_checks``.
"""

from __future__ import annotations

import functools
import operator
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lakecompute.compute._budget import budget_of
from lakecompute.compute._checks import (
    BadValue,
    SchemaChecks,
    alignment_error,
    check_counts,
    check_values,
    value_owners,
)
from lakecompute.compute._job import (
    PREFLIGHT_SCAN,
    Job,
    Task,
    TaskFailure,
    TaskResult,
    TaskStop,
    decide_outputs,
    stages_for,
    task_failure,
)
from lakecompute.compute._overlap import ReadAhead, Stages, WriteBehind, quick_switches
from lakecompute.compute._plan import block_size
from lakecompute.compute._reading import read_ahead, read_samples, start_decoding_helpers
from lakecompute.compute._runner import (
    StageFailure,
    absorb_return,
    run_sample,
    user_failure,
)
from lakecompute.compute._sample_out import SampleOut
from lakecompute.compute._sizes import estimate_bytes
from lakecompute.datasets import (
    Decisions,
    FailedSample,
    TaskWriter,
)
from lakecompute.errors import InvalidSampleError
from lakecompute.htypes import Encoded
from lakecompute.schedulers import ProgressFn
from lakecompute.threads import start_thread

__all__ = ["preflight", "run_task"]

# -- one task ----------------------------------------------------------------------------------------


class _TaskRun:
    """One task in a worker: reading blocks, running samples, buffering and writing outputs."""

    def __init__(self, job: Job, task: Task, progress: ProgressFn, overlap: bool = True) -> None:
        assert task.decided is not None
        self.job = job
        self.task = task
        self.decided = task.decided
        if task.decided.read is not None:  # what the preflight's functions read: read ahead with each block
            job.source.expect(task.decided.read)
        self.progress = progress
        self.stages = stages_for(job.token, job.pipeline, job.parent_pid)
        self.budget = budget_of(job)
        self.writer = TaskWriter(
            job.grant, task.decided.schema, task.number, self.budget.flush_bytes, self.budget.flush_threads
        )
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
        self.single = single
        #: What runs each input, when not the pipeline itself (the preflight's replay of its outcomes). Not
        #: a bound method of this run: kept on it, that would be a cycle holding the task's job (its
        #: input, a table's last row group) until the garbage collector ran.
        self.call: Callable[[Any, int, list[int]], None] | None = None
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
        if not self.overlap:
            return self._run()
        with quick_switches():
            return self._run()

    def _run(self) -> TaskResult:
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
        except TaskStop as stop:
            first = self.writes.settle(stop)  # an earlier block's write may have failed first
            if not isinstance(first, TaskStop):
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
        on reader threads (see `readers`); the rows of a block read ahead are made as they are run."""
        return read_ahead(self.job, self.task, self.seconds, self.overlap)

    # -- running ---------------------------------------------------------------------------------
    def _call_one(self, sample: Any, index: int, before: list[int]) -> None:
        stage = self.stages[0]
        try:
            value = stage.call(sample, self.final)
            if value is not None and value is not self.final:
                wrote = list(map(len, self.lists)) != before
                absorb_return(value, self.final, wrote, stage.name, self.job.options.batch_size is not None)
        except Exception as error:
            raise user_failure(stage.name, error, 0, sample) from error

    def _call_all(self, sample: Any, index: int, before: list[int]) -> None:
        job = self.job
        run_sample(
            self.stages, sample, index, self.final, check_lengths=job.options.check_lengths, seed=job.seed,
            batched=job.options.batch_size is not None,
        )  # fmt: skip

    def run_block(self, samples: Iterable[tuple[int, Any]]) -> None:
        """Run the pipeline on each sample of a block; outputs stay in ``final`` until drained."""
        if self.plain and self.call is None:
            self._run_plain(samples)
            return
        call = self.call or (self._call_one if self.single else self._call_all)
        lists, expected, sub = self.lists, list(self.decided.expected), operator.sub
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
        small samples).

        A sample is usual when it wrote ``expected`` values to every tensor: the lengths it must leave
        are kept as plain integers (``t0``, ``t1``) for the first two tensors, whose check is then two
        ``len`` calls (a map over the lists and a list of their differences cost ~0.4 µs a sample,
        more than the bookkeeping of the rest of the loop), and as a list for any further ones."""
        stage, final, lists = self.stages[0], self.final, self.lists
        fn, marks, progress, expected = stage.call, self.marks, self.progress, list(self.decided.expected)
        # The first two tensors (a missing one is an empty tuple, which never grows) and the rest.
        (l0, l1), (e0, e1) = (*lists, (), ())[:2], (*expected, 0, 0)[:2]
        rest, rest_expected = lists[2:], expected[2:]
        t0, t1, rest_target = self._targets(list(map(len, lists)))
        every, done = self.drain_every, 0
        for index, sample in samples:
            try:
                value = fn(sample, final)
                if value is not None and value is not final:
                    before = self._before(t0, t1, rest_target)
                    absorb_return(value, final, list(map(len, lists)) != before, stage.name)
            except Exception as error:
                before = self._before(t0, t1, rest_target)
                self._failed(index, user_failure(stage.name, error, 0, sample), before)  # raises
            usual = len(l0) == t0 and len(l1) == t1 and (not rest or list(map(len, rest)) == rest_target)
            if usual and every:
                marks.append(index)  # the common case: nothing else to do
                if len(marks) < every:
                    t0, t1 = t0 + e0, t1 + e1
                    if rest:
                        rest_target = list(map(operator.add, rest_target, rest_expected))
                else:
                    self.drain()  # the lists are empty again
                    t0, t1, rest_target = e0, e1, list(rest_expected)
            else:
                t0, t1, rest_target = self._unusual(index, t0, t1, rest_target)
                every = self.drain_every
            progress(0)  # a cancellation point: a failed or stopped run ends this task here
            done += 1
            if done == 64:
                progress(64)
                done = 0
        if done:
            progress(done)

    def _unusual(self, index: int, t0: int, t1: int, rest_target: list[int]) -> tuple[int, int, list[int]]:
        """For `_run_plain`: check and keep a sample that did not leave the lengths ``t0``, ``t1``,
        ``rest_target`` (or came before the drain size was known); the next sample's targets."""
        before, after = self._before(t0, t1, rest_target), list(map(len, self.lists))
        try:
            self._check(before, after, 1)
        except (StageFailure, InvalidSampleError) as failure:
            self._failed(index, failure, before)  # raises
        usual = list(map(operator.sub, after, before)) == list(self.decided.expected)
        return self._targets(self._kept(index, before, after, usual))

    def _targets(self, lengths: list[int]) -> tuple[int, int, list[int]]:
        """For `_run_plain`: the output lengths a usual sample leaves when it starts from ``lengths``:
        the first two tensors' (0 where there is none), and a list of the others'."""
        expected = self.decided.expected
        t0, t1 = (*map(operator.add, lengths[:2], expected[:2]), 0, 0)[:2]
        return t0, t1, list(map(operator.add, lengths[2:], expected[2:]))

    def _before(self, t0: int, t1: int, rest_target: list[int]) -> list[int]:
        """The inverse of `_targets`: the output lengths a sample of `_run_plain` started from."""
        expected = self.decided.expected
        return [*map(operator.sub, (t0, t1), expected[:2]), *map(operator.sub, rest_target, expected[2:])]

    def _kept(self, index: int, before: list[int], after: list[int], usual: bool) -> list[int]:
        """Mark a sample's outputs as kept (``usual``: it wrote ``expected``); drain once a block's bytes
        (the budget's ``block_bytes``) of outputs are buffered. Returns the output lengths the next sample
        starts from.

        A block holds that many bytes of *input*: a file name or an annotation's JSON in, an image and its
        masks out, and a block of 8,192 inputs would hold gigabytes of outputs until its end (and every
        one of them a new allocation the kernel must fault in and zero)."""
        if not usual:
            self.unusual[len(self.marks)] = after
        self.marks.append(index)
        if not self.drain_every:  # the first sample that wrote something sets it
            grew = [v for values, b, a in zip(self.lists, before, after, strict=True) for v in values[b:a]]
            if grew:
                outputs = sum(map(estimate_bytes, grew))
                self.drain_every = max(1, self.budget.block_bytes // max(1, outputs))
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
            raise alignment_error(self.last_fn, written, expected)
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
            raise TaskStop(task_failure(index, function, exc, self.job.parent_pid, stage))
        tb = "".join(traceback.format_exception(exc))
        row = self.job.source.row_of(index)
        self.failed.append(FailedSample(index, function, type(exc).__name__, str(exc), tb, row))

    # -- writing ---------------------------------------------------------------------------------
    def drain(self) -> None:
        """Check and stack the outputs buffered in ``final`` here, then hand them to the writer, which
        buffers and (when buffers fill) writes them behind the function (`WriteBehind`); empty
        ``final``.

        The checks and the stacking hold the GIL, so on the writer thread they would only take turns
        with the function's own Python (each turn a switch interval late: 5 ms): done here they cost
        their time once, and the writer thread is left the encoding and the files, which release it.
        A refused value stops the task here, at its input."""
        checked, self.checked = self.checked, {}
        batched, expected = self.job.options.batch_size is not None, self.decided.expected
        encoded = []
        for k, (name, values) in enumerate(self.final.items().items()):
            if not values:
                continue
            done = checked.get(name)  # checked already (the preflight's, or ignore_errors' per sample)
            if done is None:
                owners = functools.partial(value_owners, self.marks, self.unusual, expected[k], k)
                runs = self.final.runs(name) if batched else None
                done = self._encode(name, values, owners, runs)
            encoded.append((name, done))
            self.counts[name] += len(values)
        self.final.reset()
        self.marks.clear()
        self.unusual.clear()
        if encoded:
            self.writes.submit(functools.partial(self._write, encoded))

    def _write(self, encoded: list[tuple[str, np.ndarray | list[Encoded]]]) -> None:
        """Buffer one drain's checked outputs, writing out full buffers (on the writer thread; in order)."""
        for name, items in encoded:
            self.writer.add(name, items)

    def _encode(
        self, name: str, values: list[Any], owners: Any, runs: list[np.ndarray] | None
    ) -> np.ndarray | list[Encoded]:
        try:
            return check_values(self.writer, name, values, runs, owners)
        except BadValue as bad:
            raise TaskStop(task_failure(bad.index, self.last_fn, bad.exc, self.job.parent_pid)) from bad.exc

    def result(self) -> TaskResult:
        """The task's result, once every write has ended (raises a write's error)."""
        self.writes.wait()
        t0 = time.perf_counter()
        fragments = self.writer.finish()
        self.seconds.write += time.perf_counter() - t0
        task = self.task
        return TaskResult(task.number, task.start, task.stop, fragments, self.counts, tuple(self.failed))


def run_task(job: Job, task: Task, progress: ProgressFn) -> TaskResult:
    """Run one task: read its inputs, run the pipeline per sample, write fragments (or, for the
    preflight task, decide how every later task writes)."""
    start_decoding_helpers(job)
    if task.warm:
        stages_for(job.token, job.pipeline, job.parent_pid)
        job.source.warm()
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
    stages = stages_for(job.token, job.pipeline, job.parent_pid)
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
                return Decisions({}, ()), task_failure(index, function, exc, job.parent_pid, stage), outcomes
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
    checks = SchemaChecks(job.schema)
    runs = job.options.batch_size is not None
    out: dict[str, np.ndarray | list[Encoded]] = {}
    for name, values in final.items().items():
        if values:
            owners = functools.partial(operator.mul, [index], len(values))
            try:
                out[name] = check_values(checks, name, values, final.runs(name) if runs else None, owners)
            except BadValue as bad:
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
            pairs: Iterable[tuple[int, Any]]
            if start == task.start and self.first is not None:
                pairs = self.first.take()
            else:
                pairs = read_samples(self.job, task, start, min(task.stop, start + self.step))
            for pair in pairs:
                self.read.append(pair)
                yield pair

    @property
    def stop(self) -> int:
        """Where the inputs read end: the preflight's task covers ``task.start`` to here."""
        return min(self.task.stop, self.read[-1][0] + self.step) if self.read else self.task.start

    def block(self) -> int:
        """Inputs per block for every task, from the first input read."""
        first = self.read[0][1] if self.read else None
        return block_size(first, self.job.options.batch_size, budget_of(self.job).block_bytes)


class _FirstRead:
    """The preflight's first input (or batch), read on a thread started at once, so that reading it
    overlaps the worker's build of its stages. `take` gives its ``(index, sample_in)`` pairs, or raises
    what reading raised, where the preflight would have read it itself."""

    def __init__(self, job: Job, task: Task, step: int) -> None:
        self._read = functools.partial(read_samples, job, task, task.start, min(task.stop, task.start + step))
        self._pairs: list[tuple[int, Any]] = []
        self._error: BaseException | None = None
        self._thread = start_thread("first-read", self._run)

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
    except TaskStop as stop_at:
        return TaskResult(task.number, task.start, stop, {}, {}, (), stop_at.failure, decisions, block)
    return replace(run.result(), decisions=decisions, block=block, read=job.source.used_tensors())


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
