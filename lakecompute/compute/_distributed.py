"""Evals inside a ``torch.distributed`` job: called on every rank, one eval, split among the ranks.

In a job that initialised ``torch.distributed`` (torchrun, Accelerate, Lightning) with two ranks or more,
``eval`` is a collective call, like a ``torch.distributed`` collective: every rank calls it, at the same
point, with the same arguments. Then:

- **rank 0 plans and commits**: it checks that the ranks called the same eval (function names, the input
  by a digest of its content, the output by its id), plans it (a completed eval is a no-op everywhere; an
  interrupted one resumes), runs the preflight, and applies every result in input order, checkpoints and
  commits, exactly as an eval on one machine does (the ordering loop is the same code);
- **every rank runs tasks**: rank 0 hands tasks out as ranks have room (`RanksScheduler`); each rank
  runs them on its own workers (``num_workers``, ``devices``: a rank takes its share of this machine's
  GPUs, by ``LOCAL_RANK``), writes their outputs into the slots rank 0 reserved, and sends back only
  fragment descriptions;
- **one outcome**: every rank returns the same `EvalResult` (and its handle of the output moves to the
  committed version), or raises the same error.

So the result is in input order, each input written once, committed once; an eval interrupted by a rank
that died resumes from its last checkpoint when the job runs it again. The messages go through the job's
own store, never through collectives (see `lakecompute.schedulers.RanksScheduler`).

Set ``LAKECOMPUTE_DISTRIBUTED=0`` in a process to run its evals alone (an eval on the main process only).
"""

from __future__ import annotations

import functools
import itertools
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lakecompute.compute._fingerprint import fingerprint_value
from lakecompute.compute._inputs import DatasetSource, IterableSource, Source, make_source
from lakecompute.compute._job import Job, Task, TaskResult, forget_job
from lakecompute.compute._worker import run_task
from lakecompute.datasets import Dataset, DatasetView, base_dataset
from lakecompute.errors import FingerprintError, InvalidArgumentError, LakeComputeError
from lakecompute.schedulers import (
    PickledError,
    RankChannel,
    Ranks,
    RanksScheduler,
    RemoteInbox,
    Scheduler,
    capacity_of,
    job_ranks,
    pickle_exception,
    portable_exception,
    rank_timeout,
    rebuild_exception,
    serve_ranked,
)

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline
    from lakecompute.compute._engine import EvalResult
    from lakecompute.compute._options import EvalOptions

__all__ = ["Coordinator", "refuse_on_every_rank", "run_ranked"]

# The n-th eval this process calls: the same on every rank, which call evals in the same order.
_CALLS = itertools.count()

#: Runs an eval on rank 0 (``_engine``'s own), given the coordinator it hands its scheduler to.
RunFn = Callable[[Any, Any, Any, Any, "Coordinator"], "EvalResult"]


@dataclass(slots=True)
class _View:
    """What a rank knows of the eval it was called with, before rank 0 plans it (compared across ranks).

    Attributes:
        label: the functions' names.
        data: what the input is: its kind, type and length, and a digest of what identifies its content
            (a dataset's id, version and rows; a list's values; a Hugging Face dataset's fingerprint), so
            that ranks holding different lists of one length are told apart. None for a stream (only
            rank 0's is read: its items travel with the tasks) and an input without an identity (a torch
            Dataset: compared by type and length alone).
        out: the output dataset's id (None in place).
        pending: the caller's handles of the input or output have uncommitted changes.
        capacity: how many tasks this rank takes at once.
        workers: this rank's worker count.
        error: what failed while this rank prepared (its scheduler, its devices), to raise on every rank.
    """

    label: str
    data: tuple[Any, ...]
    out: str | None
    pending: bool
    capacity: int = 1
    workers: int = 0
    error: PickledError | None = None
    # This rank's own objects, never sent.
    scheduler: Scheduler | None = field(default=None, repr=False)
    source: Source | None = field(default=None, repr=False)

    def sent(self) -> _View:
        return replace(self, scheduler=None, source=None)


def _channel(ranks: Ranks) -> RankChannel:
    """The channel of this process's next eval (the same on every rank: they call evals in one order)."""
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return RankChannel(ranks.store, f"lakecompute/{restart}/eval/{next(_CALLS)}")


