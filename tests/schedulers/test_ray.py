"""The Ray scheduler: the conformance suite on a local Ray, and what only Ray tasks need."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from lakecompute.errors import InvalidArgumentError, WorkerDiedError
from lakecompute.schedulers import ProgressFn, Scheduler, get_scheduler
from lakecompute.testing.schedulers import SchedulerTestError, SchedulerTests, raise_with_cause
from tests.s3.ray_session import ray_session

pytest.importorskip("ray")

__all__ = ["ray_session"]  # the session fixture, imported so that pytest finds it here


@pytest.fixture(autouse=True)
def _ray(ray_session: Any) -> None:
    """Every test here runs on the session's local Ray."""


class TestRay(SchedulerTests):
    scheduler_name = "ray"
    pickles_exceptions = True
    pickles_tasks = True


def exit_on_3(task: int, progress: ProgressFn) -> int:
    """Leave the worker with os._exit(3) on task 3."""
    if task == 3:
        os._exit(3)
    time.sleep(0.01)
    return task


def kill_self_on_2(task: int, progress: ProgressFn) -> int:
    """SIGKILL the worker on task 2."""
    if task == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.01)
    return task


def return_pid(task: int, progress: ProgressFn) -> int:
    """Return the worker's process id."""
    time.sleep(0.01)
    return os.getpid()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fn", [exit_on_3, kill_self_on_2])
def test_ray_worker_death_raises_worker_died(fn: Any) -> None:
    """A Ray worker that dies raises WorkerDiedError naming the task, without Ray retrying it."""
    failing = 3 if fn is exit_on_3 else 2
    with pytest.raises(WorkerDiedError) as info:
        list(get_scheduler("ray", 2).run(fn, range(8)))
    assert info.value.task == failing
    assert f"while running task {failing}:" in str(info.value)
    assert "num_workers=0" in str(info.value)


def test_ray_runs_in_other_processes() -> None:
    """Tasks run in Ray worker processes, not in the driver."""
    pids = {pid for _, pid in get_scheduler("ray", 2).run(return_pid, range(6))}
    assert os.getpid() not in pids


def test_ray_remote_traceback_attached() -> None:
    """A re-raised exception carries the worker's traceback, as with the processed scheduler."""
    with pytest.raises(SchedulerTestError) as info:
        list(get_scheduler("ray", 1).run(raise_with_cause, [5]))
    remote = info.value.remote_traceback  # type: ignore[attr-defined]  # added by the scheduler
    assert "in raise_with_cause" in remote
    assert "OSError: disk of task 5 is full" in remote


def test_ray_rejects_zero_workers() -> None:
    """RayScheduler(0) is refused; get_scheduler('ray', 0) runs serially."""
    from lakecompute.schedulers._ray import RayScheduler

    with pytest.raises(InvalidArgumentError, match="Expected num_workers >= 1 for the ray scheduler"):
        RayScheduler(0)
    sched: Scheduler = get_scheduler("ray", 0)
    assert sched.name == "serial"


def test_ray_uses_running_instance() -> None:
    """With Ray initialised by the user, the scheduler uses it rather than starting another."""
    import ray

    before = ray.get_runtime_context().get_node_id()
    assert dict(get_scheduler("ray", 2, init_options={"num_cpus": 99}).run(return_pid, [1])).keys() == {0}
    assert ray.get_runtime_context().get_node_id() == before
    assert ray.cluster_resources()["CPU"] == 2


def test_ray_missing_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Ray importable, scheduler='ray' says which extra to install."""
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(InvalidArgumentError, match=r'pip install "lakecompute\[ray\]"'):
        get_scheduler("ray", 2)


def test_ray_eval_rng_output_matches_every_other_scheduler(tmp_path: Any) -> None:
    """The seeded random pipeline gives, on Ray tasks, the same values bit for bit as in the caller."""
    import lakecompute as lc
    from tests.compute.random_pipeline import PIPELINE, make_out

    values = []
    for name, workers in (("serial", 0), ("ray", 2)):
        path = str(tmp_path / name)
        PIPELINE.eval(list(range(30)), make_out(path), num_workers=workers, scheduler=name, seed=3,
                      progressbar=False)  # fmt: skip
        ds = lc.load(path)
        values.append((ds.v.numpy().tolist(), ds.draw.numpy().tolist()))
    assert values[0] == values[1]


def test_ray_start_options_are_a_local_instance_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RAY_ADDRESS the scheduler starts its own local Ray (never a foreign cluster on the
    machine); with RAY_ADDRESS it joins that cluster, without num_cpus; init_options override both."""
    from lakecompute.schedulers._ray import RayScheduler

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert RayScheduler(3).start_options() == {"address": "local", "num_cpus": 3, "include_dashboard": False}
    assert RayScheduler(3, init_options={"num_cpus": 1}).start_options()["num_cpus"] == 1
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert RayScheduler(3).start_options() == {}
    assert RayScheduler(3, init_options={"address": "auto"}).start_options() == {"address": "auto"}
