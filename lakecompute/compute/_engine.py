"""How ``eval`` runs, on the calling side: plan, preflight, tasks on a scheduler, commits in input order.

::

    eval ─▶ plan (check arguments, commit pending changes, fingerprint, find an earlier run)
         ─▶ scheduler.run(run_task, tasks)   first the preflight task alone (the first sample: its
         │                                    outputs decide ranks, once; the stream yields PAUSE until
         │                                    its result is in), then the tasks: each reads its input
         │                                    range, runs the fused pipeline per sample, writes
         │                                    fragments into its own slots, and returns only their
         │                                    descriptions
         ─▶ apply results in input order, checkpoint, commit ─▶ EvalResult

Planning is in ``_plan``, the worker side in ``_worker`` (what a task is: ``_job``); every commit goes
through the output dataset's write transaction (``evals_of(out).begin``). Nothing per sample crosses a
process boundary: tasks are ranges, results are fragment metadata.

After a failure with ``checkpoint_interval=n`` the tasks entirely before the failing input still
finish and are committed, so the kept prefix is ``floor(k / n) * n`` whatever the scheduler and the
worker count; a rerun resumes there.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from lakecompute.compute._budget import budget_of
from lakecompute.compute._inputs import DatasetSource, IterableSource, Source
from lakecompute.compute._job import (
    PREFLIGHT_SCAN,
    Decided,
    Job,
    Task,
    TaskFailure,
    TaskResult,
    decide_outputs,
    forget_job,
)
from lakecompute.compute._options import EvalOptions
from lakecompute.compute._plan import (
    EvalPlan,
    checked_scheduler,
    plan_eval,
    plan_ranges,
    task_floor,
    task_size,
)
from lakecompute.compute._runner import failure_error
from lakecompute.compute._speculate import Speculation
from lakecompute.compute._worker import run_task
from lakecompute.datasets import Decisions, EvalProgress, EvalWrite, FailedSample, evals_of
from lakecompute.errors import (
    InvalidArgumentError,
    InvalidSampleError,
    TransformError,
    UnpicklableTaskError,
    warn,
)
from lakecompute.schedulers import (
    PAUSE,
    InOrder,
    Scheduler,
    device_oom_advice,
    get_scheduler,
    is_device_oom,
    job_ranks,
    place_workers,
)

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline
    from lakecompute.compute._distributed import Coordinator

__all__ = ["EvalResult", "FailedSample", "run_eval", "scheduler_for"]


@dataclass(frozen=True, slots=True)
class EvalResult:
    """What an eval did.

    Attributes:
        inputs: input samples processed (skipped failures included).
        outputs: samples written, per tensor.
        failed: samples skipped with ``ignore_errors=True``, in input order (``failed_indices``: their
            positions in ``data_in``; ``failed_rows``: their dataset rows, for dataset input).
        seconds: wall time.
        version: the version of ``data_out`` that holds the result.
        resumed_from: inputs already done by an earlier, interrupted run of the same eval, which this
            run did not run again (0 when the eval had already completed: nothing ran or was written,
            and ``inputs``, ``outputs`` and ``failed`` are the completed run's).
        seed: the seed of the ``rng`` generators; pass it as ``seed=`` to reproduce the run.
        stages: seconds the tasks spent in each stage, summed over tasks: ``read`` (reading and decoding
            inputs, on reader threads), ``run`` (the functions), ``write`` (checking, encoding and
            writing outputs, on a writer thread) and ``wall`` (the tasks from start to end). Reading
            ahead and writing behind overlap the function, so ``wall`` is less than the sum of the
            other three; about the largest of them when the overlap is complete. Empty when no task ran.
    """

    inputs: int
    outputs: dict[str, int]
    failed: list[FailedSample] = field(default_factory=list)
    seconds: float = 0.0
    version: int = 0
    resumed_from: int = 0
    seed: int | None = None
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def failed_indices(self) -> list[int]:
        return [f.index for f in self.failed]

    @property
    def failed_rows(self) -> list[int | None]:
        """The dataset rows of the skipped samples (dataset input; None for other input)."""
        return [f.row for f in self.failed]

    def __repr__(self) -> str:
        extra = f", resumed_from={self.resumed_from}" if self.resumed_from else ""
        return (
            f"EvalResult(inputs={self.inputs}, outputs={self.outputs}, failed={len(self.failed)}, "
            f"seconds={self.seconds:.3f}, version={self.version}{extra}, seed={self.seed})"
        )


def run_eval(pipeline: Pipeline, data_in: Any, data_out: Any, options: EvalOptions) -> EvalResult:
    """Run ``pipeline`` over ``data_in`` into ``data_out`` (see `Pipeline.eval`); on every rank of a
    ``torch.distributed`` job, split among the ranks (``_distributed``)."""
    ranks = job_ranks()
    if ranks is not None:
        from lakecompute.compute._distributed import run_ranked

        return run_ranked(ranks, pipeline, data_in, data_out, options, _run_eval)
    return _run_eval(pipeline, data_in, data_out, options)


def _run_eval(
    pipeline: Pipeline, data_in: Any, data_out: Any, options: EvalOptions, ranked: Coordinator | None = None
) -> EvalResult:
    """Run an eval here (and, with ``ranked``, on every rank of a distributed job, this being rank 0)."""
    t0 = time.perf_counter()
    plan = plan_eval(pipeline, data_in, data_out, options)
    if plan.completed:
        return _already_done(plan, t0)
    sched = _scheduler(plan) if ranked is None else ranked.local
    if not sched.shares_memory:  # workers in other processes: what they would each decide, decided here
        plan.source.prepare_workers()
    if ranked is not None:  # tasks sized for every rank's workers
        plan = replace(plan, options=replace(plan.options, num_workers=ranked.workers))
    if plan.drop is not None:
        evals_of(plan.out).drop_unfinished(plan.drop)
    write = evals_of(plan.out).begin(
        plan.fingerprint, label=plan.label, in_place=plan.in_place, resume=plan.resume, job=plan.job or "",
        origin=plan.origin,
    )  # fmt: skip
    token = uuid.uuid4().hex
    try:
        prepared = _prepare(plan, write, token)
        if prepared is None:  # no input at all
            nothing = dict.fromkeys(write.schema.names, 0)
            return EvalResult(0, nothing, [], time.perf_counter() - t0, plan.out.version, 0, plan.seed)
        if ranked is not None:
            sched = ranked.scheduler(prepared[0])
        return _OrderedRun(plan, write, *prepared, t0).run(sched)
    except BaseException:
        write.abort()
        raise
    finally:
        forget_job(token)


def _already_done(plan: EvalPlan, t0: float) -> EvalResult:
    record = plan.record
    assert record is not None
    warn(
        f"This eval ({plan.label}) already completed into {plan.out.path!r} at version {record.version}; "
        "nothing was written again. Pass rerun=True to write its outputs once more."
    )
    # Nothing was resumed (resumed_from 0): the eval had completed.
    elapsed = time.perf_counter() - t0
    return EvalResult(
        record.done, dict(record.outputs), list(record.failed), elapsed, plan.out.version, 0, record.seed
    )


def _scheduler(plan: EvalPlan) -> Scheduler:
    """The scheduler to run the tasks on, checked against where the data lives."""
    return scheduler_for(plan.options, plan.out.location.url, plan.source)


def scheduler_for(
    opts: EvalOptions, out: str, source: Source, share: tuple[int, int] | None = None
) -> Scheduler:
    """The scheduler to run an eval's tasks on, with its workers on ``opts.devices`` (this process's
    ``share`` of them, in a distributed job), checked against where the data lives (``out``, the output's
    location; a dataset ``source``'s: see `checked_scheduler`)."""
    sched = get_scheduler(opts.scheduler, opts.num_workers)
    placement = place_workers(opts.devices, share)
    if placement is not None:
        sched = sched.with_devices(placement)
    reads = [source.snap.url] if isinstance(source, DatasetSource) else []
    return checked_scheduler(sched, reads, out)


def _prepare(plan: EvalPlan, write: EvalWrite, token: str) -> tuple[Job, Task] | None:
    """The job every task shares, and the preflight task that runs first; None for an empty input.

    The preflight runs where the tasks run — in a worker when there are workers, so a class-based
    function is built once per worker and never in the caller — and its outputs decide, once, how every
    later task checks and writes its outputs.
    """
    opts, source = plan.options, plan.source
    step = opts.batch_size or 1
    lengths = write.kept()  # before the decisions, in place: every tensor's length (else nothing)
    resolved = replace(opts, seed=plan.seed)  # workers see the seed the plan drew or resumed
    job = Job(token, plan.pipeline, source, write.grant, write.schema, resolved, os.getpid(), plan.in_place,
              lengths)  # fmt: skip
    if isinstance(source, IterableSource):
        # The preflight's inputs travel with its task: a few MiB at most, even when items are large.
        items: list[Any] | None = source.peek(PREFLIGHT_SCAN * step, budget_of(job).stream_task_bytes)
        start, stop = 0, len(items or [])
    else:
        # A resumed eval's preflight starts where it resumes: the kept inputs are never run again. Nothing
        # is read here: the preflight reads the inputs it runs, where it runs them.
        assert source.length is not None
        start = plan.resume_from
        items, stop = None, min(source.length, start + PREFLIGHT_SCAN * step)
    if stop <= start:
        return None
    if opts.checkpoint_interval and items is None:  # the preflight's inputs stay within one interval
        stop = min(stop, (start // opts.checkpoint_interval + 1) * opts.checkpoint_interval)
    return job, Task(0, start, stop, items)


def _decide(plan: EvalPlan, write: EvalWrite, job: Job, decisions: Decisions, block: int) -> Decided:
    """Fix the preflight's decisions in the transaction; what every later task checks against (and the
    inputs per block the preflight sized from the first input)."""
    opts = plan.options
    write.decide(decisions, replace_all=not opts.skip_ok)
    decided = decide_outputs(job, decisions, block)  # what the preflight's own task wrote against, too
    if decided.aligned and opts.ignore_errors:
        raise InvalidArgumentError(
            f"ignore_errors=True cannot be used in place while tensors {sorted(write.kept())} are kept: a "
            "skipped sample would leave its row without a value. Fix the failing samples, or write into a "
            "new dataset (data_out=lc.like(path, ds))."
        )
    return decided


def _tasks(
    plan: EvalPlan, job: Job, decided: Decided, start: int, min_task: int = 1, first: int = 1
) -> Iterator[Task]:
    """The tasks after the preflight's (and the speculative ones kept: they end at input ``start``), in
    input order (lazily: a stream is read as tasks are handed out), of at least ``min_task`` inputs (see
    `task_floor`), numbered from ``first``; a streamed task's items within the budget's."""
    opts, source = plan.options, plan.source
    size = task_size(source.length, opts.num_workers, opts.checkpoint_interval, opts.batch_size, min_task)
    if isinstance(source, IterableSource):
        source.skip(start)  # the preflight's task wrote those
        chunks = source.chunks(size, budget_of(job).stream_task_bytes, opts.batch_size or 1)
        for number, chunk in enumerate(chunks, start=first):
            yield Task(number, start, start + len(chunk), chunk, decided)
            start += len(chunk)
        return
    assert source.length is not None
    ranges = plan_ranges(
        source.length, size, opts.num_workers, opts.checkpoint_interval, opts.batch_size, start, min_task
    )
    for number, (a, b) in enumerate(ranges, start=first):
        yield Task(number, a, b, None, decided)


def _min_task(plan: EvalPlan, decider: TaskResult, start: int) -> int:
    """`task_floor` from the deciding task: the tensors it wrote, and its stored bytes per input, for
    the inputs the ordinary tasks share (from ``start``: the preflight and the speculative batches
    kept wrote those before; counted in, 6 batches left for 2 workers made 3 tasks of 2 batches)."""
    length, inputs = plan.source.length, decider.stop - decider.start
    written = [frags for frags in decider.fragments.values() if frags]
    if length is None or not inputs or not written or start >= length:
        return 1
    stored = sum(f.nbytes for frags in written for f in frags)
    return task_floor(length - start, plan.options.num_workers, len(written), stored / inputs)


class _OrderedRun:
    """The ordering loop: task results applied in input order, checkpoints, and what a failure keeps."""

    def __init__(self, plan: EvalPlan, write: EvalWrite, job: Job, preflight: Task, t0: float) -> None:
        self.plan, self.write, self.job, self.t0 = plan, write, job, t0
        opts = plan.options
        self.speculation = Speculation(
            preflight, plan.source.length or 0, opts.num_workers, opts.batch_size, opts.checkpoint_interval,
            opts.ignore_errors, budget_of(job).speculative_batches,
        )  # fmt: skip
        self.preflight = self.speculation.preflight  # its first batch only, when others run beside it
        self.decided: Decided | None = None
        resumed = plan.resume
        self.done = plan.resume_from
        self.outputs = dict.fromkeys(job.schema.names, 0) | (dict(resumed.outputs) if resumed else {})
        self.failed: list[FailedSample] = list(resumed.failed) if resumed else []
        self.pending = InOrder[TaskResult]()  # results applied in task order
        self.in_flight: dict[int, Task] = {}
        self.failure: TaskFailure | None = None
        self.preflight_stop = preflight.stop  # where the preflight's (and kept speculative) tasks ended
        self.min_task = 1  # the fewest inputs per task, from what the deciding task wrote
        self.first_task = 1  # the number of the first ordinary task
        self.preflight_result: TaskResult | None = None
        self.scan_stop = preflight.stop  # how far the preflight reads to find an input that writes
        self.block = 0  # inputs per block, from the first input (the first preflight's result)
        self.undecided: list[TaskResult] = []  # results that wrote nothing, applied once decided
        self.queued: list[Task] = []  # a preflight that goes on scanning (see `_scan_on`)
        self.bar: Any = None
        self.received: set[int] = set()  # the numbers of the tasks that reported, failed or not
        self.stop_at = 0  # after a failure: the prefix that is still finished and kept
        self.stages: dict[str, float] = {}  # seconds per stage, summed over the tasks applied

    def progress(self) -> EvalProgress:
        return EvalProgress(
            self.done, dict(self.outputs), tuple(self.failed), self.plan.seed, time.perf_counter() - self.t0
        )

    def tasks(self) -> Iterator[Task | object]:
        """The preflight, beside it a batch for each other worker (`Speculation`) or a warm-up, then
        (once the preflight's result decided how) the tasks in input order.

        The warm-ups build each other worker's stages — a class-based function's ``__init__``, often a
        model load — and open its input, while the first worker runs the preflight, instead of after it.
        """
        self.in_flight[self.preflight.number] = self.preflight
        yield self.preflight
        for task in self.speculation.tasks:
            self.in_flight[task.number] = task
            yield task
        for k in range(1 + len(self.speculation.tasks), self.plan.options.num_workers):
            yield Task(-k, 0, 0, warm=True)
        while self.failure is None and self.decided is None:
            yield self.queued.pop() if self.queued else PAUSE
        if self.failure is not None:
            return
        assert self.decided is not None
        tasks = _tasks(self.plan, self.job, self.decided, self.preflight_stop, self.min_task, self.first_task)
        for task in tasks:
            if self.failure is not None:
                return  # after a failure, no new task starts
            self.in_flight[task.number] = task
            yield task

    def run(self, sched: Scheduler) -> EvalResult:
        bar = self.bar = _progress_bar(self.plan)
        stream = bar.fp if bar is not None and not bar.disable else None  # close() disables the bar
        tasks = cast(Iterator[Task], self.tasks())  # tasks, and PAUSE while the preflight runs
        runner = sched.run(
            functools.partial(run_task, self.job), tasks, on_progress=bar.update if bar is not None else None
        )
        try:
            with _sigterm_as_interrupt(), contextlib.closing(runner):
                for _position, result in runner:
                    self.receive(result)
                    if self.failure is not None and self.done >= self.stop_at and self.settled():
                        break  # everything before the failure's checkpoint is in; cancel the rest
        except UnpicklableTaskError as err:
            raise _unpicklable_item(err) from err.__cause__
        finally:
            if bar is not None:
                bar.close()
        if self.failure is not None:
            raise self.error()
        if self.decided is not None and self.decided.aligned:  # kept tensors hold rows: the whole lines up
            self.write.check_aligned(self.done)
        version = self.write.commit(self.progress())
        outcome = EvalResult(
            self.done,
            self.outputs,
            self.failed,
            time.perf_counter() - self.t0,
            version,
            self.plan.resume_from,
            self.plan.seed,
            self.stages,
        )
        if stream is not None:  # the bar stays on screen; this line says how it ended
            rows = max(outcome.outputs.values(), default=0)
            summary = f"{outcome.inputs} inputs -> {rows} outputs in {outcome.seconds:.1f} s"
            bar.write(f"eval {self.plan.label}: {summary} (version {version})", file=stream)
        return outcome

    def settled(self) -> bool:
        """After a failure: whether every task before the failing input has reported, so that the failure
        raised is the first input's that fails, however the tasks were laid out and timed."""
        failure = self.failure
        assert failure is not None
        return all(t.start >= failure.index or n in self.received for n, t in self.in_flight.items())

    def receive(self, result: TaskResult) -> None:
        self.received.add(result.number)
        if self.decided is None and self.speculation.holds(result):
            if result.failure is not None:
                self.fail(result.failure)
            self._conclude()  # once the preflight's result and every speculative one are in
            return
        if result.failure is not None:
            self.fail(result.failure)
            return
        if result.number < 0:
            return  # a warm-up
        if result.number == self.preflight.number:
            self.preflight_result = result
            self._conclude()
            return
        self._put(result)

    def _put(self, result: TaskResult) -> None:
        for ready in self.pending.put(result.number, result):
            self.apply(ready)

    def _conclude(self) -> None:
        """Once the preflight and every speculative task reported: decide from the first of them that
        wrote something, keep the speculative results that stand (`Speculation.judge`), and drop the rest,
        whose ranges the ordinary tasks, numbered after the kept ones, run again (their progress is taken
        back off the bar)."""
        preflight = self.preflight_result
        if preflight is None or not self.speculation.complete or self.decided is not None:
            return
        self.block = self.block or preflight.block
        decider = self.speculation.decider(preflight)
        assert decider.decisions is not None
        if not decider.decisions.written and self.speculation.tasks and self._scan_on(preflight):
            return
        decided = _decide(self.plan, self.write, self.job, decider.decisions, self.block)
        self.decided = replace(decided, read=preflight.read)  # what later tasks read ahead
        verdict = self.speculation.judge(preflight, decider.decisions, self.decided.aligned)
        self.min_task = _min_task(self.plan, decider, verdict.stop)
        self.preflight_stop = verdict.stop
        self.first_task = self.preflight.number + 1 + len(verdict.kept)
        for dropped in verdict.dropped:
            self.received.discard(dropped.number)  # the number is the ordinary task's that runs it again
            self.in_flight.pop(dropped.number, None)
            if self.bar is not None:
                self.bar.update(dropped.start - dropped.stop)
        for result in (*self.undecided, preflight, *verdict.kept):
            self._put(result)

    def _scan_on(self, preflight: TaskResult) -> bool:
        """Neither the preflight nor a speculative batch wrote anything: keep them (nothing to check) and
        go on scanning from where they end, in one more preflight, as the preflight alone would have; False
        when the scan is over (nothing is decided) or a speculative batch failed."""
        verdict = self.speculation.judge(preflight, Decisions({}, ()), aligned=False)
        if verdict.dropped or verdict.stop >= self.scan_stop:
            return False
        self.undecided += (preflight, *verdict.kept)
        self.preflight = Task(self.preflight.number + 1 + len(verdict.kept), verdict.stop, self.scan_stop)
        self.preflight_result = None
        self.speculation = Speculation.none(self.preflight)
        self.in_flight[self.preflight.number] = self.preflight
        self.queued.append(self.preflight)
        return True

    def fail(self, failure: TaskFailure) -> None:
        """Remember the earliest failure; with checkpoints, keep finishing the tasks before its interval."""
        if self.failure is None or failure.index < self.failure.index:
            self.failure = failure
        interval = self.plan.options.checkpoint_interval
        self.stop_at = (self.failure.index // interval) * interval if interval else 0

    def apply(self, result: TaskResult) -> None:
        if self.failure is not None and result.start >= self.stop_at:
            return  # past what a failure keeps
        try:
            self.write.apply(result.fragments)
        except InvalidSampleError as exc:
            raise TransformError(
                f"The outputs of data_in[{result.start}:{result.stop}] do not fit those before them: {exc}",
                None,
                None,
                self.plan.label,
            ) from exc
        for name, count in result.counts.items():
            self.outputs[name] += count
        for stage, seconds in result.stages.items():
            self.stages[stage] = self.stages.get(stage, 0.0) + seconds
        self.failed.extend(result.failed)
        self.done = result.stop
        self.in_flight.pop(result.number, None)
        interval = self.plan.options.checkpoint_interval
        if interval and self.done % interval == 0 and self.done != self.plan.source.length:
            self.write.checkpoint(self.progress())

    def error(self) -> TransformError:
        failure = self.failure
        assert failure is not None
        interval = self.plan.options.checkpoint_interval
        # What the checkpoints committed: tasks applied past the last one (a task may end inside an
        # interval) are not kept.
        done = (self.done // interval) * interval if interval else 0
        if done:
            kept = (
                f"The outputs of the first {done} inputs are kept (checkpoint at version "
                f"{self.plan.out.version}); run the eval again, with its code fixed if need be, to resume "
                f"from input {done} (rerun=True starts over)."
            )
        else:
            kept = "Nothing of this run was written."
        if is_device_oom(failure.exc):
            opts = self.plan.options
            kept = f"{device_oom_advice(failure.index, opts.batch_size, self.plan.source.length)} {kept}"
        last = len(self.plan.pipeline.functions) - 1  # what no step is blamed for, its outputs did
        sample, row = _sample_for(self.plan.source, self.in_flight, failure.index), self.plan.source.row_of
        return _transform_error(failure, sample, kept, last if failure.step is None else failure.step, row)


def _transform_error(
    failure: TaskFailure, sample: Any, kept: str, step: int, row_of: Callable[[int], int | None]
) -> TransformError:
    """The TransformError for a failed sample (naming its dataset row, ``row_of`` its index, for dataset
    input): short, with the user's own frame, then what to do (the advice and what was kept), the cause
    last."""
    index = failure.index
    err = failure_error(failure.function, index, failure.exc, sample, step, failure.step_input, row_of(index))
    err.args = (f"{err.args[0]}\n{failure.where}{kept}",)
    err.remote_traceback = failure.traceback  # type: ignore[attr-defined]  # the full traceback, kept for debugging
    failure.exc.__traceback__ = None  # printed as one line above the TransformError, not a second block
    return err


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while an eval runs, so it stops workers and commits nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    owner = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != owner:
            # A process forked while the eval ran (a worker not yet past its start-up, or a child of
            # the user's function) inherits this handler: raising there would unwind the parent's
            # code in the child. It ends as SIGTERM ends any process instead.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(f"eval stopped by signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _unpicklable_item(err: UnpicklableTaskError) -> UnpicklableTaskError:
    """The error for a streamed item that cannot travel to a worker process, naming its index."""
    task = err.task
    if not isinstance(task, Task) or task.items is None:
        return err
    import multiprocess.reduction

    for index, item in enumerate(task.items, start=task.start):
        try:
            multiprocess.reduction.ForkingPickler.dumps(item)
        except Exception as exc:
            return UnpicklableTaskError(
                f"data_in[{index}] (a {type(item).__name__}) cannot be sent to a worker process: {exc}. "
                "Yield items that can be pickled (arrays, numbers, strings, paths), or run the eval with "
                "scheduler='threaded' or num_workers=0.",
                task,
                err.position,
            )
    return err


def _sample_for(source: Source, in_flight: dict[int, Task], index: int) -> Any:
    """The failing input sample for TransformError.sample, read here (it never travels back)."""
    for task in in_flight.values():
        if task.items is not None and task.start <= index < task.stop:
            return task.items[index - task.start]  # a streamed sample: only its task holds it
    try:
        return source.sample(index)  # None for a stream whose task is gone
    except Exception:
        return None  # the error itself matters more than a sample we cannot re-read


def _progress_bar(plan: EvalPlan) -> Any:
    if not plan.options.progressbar:
        return None
    from tqdm.auto import tqdm

    bar = tqdm(total=plan.source.length, desc=f"eval {plan.label}", unit="sample", dynamic_ncols=True)
    if plan.resume_from:
        bar.update(plan.resume_from)
    return bar
