"""The scheduler registry: get_scheduler, register_scheduler and worker_id outside workers."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.schedulers import (
    ProcessedScheduler,
    Scheduler,
    SerialScheduler,
    ThreadedScheduler,
    get_scheduler,
    register_scheduler,
    scheduler_names,
    unregister_scheduler,
    worker_id,
)


@pytest.fixture
def restore_registry() -> Iterator[None]:
    """Undo registrations a test makes (of new names: no test here replaces a registered one)."""
    saved = set(scheduler_names())
    yield
    for name in set(scheduler_names()) - saved:
        unregister_scheduler(name)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("serial", SerialScheduler), ("threaded", ThreadedScheduler), ("processed", ProcessedScheduler)],
)
def test_get_scheduler_builds_named_scheduler(name: str, kind: type[Scheduler]) -> None:
    """Each built-in name gives its scheduler class with the requested worker count."""
    sched = get_scheduler(name, 3)
    assert type(sched) is kind
    assert sched.name == name
    assert sched.num_workers == 3


@pytest.mark.parametrize("name", ["serial", "threaded", "processed", "ray"])
def test_get_scheduler_zero_workers_is_serial(name: str) -> None:
    """num_workers=0 gives the serial scheduler whatever the name (ray is not even imported)."""
    assert type(get_scheduler(name, 0)) is SerialScheduler


def test_get_scheduler_passes_options() -> None:
    """Options reach the factory (start_method for processed)."""
    sched = get_scheduler("processed", 2, start_method="spawn")
    assert isinstance(sched, ProcessedScheduler)
    assert sched.start_method == "spawn"


def test_get_scheduler_unknown_name_lists_known() -> None:
    """An unknown name raises InvalidArgumentError listing the known names."""
    with pytest.raises(InvalidArgumentError) as info:
        get_scheduler("dask", 2)
    assert str(info.value) == (
        "Unknown scheduler 'dask'. Expected one of ['processed', 'ray', 'serial', 'threaded']. "
        "Register new ones with lakecompute.schedulers.register_scheduler()."
    )
    assert isinstance(info.value, ValueError)


def test_get_scheduler_negative_workers() -> None:
    """A negative worker count raises InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match=r"Expected num_workers >= 0\. Got -1\."):
        get_scheduler("threaded", -1)


@pytest.mark.parametrize("num_workers", [1.5, "2", True, None])
def test_get_scheduler_non_int_workers(num_workers: object) -> None:
    """A worker count that is not an int raises InvalidTypeError."""
    with pytest.raises(InvalidTypeError, match="Expected num_workers to be an int"):
        get_scheduler("threaded", num_workers)  # type: ignore[arg-type]  # the wrong type on purpose


def test_get_scheduler_ray_unavailable() -> None:
    """Asking for ray without Ray installed says how to install it."""
    if importlib.util.find_spec("ray") is not None:
        pytest.skip("Ray is installed here; this test checks the message shown without it.")
    with pytest.raises(InvalidArgumentError, match=r'pip install "lakecompute\[ray\]"'):
        get_scheduler("ray", 2)


def test_register_scheduler_adds_name(restore_registry: None) -> None:
    """A registered factory is called with num_workers and options and appears among the names."""
    calls: list[tuple[int, dict[str, object]]] = []

    def factory(num_workers: int, **options: object) -> Scheduler:
        calls.append((num_workers, options))
        return ThreadedScheduler(num_workers)

    register_scheduler("mine", factory)
    sched = get_scheduler("mine", 2, flavour="x")
    assert isinstance(sched, ThreadedScheduler)
    assert calls == [(2, {"flavour": "x"})]
    assert "mine" in scheduler_names()


def test_register_scheduler_rejects_bad_arguments(restore_registry: None) -> None:
    """An empty name or a factory that is not callable is refused."""
    with pytest.raises(InvalidArgumentError, match="non-empty scheduler name"):
        register_scheduler("", SerialScheduler)
    with pytest.raises(InvalidTypeError, match="to be callable"):
        register_scheduler("broken", 42)  # type: ignore[arg-type]  # the wrong type on purpose


def test_worker_id_is_zero_in_caller() -> None:
    """Outside any worker, worker_id() is 0."""
    assert worker_id() == 0


def test_scheduler_context_manager_closes() -> None:
    """A scheduler works as a context manager and close() may be called more than once."""
    with get_scheduler("threaded", 2) as sched:
        assert dict(sched.run(lambda task, progress: -task, [1, 2])) == {0: -1, 1: -2}
    sched.close()
