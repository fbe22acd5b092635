"""The first batches of the other workers, run beside the preflight instead of after it.

The preflight's outputs decide how every later task writes (ranks, which tensors are written), so the
tasks after it wait for its result. With ``batch_size`` that is a whole batch run alone: on a CPU with a
model, seconds to minutes while every other worker, its model built, waits. So each other worker runs
the next batch as a preflight of its own (the same code: it decides from its own outputs and writes
against that decision), and its result is kept only if it decided what the preflight decided — then it
is exactly what a task would have written. One that decided otherwise (a batch that writes other
tensors, or nothing), failed, or lies inside what the preflight ran is dropped: its range is run again
as an ordinary task, so every input is written once and a failure is reported as it would have been.

Only batched evals over input that workers read themselves (datasets, sequences) speculate: one input
is cheap to run alone, and a stream's items travel with their task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lakecompute.compute._job import Task, TaskResult

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
        preflight: the preflight task (number 0, from ``start``).
        length: the inputs in all.
        workers: the workers the eval runs on.
        batch_size: inputs per batch (None: no speculation).
        checkpoint_interval: a range never crosses a multiple of it (0: none).
    """

    def __init__(
        self, preflight: Task, length: int, workers: int, batch_size: int | None, checkpoint_interval: int
    ) -> None:
        self.tasks: tuple[Task, ...] = ()
        if batch_size and preflight.items is None:
            self.tasks = tuple(_ranges(preflight.start, length, workers, batch_size, checkpoint_interval))
        self._held: dict[int, TaskResult] = {}

    def holds(self, result: TaskResult) -> bool:
        """Keep ``result`` if it is a speculative task's (True), to be judged with the preflight's."""
        if not 0 < result.number <= len(self.tasks):
            return False
        self._held[result.number] = result
        return True

    @property
    def complete(self) -> bool:
        """Whether every speculative task has reported."""
        return len(self._held) == len(self.tasks)

    def judge(self, preflight: TaskResult) -> Verdict:
        """Which results stand beside the preflight's ``preflight`` (successful) result: those that,
        in order and without a gap from where it ended, decided exactly what it decided."""
        stop, kept = preflight.stop, []
        ordered = [self._held[task.number] for task in self.tasks]
        for result in ordered:
            if not _agrees(result, preflight, stop):
                break
            kept.append(result)
            stop = result.stop
        return Verdict(tuple(kept), tuple(ordered[len(kept) :]), stop)


def _agrees(result: TaskResult, preflight: TaskResult, start: int) -> bool:
    decisions = preflight.decisions
    return (
        result.failure is None
        and result.start == start
        and decisions is not None
        and bool(decisions.written)
        and result.decisions == decisions
    )


def _ranges(start: int, length: int, workers: int, batch_size: int, interval: int) -> Sequence[Task]:
    """One batch for each worker but the preflight's, after the preflight's first batch, while each lies
    inside the input and inside one checkpoint interval."""
    tasks = []
    for number in range(workers):  # 0: the preflight's first batch, which must fit as well
        a = start + number * batch_size
        b = min(length, a + batch_size)
        if a >= length or (interval and a // interval != (b - 1) // interval):
            break
        if number:
            tasks.append(Task(number, a, b))
    return tasks