def run_ranked(
    ranks: Ranks, pipeline: Pipeline, data_in: Any, data_out: Any, options: EvalOptions, run: RunFn
) -> EvalResult:
    """Run one eval called on every rank of a distributed job (see the module documentation)."""
    channel = _channel(ranks)
    view = _view(ranks, pipeline, data_in, data_out, options)
    if ranks.rank == 0:
        return _coordinate(ranks, channel, view, (pipeline, data_in, data_out, options), run)
    return _serve(ranks, channel, view, pipeline, data_in, data_out)


def refuse_on_every_rank(exc: BaseException) -> None:
    """In a distributed job, share a refusal made before this rank could join its eval (its options are
    wrong, say): rank 0 publishes it as the eval's plan, another rank joins with it as its error, which
    rank 0 raises and publishes. So every rank raises at once, none waits for a rank that already left,
    and the eval's number is used up on every rank alike (the next eval meets the next one). Outside a
    job (or where the job's store cannot be reached), nothing."""
    try:
        ranks = job_ranks()
    except LakeComputeError:
        return
    if ranks is None:
        return
    channel = _channel(ranks)
    error = pickle_exception(exc)
    if ranks.rank == 0:
        channel.put("plan", ("error", error))
    else:
        channel.put(f"join/{ranks.rank}", _View("", ("refused",), None, False, error=error))


def _view(ranks: Ranks, pipeline: Pipeline, data_in: Any, data_out: Any, options: EvalOptions) -> _View:
    from lakecompute.compute._engine import scheduler_for

    label = " → ".join(f.name for f in pipeline.functions)
    handles = [d for d in (data_in, data_out) if isinstance(d, (Dataset, DatasetView))]
    pending = any(not base_dataset(d).read_only and base_dataset(d).has_pending_changes for d in handles)
    out = data_out.id if isinstance(data_out, Dataset) else None
    view = _View(label, (type(data_in).__qualname__,), out, pending)
    try:
        source = make_source(data_in, options.pad_data_in, data_out is None)
        view.data = _input_digest(data_in, source)
        url = (data_out if isinstance(data_out, Dataset) else data_in).location.url
        share = (ranks.local_rank, ranks.local_world)
        view.scheduler = scheduler_for(options, url, source, share)
        view.source = source
        view.capacity = capacity_of(view.scheduler)
        view.workers = view.scheduler.num_workers
    except Exception as exc:
        view.error = pickle_exception(exc)
    return view


def _input_digest(data_in: Any, source: Source) -> tuple[Any, ...]:
    """What a rank's input is (see `_View.data`): (type, length, kind, digest of its identity)."""
    kind = source.describe().get("kind")
    try:
        digest: str | None = fingerprint_value(source.identity(), "data_in")
    except FingerprintError:
        digest = None
    return (type(data_in).__qualname__, source.length, kind, digest)


def _described(data: tuple[Any, ...]) -> str:
    if len(data) < 4:
        return repr(data)
    kind, length, _, digest = data
    size = "a stream" if length is None else f"{length} rows"
    content = f", content digest {digest[:12]}" if digest else ", no identity to compare"
    return f"a {kind} ({size}{content})"


def _check(own: _View, views: dict[int, _View]) -> None:
    """Refuse ranks that called another eval, or that failed to prepare (raising their error here)."""
    if own.error is not None:
        raise rebuild_exception(own.error)
    for rank, view in views.items():
        if view.error is not None:
            raise rebuild_exception(view.error)
        for what, name, show in (("label", "the functions", repr), ("data", "data_in", _described),
                                 ("out", "data_out (by id)", repr)):  # fmt: skip
            theirs, ours = getattr(view, what), getattr(own, what)
            if theirs != ours:
                raise InvalidArgumentError(
                    f"Rank {rank} called eval with {name} {show(theirs)}, rank 0 with {show(ours)}. In a "
                    "torch.distributed job every rank calls the same eval with the same arguments and the "
                    "same input, value for value (it is split among them: each rank reads its part from "
                    "its own copy). Give every rank the same data_in and data_out."
                )
        if view.pending:
            raise InvalidArgumentError(
                f"Rank {rank} has uncommitted changes to the eval's datasets, which only rank 0 may commit. "
                "Make changes on rank 0 (and commit them), then open the datasets on every rank and call "
                "eval there."
            )


