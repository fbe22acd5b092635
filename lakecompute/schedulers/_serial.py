"""The serial scheduler: every task runs in the calling thread, one after the other."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import ClassVar, TypeVar

from lakecompute.schedulers._base import PAUSE, ProgressFn, Scheduler, TaskFn, call_task, pause_error

__all__ = ["SerialScheduler"]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")


def _ignore_progress(increment: int) -> None:
    """Stand in for ``on_progress`` when the caller passed none."""


def _direct_progress(on_progress: ProgressFn) -> ProgressFn:
    """``progress`` for tasks in the calling thread: increments go straight to ``on_progress``.

    ``progress(0)``, the per-sample cancellation point, returns at once: nothing here can cancel a
    task that runs in the consumer's own thread.
    """

    def progress(increment: int) -> None:
        if increment:
            on_progress(increment)

    return progress


class SerialScheduler(Scheduler):
    """Runs tasks one by one in the calling thread; the easiest to debug (``num_workers=0``).

    ``num_workers`` is accepted for a uniform interface and ignored. Exceptions propagate as they are,
    with their full traceback, and ``progress`` calls ``on_progress`` directly.
    """

    name: ClassVar[str] = "serial"
    shares_memory: ClassVar[bool] = True

    def __init__(self, num_workers: int = 0) -> None:
        """Create the scheduler.

        Args:
            num_workers: ignored; tasks always run in the calling thread.
        """
        super().__init__(num_workers)

    def _run(
        self,
        fn: TaskFn[TaskT, ResultT],
        tasks: Iterable[TaskT],
        on_progress: ProgressFn | None,
        limit: int,
    ) -> Generator[tuple[int, ResultT], None, None]:
        """Tasks run in order, one at a time, whatever ``max_in_flight`` says (it is still checked)."""
        if on_progress is None:
            return _run_serial(fn, tasks, _ignore_progress)
        return _run_serial(fn, tasks, _direct_progress(on_progress))


def _run_serial(
    fn: TaskFn[TaskT, ResultT], tasks: Iterable[TaskT], report: ProgressFn
) -> Generator[tuple[int, ResultT], None, None]:
    """The generator behind `SerialScheduler.run`."""
    # Pull one task at a time, so a lazy iterable is consumed no faster than results are taken. Every
    # result is taken before the next task is pulled, so nothing is ever outstanding at a pull: a
    # pause here could never end.
    for position, task in enumerate(tasks):
        if task is PAUSE:
            raise pause_error()
        yield position, call_task(fn, task, report)
