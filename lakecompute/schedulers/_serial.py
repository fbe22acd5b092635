"""The serial scheduler: every task runs in the calling thread, one after the other."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import ClassVar, TypeVar

from lakecompute.parsing import DevicesLike, parse_devices
from lakecompute.schedulers._base import (
    PAUSE,
    Job,
    PlacedScheduler,
    ProgressFn,
    Results,
    _set_thread_device,
    call_task,
    pause_error,
    worker_device,
)
from lakecompute.schedulers._devices import place_workers

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


class SerialScheduler(PlacedScheduler):
    """Runs tasks one by one in the calling thread; the easiest to debug (``num_workers=0``).

    ``num_workers`` is accepted for a uniform interface and ignored. Exceptions propagate as they are,
    with their full traceback, and ``progress`` calls ``on_progress`` directly. With ``devices``, tasks
    run with `lakecompute.schedulers.worker_device` naming the first device (``"cuda:<n>"`` in this
    process's numbering); nothing about CUDA is changed in this process.
    """

    name: ClassVar[str] = "serial"
    shares_memory: ClassVar[bool] = True

    def __init__(self, num_workers: int = 0, devices: DevicesLike = None) -> None:
        """Create the scheduler.

        Args:
            num_workers: ignored; tasks always run in the calling thread.
            devices: ``"cuda"`` or GPU indices: the device the tasks are told to use (the first).

        Raises:
            InvalidArgumentError: ``devices`` names no GPU this process sees.
        """
        super().__init__(num_workers)
        self._placement = place_workers(parse_devices("devices", devices))

    def _run(self, job: Job[TaskT, ResultT]) -> Results[ResultT]:
        """Tasks run in order, one at a time, whatever ``max_in_flight`` says (it is still checked).

        With a placement, the tasks are told its first device.
        """
        device = None if self._placement is None else self._placement.in_caller(0)
        report = _ignore_progress if job.on_progress is None else _direct_progress(job.on_progress)
        return _run_serial(job, report, device)


def _run_serial(job: Job[TaskT, ResultT], report: ProgressFn, device: str | None) -> Results[ResultT]:
    """The generator behind `SerialScheduler.run`."""
    # Pull one task at a time, so a lazy iterable is consumed no faster than results are taken. Every
    # result is taken before the next task is pulled, so nothing is ever outstanding at a pull: a
    # pause here could never end.
    for position, task in enumerate(job.tasks):
        if task is PAUSE:
            raise pause_error()
        with _device(device):
            value = call_task(job.fn, task, report, cancels=False)  # both reports ignore progress(0)
        yield position, value


@contextlib.contextmanager
def _device(device: str | None) -> Iterator[None]:
    """The calling thread's `worker_device` is ``device`` while a task runs (then as it was)."""
    if device is None:
        yield
        return
    before = worker_device()
    _set_thread_device(device)
    try:
        yield
    finally:
        _set_thread_device(before)
