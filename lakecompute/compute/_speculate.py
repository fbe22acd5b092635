"""The first batches of the other workers, run beside the preflight instead of after it.

The preflight's outputs decide how every later task writes (ranks, which tensors are written), so the
tasks after it wait for its result. With ``batch_size`` that is a whole batch run alone: on a CPU with a
model, seconds to minutes while every other worker, its model built, waits. So the preflight runs its
first batch only, and each other worker runs the next batch as a preflight of its own (the same code:
it checks its outputs as the preflight checks, and writes them). Once all have reported, the first of
them that wrote something decides, in input order — what the preflight alone would have decided, had it
read on as it does when its first batch writes nothing — and a speculative result stands when an ordinary
task would have written the same: its ranks agree with the decision (and, when outputs must stay aligned,
it decided exactly the same). One that does not stand is dropped and its range run again as an ordinary
task, which then fails as it would have without speculation (a rank that differs, a tensor an aligned
eval must write): a successful eval still calls the function once per input. A speculative batch that
fails fails the eval at its input, as its ordinary task would have.

Only batched evals over input that workers read themselves (datasets, sequences) speculate, and not with
``ignore_errors`` (whose preflight passes over failing batches to decide from a later one): one input is
cheap to run alone, and a stream's items travel with their task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from lakecompute.compute._job import Task, TaskResult
from lakecompute.datasets import Decisions

__all__ = ["Speculation", "Verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the speculative tasks come to once every one of them and the preflight have reported.

    Attributes:
        kept: their results that stand, in input order (numbered right after the preflight).
        dropped: their results that do not (their ranges are run again, as ordinary tasks).
        stop: where the inputs that are written end: the ordinary tasks start here.
    """

    kept: tuple[TaskResult, ...]
    dropped: tuple[TaskResult, ...]
    stop: int


class Speculation:
    """The speculative tasks of one eval: one batch each for the workers beside the preflight's.

    Args:
        preflight: the preflight task as planned (number 0, from ``start``).
        length: the inputs in all.
        workers: the workers the eval runs on.
        batch_size: inputs per batch (None: no speculation).
        checkpoint_interval: a range never crosses a multiple of it (0: none).
        ignore_errors: whether the eval passes over failing inputs (no speculation).
        batches: batches each other worker runs (the workers' budget's ``speculative_batches``).

    Attributes:
        preflight: the preflight task to run: its first batch only when there is speculation.
        tasks: the speculative tasks, numbered from 1.
    """

    def __init__(
        self,
        preflight: Task,
        length: int,
        workers: int,
        batch_size: int | None,
        checkpoint_interval: int,
        ignore_errors: bool,
        batches: int = 1,
    ) -> None:
        self.preflight = preflight
        self.tasks: tuple[Task, ...] = ()
        if batch_size and preflight.items is None and not ignore_errors:
            ranges = _ranges(preflight.start, length, workers, batch_size, checkpoint_interval, batches)
            self.tasks = tuple(ranges)
        if self.tasks:
            self.preflight = replace(preflight, stop=self.tasks[0].start)
        self._held: dict[int, TaskResult] = {}

    @classmethod
    def none(cls, preflight: Task) -> Speculation:
        """No speculation: ``preflight`` runs alone."""
        return cls(preflight, 0, 1, None, 0, False)

    def holds(self, result: TaskResult) -> bool:
        """Keep ``result`` if it is a speculative task's (True), to be judged with the preflight's (a
        failed one is kept too: it never stands, and the eval fails at its input)."""
        if not 0 < result.number <= len(self.tasks):
            return False
        self._held[result.number] = result
        return True

    @property
    def complete(self) -> bool:
        """Whether every speculative task has reported."""
        return len(self._held) == len(self.tasks)

    def decider(self, preflight: TaskResult) -> TaskResult:
        """The result whose outputs decide: the first, in input order, that wrote something (else the
        preflight's: nothing was written, nothing is decided)."""
        results = [preflight, *(self._held[task.number] for task in self.tasks)]
        wrote = (r for r in results if r.failure is None and r.decisions is not None and r.decisions.written)
        return next(wrote, preflight)

    def judge(self, preflight: TaskResult, decisions: Decisions, aligned: bool) -> Verdict:
        """Which speculative results stand beside the preflight's (successful) result, given the
        ``decisions`` made and whether outputs must stay ``aligned``: those that, in order and without a
        gap, an ordinary task checked against ``decisions`` would have written the same."""
        stop, kept = preflight.stop, []
        ordered = [self._held[task.number] for task in self.tasks]
        for result in ordered:
            if result.failure or result.start != stop or not _stands(result.decisions, decisions, aligned):
                break
            kept.append(result)
            stop = result.stop
        return Verdict(tuple(kept), tuple(ordered[len(kept) :]), stop)


def _stands(own: Decisions | None, decisions: Decisions, aligned: bool) -> bool:
    """Whether outputs checked against ``own`` decisions pass the checks of ``decisions``: every rank
    both decided agrees (aligned outputs: the same decisions, since each input must write the same
    tensors)."""
    if own is None:
        return False
    if aligned:
        return own == decisions
    return all(decisions.ndims.get(name, ndim) == ndim for name, ndim in own.ndims.items())


def _ranges(
    start: int, length: int, workers: int, batch_size: int, interval: int, batches: int
) -> Sequence[Task]:
    """``batches`` batches for each worker but the preflight's, after the preflight's first batch, while
    each lies inside the input and inside one checkpoint interval."""
    tasks = []
    step = batch_size * batches
    for number in range(workers):  # 0: the preflight's first batch, which must fit as well
        a = start + batch_size + (number - 1) * step if number else start
        b = min(length, a + (step if number else batch_size))
        if a >= length or (interval and a // interval != (b - 1) // interval):
            break
        if number:
            tasks.append(Task(number, a, b))
    return tasks