def _coordinate(
    ranks: Ranks, channel: RankChannel, view: _View, call: tuple[Any, Any, Any, Any], run: RunFn
) -> EvalResult:
    """Rank 0: wait for every rank, run the eval with their workers, tell them how it ended."""
    timeout = rank_timeout()
    try:
        views = {
            r: channel.get(f"join/{r}", timeout, f"rank {r} to call this eval ({view.label})")
            for r in range(1, ranks.world)
        }
        _check(view, views)
    except BaseException as exc:
        channel.put("plan", ("error", pickle_exception(exc)))
        raise
    assert view.scheduler is not None
    coordinator = Coordinator(channel, view.scheduler, [view.capacity] + [views[r].capacity for r in views])
    coordinator.count([view.workers] + [views[r].workers for r in views])
    try:
        result = run(*call, coordinator)
    except BaseException as exc:
        coordinator.finish("error", pickle_exception(exc))
        raise
    coordinator.finish("done", result)
    return result


class Coordinator:
    """Rank 0's side of a distributed eval, as the engine sees it: the scheduler to run the tasks on (every
    rank's workers), and the outcome every rank returns.

    Args:
        channel: the eval's channel.
        local: rank 0's own scheduler.
        capacities: per rank, the tasks it takes at once.
    """

    def __init__(self, channel: RankChannel, local: Scheduler, capacities: list[int]) -> None:
        self.channel = channel
        self.local = local
        self.capacities = capacities
        self._published = False
        #: The workers of every rank together (a rank without workers counts as one): what tasks are
        #: sized for.
        self.workers = 0

    def count(self, workers: list[int]) -> None:
        """Record every rank's worker count (rank 0's first)."""
        self.workers = sum(max(1, w) for w in workers)

    def scheduler(self, job: Job) -> Scheduler:
        """Send the job to the other ranks; the scheduler that runs its tasks on all of them."""
        # The other ranks use their own functions (bound arguments may differ per rank, a device say) and,
        # but for a dataset's committed version, their own input: only what rank 0 decided travels.
        source = job.source if isinstance(job.source, DatasetSource) else IterableSource(())
        self.channel.put("plan", ("run", replace(job, pipeline=job.pipeline.__class__([]), source=source)))
        self._published = True
        return RanksScheduler(self.local, self.channel, self.capacities, _warm_ups(self.local))

    def finish(self, kind: str, value: Any) -> None:
        """Tell the other ranks how it ended: ``("done", EvalResult)`` or ``("error", PickledError)``."""
        self.channel.put("outcome" if self._published else "plan", (kind, value))


def _warm_ups(local: Scheduler) -> list[Task]:
    """Tasks that build each local worker's functions (a model loads) before the first task arrives."""
    return [Task(-k, 0, 0, warm=True) for k in range(1, local.num_workers + 1)]


def _serve(
    ranks: Ranks, channel: RankChannel, view: _View, pipeline: Pipeline, data_in: Any, data_out: Any
) -> EvalResult:
    """Another rank: join, run the tasks rank 0 hands over, return (or raise) the outcome rank 0 sends."""
    timeout = rank_timeout()
    channel.put(f"join/{ranks.rank}", view.sent())
    kind, value = channel.get("plan", timeout, "rank 0 to plan this eval")
    if kind == "run":
        job: Job = value
        assert view.scheduler is not None
        assert view.source is not None
        source = job.source if isinstance(job.source, DatasetSource) else view.source
        # Tasks run in this process (num_workers=0) are its own: never reseeded, failures sent portable.
        job = replace(job, pipeline=pipeline, source=source, parent_pid=os.getpid())
        send = functools.partial(channel.send, f"from/{ranks.rank}")
        inbox = RemoteInbox(channel, ranks.rank)
        try:
            serve_ranked(
                functools.partial(_portable_task, job), view.scheduler, inbox, send, view.capacity,
                _warm_ups(view.scheduler),
            )  # fmt: skip
        finally:
            inbox.close()
            forget_job(job.token)
        kind, value = channel.get("outcome", timeout, "rank 0 to finish this eval")
    if kind == "error":
        raise rebuild_exception(value)
    target = data_out if data_out is not None else data_in
    if isinstance(target, Dataset):
        target.reload()  # to the version rank 0 committed
    result: EvalResult = value
    return result


def _portable_task(job: Job, task: Task, progress: Any) -> TaskResult:
    """`run_task`, with a failure's exception made able to travel to rank 0."""
    result = run_task(job, task, progress)
    failure = result.failure
    if failure is None:
        return result
    try:
        pickle.dumps(failure)
    except Exception:
        exc = portable_exception(failure.exc, failure.traceback)
        failure = replace(failure, exc=exc, step_input=None)
        result = replace(result, failure=failure)
    return result
