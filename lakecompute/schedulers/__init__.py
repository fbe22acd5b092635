"""Schedulers: run a task function over many tasks, in the caller, in threads or in processes.

A scheduler knows nothing of datasets; the compute engine hands it tasks and commits their results.

Example:
    >>> from lakecompute.schedulers import get_scheduler
    >>> sched = get_scheduler("serial", num_workers=0)
    >>> list(sched.run(lambda task, progress: task + 1, [10, 20]))
    [(0, 11), (1, 21)]

Backends are registered by name (``"serial"``, ``"threaded"``, ``"processed"``, and ``"ray"``, which is
imported only when asked for); `register_scheduler` adds more. Callers ask a scheduler what it
can do through capability flags (`Scheduler.shares_memory`,
`Scheduler.needs_fork_safe_storage`, `Scheduler.without_fork`), never by its name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.optional import require
from lakecompute.schedulers._base import (
    PAUSE,
    ProgressFn,
    Scheduler,
    TaskFn,
    call_task,
    parse_num_workers,
    take_next_task,
    usable_cpus,
    worker_device,
    worker_id,
)
from lakecompute.schedulers._devices import (
    Placement,
    cuda_initialised,
    device_oom_advice,
    is_device_oom,
    pinned_staging,
    place_workers,
    visible_devices,
)
from lakecompute.schedulers._ordered import InOrder
from lakecompute.schedulers._processed import ProcessedScheduler, StartMethod
from lakecompute.schedulers._ranks import (
    DISTRIBUTED_ENV,
    Inbox,
    RankChannel,
    Ranks,
    RanksScheduler,
    RemoteInbox,
    capacity_of,
    job_ranks,
    rank_timeout,
    serve_ranked,
)
from lakecompute.schedulers._ray_options import Ray
from lakecompute.schedulers._seeding import reseed_globals
from lakecompute.schedulers._serial import SerialScheduler
from lakecompute.schedulers._service import Service
from lakecompute.schedulers._threaded import ThreadedScheduler
from lakecompute.schedulers._transport import (
    PickledError,
    pickle_exception,
    portable_exception,
    rebuild_exception,
)

__all__ = [
    "DISTRIBUTED_ENV",
    "PAUSE",
    "InOrder",
    "Inbox",
    "PickledError",
    "Placement",
    "ProcessedScheduler",
    "ProgressFn",
    "RankChannel",
    "Ranks",
    "RanksScheduler",
    "Ray",
    "RemoteInbox",
    "Scheduler",
    "SchedulerFactory",
    "SerialScheduler",
    "Service",
    "StartMethod",
    "TaskFn",
    "ThreadedScheduler",
    "call_task",
    "capacity_of",
    "cuda_initialised",
    "device_oom_advice",
    "get_scheduler",
    "is_device_oom",
    "job_ranks",
    "pickle_exception",
    "pinned_staging",
    "place_workers",
    "portable_exception",
    "rank_timeout",
    "rebuild_exception",
    "register_scheduler",
    "reseed_globals",
    "scheduler_names",
    "serve_ranked",
    "take_next_task",
    "unregister_scheduler",
    "usable_cpus",
    "visible_devices",
    "worker_device",
    "worker_id",
]

SchedulerFactory = Callable[..., Scheduler]
"""Builds a scheduler: called as ``factory(num_workers, **options)``."""

_REGISTRY: dict[str, SchedulerFactory] = {}


def register_scheduler(name: str, factory: SchedulerFactory) -> None:
    """Make a scheduler available to `get_scheduler` under ``name``.

    Registering a name again replaces the earlier factory.

    Args:
        name: the name users pass as ``scheduler=``.
        factory: called as ``factory(num_workers, **options)``; returns a `Scheduler`. A
            `Scheduler` subclass works as its own factory.

    Raises:
        InvalidArgumentError: if ``name`` is empty.
        InvalidTypeError: if ``name`` is not a str or ``factory`` is not callable.

    Example:
        >>> from lakecompute.schedulers import ThreadedScheduler, register_scheduler
        >>> register_scheduler("my-threads", ThreadedScheduler)
    """
    if not isinstance(name, str):
        raise InvalidTypeError(f"Expected the scheduler name to be a str. Got {name!r}.")
    if not name:
        raise InvalidArgumentError("Expected a non-empty scheduler name. Got ''.")
    if not callable(factory):
        raise InvalidTypeError(
            f"Expected the factory for scheduler {name!r} to be callable. Got {factory!r}."
        )
    _REGISTRY[name] = factory


def unregister_scheduler(name: str) -> None:
    """Forget the scheduler registered under ``name`` (nothing happens when none is): a test that
    registers its own scheduler takes it away again, since the registry is the process's.

    Example:
        >>> from lakecompute.schedulers import ThreadedScheduler, register_scheduler, unregister_scheduler
        >>> register_scheduler("my-threads", ThreadedScheduler)
        >>> unregister_scheduler("my-threads")
    """
    _REGISTRY.pop(name, None)


def scheduler_names() -> list[str]:
    """The names `get_scheduler` knows, sorted."""
    return sorted(_REGISTRY)


def get_scheduler(name: str | Ray, num_workers: int, **options: Any) -> Scheduler:
    """Build the scheduler registered under ``name``.

    With ``num_workers=0`` every name gives the serial scheduler (tasks run in the calling thread),
    and ``options`` are not used.

    Args:
        name: ``"serial"``, ``"threaded"``, ``"processed"``, ``"ray"``, a registered name, or a
            `Ray` with its settings.
        num_workers: how many tasks may run at once; 0 to run them in the calling thread.
        **options: passed to the scheduler's factory, e.g. ``start_method="spawn"`` for
            ``"processed"``.

    Returns:
        A new scheduler.

    Raises:
        InvalidArgumentError: if ``name`` is unknown, ``num_workers`` is negative, or the backend cannot
            be used here (e.g. ``"ray"`` without Ray installed).
        InvalidTypeError: if ``num_workers`` is not an int.

    Example:
        >>> from lakecompute.schedulers import get_scheduler
        >>> get_scheduler("processed", num_workers=0)
        SerialScheduler(num_workers=0)
    """
    if isinstance(name, Ray):
        parse_num_workers(num_workers)
        return SerialScheduler() if num_workers == 0 else name.build(num_workers)
    factory = _REGISTRY.get(name)
    if factory is None:
        raise InvalidArgumentError(
            f"Unknown scheduler {name!r}. Expected one of {scheduler_names()!r}. "
            "Register new ones with lakecompute.schedulers.register_scheduler()."
        )
    parse_num_workers(num_workers)
    if num_workers == 0:
        return SerialScheduler()
    return factory(num_workers, **options)


def _ray_factory(num_workers: int, **options: Any) -> Scheduler:
    """Build the Ray scheduler, importing Ray only now: ``import lakecompute`` must stay fast."""
    require(
        "ray", "The 'ray' scheduler", 'pip install "lakecompute[ray]"', 'or use the "processed" scheduler'
    )
    module = importlib.import_module("lakecompute.schedulers._ray")
    scheduler: Scheduler = module.RayScheduler(num_workers, **options)
    return scheduler


register_scheduler(SerialScheduler.name, SerialScheduler)
register_scheduler(ThreadedScheduler.name, ThreadedScheduler)
register_scheduler(ProcessedScheduler.name, ProcessedScheduler)
register_scheduler("ray", _ray_factory)
