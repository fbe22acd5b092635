"""The Ray scheduler: the conformance suite on a local Ray, and what only Ray tasks need."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.errors import InvalidArgumentError, WorkerDiedError
from lakecompute.schedulers import ProgressFn, Ray, Scheduler, get_scheduler
from lakecompute.testing.schedulers import SchedulerTestError, SchedulerTests, raise_with_cause
from tests.helpers import NeedsWeights, WeightsMissingError, make_out
from tests.s3.ray_session import REPO_ROOT, ray_session

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
    """A Ray worker that dies raises WorkerDiedError naming the task (retries off: at once)."""
    failing = 3 if fn is exit_on_3 else 2
    with pytest.raises(WorkerDiedError) as info:
        list(get_scheduler(Ray(max_retries=0), 2).run(fn, range(8)))
    assert info.value.task == failing
    assert f"while running task {failing}:" in str(info.value)
    assert "num_workers=0" in str(info.value)


@pytest.mark.timeout(120)
def test_ray_worker_death_every_attempt_says_how_many() -> None:
    """A task that kills its worker on every attempt is WorkerDiedError after its retries, saying so."""
    with pytest.raises(WorkerDiedError, match="while running task 2, on each of 3 attempts"):
        list(get_scheduler(Ray(max_retries=2), 2).run(kill_self_on_2, range(4)))


@lc.compute
def double_dying_once(x: int, sample_out: Any, marker: str) -> None:
    """Double ``x``; the first time input 5 is seen (no marker file yet), SIGKILL this worker."""
    if x == 5 and not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os.kill(os.getpid(), signal.SIGKILL)
    sample_out.append({"x": np.int64(2 * x)})


@pytest.mark.timeout(120)
def test_ray_eval_retries_a_lost_task_without_duplicating_outputs(tmp_path: Path) -> None:
    """By default a task whose worker dies runs again: the eval ends exact, every output once."""
    marker = str(tmp_path / "died")
    out = make_out(str(tmp_path / "out"))
    result = double_dying_once(marker=marker).eval(
        list(range(40)), out, num_workers=2, scheduler=Ray(), progressbar=False
    )
    assert os.path.exists(marker)  # a worker did die
    assert result.outputs == {"x": 40}
    np.testing.assert_array_equal(lc.load(str(tmp_path / "out")).x.numpy(), 2 * np.arange(40))


@pytest.mark.timeout(120)
def test_ray_eval_without_retries_fails_then_resumes_exactly(tmp_path: Path) -> None:
    """With max_retries=0 the lost task is WorkerDiedError; a rerun resumes and ends exact."""
    marker = str(tmp_path / "died")
    path = str(tmp_path / "out")
    fn = double_dying_once(marker=marker)
    with pytest.raises(WorkerDiedError):
        fn.eval(list(range(40)), make_out(path), num_workers=2, scheduler=Ray(max_retries=0),
                checkpoint_interval=4, progressbar=False)  # fmt: skip
    result = fn.eval(list(range(40)), lc.load(path), num_workers=2, scheduler=Ray(max_retries=0),
                     checkpoint_interval=4, progressbar=False)  # fmt: skip
    assert result.resumed_from % 4 == 0
    np.testing.assert_array_equal(lc.load(path).x.numpy(), 2 * np.arange(40))


@pytest.mark.parametrize(
    ("options", "named"),
    [(Ray(num_gpus=1), "'GPU': 1.0"), (Ray(resources={"big-disk": 2}), "'big-disk': 2.0"),
     (Ray(num_cpus=64), "'CPU': 64.0")],
)  # fmt: skip
def test_ray_unsatisfiable_request_is_refused_at_once(tmp_path: Path, options: Ray, named: str) -> None:
    """A task request no node can satisfy is an error naming it and the nodes, never a silent wait."""
    out = make_out(str(tmp_path / "out"))
    with pytest.raises(InvalidArgumentError, match="which no node of the cluster has") as info:
        double_dying_once(marker="unused").eval([1, 2], out, num_workers=2, scheduler=options,
                                                progressbar=False)  # fmt: skip
    assert named in str(info.value)
    assert "'CPU': 2.0" in str(info.value)  # what the nodes have
    assert lc.load(str(tmp_path / "out")).x.numpy().tolist() == []


def test_ray_eval_with_relative_paths_after_chdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative dataset paths travel as absolute ones: Ray workers started in another folder find them."""
    monkeypatch.chdir(tmp_path)
    src = lc.empty("src", overwrite=True)
    src.create_tensor("x", dtype="int64")
    src.x.extend(np.arange(12))
    out = make_out("out")

    result = double_row().eval(src, out, num_workers=2, scheduler="ray", progressbar=False)
    assert result.outputs == {"x": 12}
    np.testing.assert_array_equal(lc.load("out").x.numpy(), 2 * np.arange(12))
    assert lc.load("out").path == "out"  # as the user gave it


@lc.compute
def double_row(row: Any, sample_out: Any) -> None:
    """Double a dataset row's ``x``."""
    sample_out.append({"x": row.x.numpy() * 2})


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [({"num_gpus": -1}, lc.InvalidArgumentError, "Expected Ray num_gpus to be a finite number >= 0. Got -1."),
     ({"max_retries": 1.5}, lc.InvalidTypeError, "Expected Ray max_retries to be an int. Got float: 1.5."),
     ({"max_retries": -1}, lc.InvalidArgumentError,
      "Expected Ray max_retries >= 0. Got -1. Use 0 to turn retries off."),
     ({"resources": {"a": "x"}}, lc.InvalidTypeError,
      "Expected Ray resource 'a' to be a number. Got str: 'x'."),
     ({"address": ""}, lc.InvalidArgumentError, "Expected Ray address to be a non-empty str. Got ''."),
     ({"shared_filesystem": 1}, lc.InvalidTypeError,
      "Expected Ray shared_filesystem to be True or False. Got int: 1.")],
)  # fmt: skip
def test_ray_options_refuse_bad_values(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    """lc.schedulers.Ray checks its settings when it is made (lakecompute.parsing's rules), with a message
    naming the setting."""
    with pytest.raises(error) as info:
        Ray(**kwargs)
    assert str(info.value) == message


def test_ray_options_take_numpy_numbers() -> None:
    """numpy integers and floats are counts and amounts like Python's; they reach the tasks as plain ones."""
    options = Ray(num_cpus=np.float32(2), max_retries=np.int64(1)).task_options()
    assert options == {"num_cpus": 2.0, "max_retries": 1}
    assert type(options["max_retries"]) is int


def test_ray_options_are_the_default_of_the_name() -> None:
    """scheduler='ray' is Ray(): one CPU per task and three retries; Ray(...) values reach the tasks."""
    from lakecompute.schedulers._ray import RayScheduler

    named = get_scheduler("ray", 2)
    assert isinstance(named, RayScheduler)
    assert named.options == Ray()
    assert Ray().task_options() == {"num_cpus": 1.0, "max_retries": 3}
    assert Ray(num_cpus=2, resources={"big": 1}).request() == {"CPU": 2.0, "big": 1.0}
    assert lc.schedulers.Ray is Ray


_HTTP_ADDRESS_SCRIPT = """
import lakecompute as lc
from lakecompute.schedulers import get_scheduler
try:
    list(get_scheduler("ray", 1).run(lambda task, progress: task, [1]))
except lc.InvalidArgumentError as exc:
    print("REFUSED", exc)
"""


@pytest.mark.timeout(120)
def test_ray_address_of_the_dashboard_is_refused_clearly(tmp_path: Path) -> None:
    """RAY_ADDRESS set to the dashboard's http:// address (and no ray.init) is a LakeComputeError
    saying which address to use, not Ray's raw ValueError."""
    env = {**os.environ, "RAY_ADDRESS": "http://127.0.0.1:8265", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", _HTTP_ADDRESS_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=100, cwd=tmp_path)  # fmt: skip
    assert "REFUSED Ray refused the cluster address 'http://127.0.0.1:8265'" in done.stdout, done.stderr
    assert "GCS address" in done.stdout


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
    from tests.compute.random_pipeline import PIPELINE, pipeline_out

    values = []
    for name, workers in (("serial", 0), ("ray", 2)):
        path = str(tmp_path / name)
        PIPELINE.eval(list(range(30)), pipeline_out(path), num_workers=workers, scheduler=name, seed=3,
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


def test_ray_eval_streams_a_generator(tmp_path: Path) -> None:
    """A generator as data_in runs on Ray: the driver feeds its items with the tasks, in order."""
    out = make_out(str(tmp_path / "out"))
    with pytest.warns(lc.LakeComputeWarning, match="is not recorded"):  # a generator has no identity
        result = double_dying_once(marker=str(tmp_path / "unused")).eval(
            (i for i in range(300) if i != 5), out, num_workers=2, scheduler="ray", progressbar=False
        )
    assert result.inputs == 299
    expected = [2 * i for i in range(300) if i != 5]
    assert lc.load(str(tmp_path / "out")).x.numpy().tolist() == expected


@pytest.mark.timeout(120)
def test_ray_class_init_failure_is_a_transform_error(tmp_path: Path) -> None:
    """A class compute whose __init__ raises in the Ray workers reaches the caller as TransformError naming
    the class, no index, the worker's exception as its cause; nothing is written."""
    out = make_out(str(tmp_path / "out"))
    version = out.version
    with pytest.raises(lc.TransformError) as info:
        NeedsWeights(path="/models/m.pt").eval(
            list(range(20)), out, num_workers=2, scheduler="ray", progressbar=False
        )
    err = info.value
    assert err.function == "NeedsWeights"
    assert err.index is None
    assert str(err).startswith(
        "Transform 'NeedsWeights' could not start: its __init__ raised WeightsMissingError: no weights at "
        "/models/m.pt."
    )
    assert type(err.__cause__) is WeightsMissingError
    assert str(err.__cause__) == "no weights at /models/m.pt"
    assert lc.load(str(tmp_path / "out")).version == version


@pytest.mark.timeout(120)
def test_ray_batched_eval_runs_the_next_batch_beside_the_first_once(tmp_path: Path) -> None:
    """On Ray tasks too, the batch run beside the preflight's is kept (it writes fewer tensors, its ranks
    agree): the outputs are in order and every batch is called once."""
    from tests.compute.test_speculation import BATCH, N, _calls, _setup, first_batch_writes_more

    out = _setup(tmp_path, y={"dtype": "int64"}, z={"dtype": "int64"})
    fn = first_batch_writes_more(log_dir=str(tmp_path))
    result = fn.eval(list(range(N)), out, batch_size=BATCH, skip_ok=True, num_workers=2, scheduler="ray",
                     progressbar=False)  # fmt: skip
    assert out.y.numpy().tolist() == list(range(N))
    assert out.z.numpy().tolist() == [-i for i in range(BATCH)]
    assert result.outputs == {"y": N, "z": BATCH}
    assert _calls(tmp_path) == Counter(range(0, N, BATCH))


@pytest.mark.timeout(120)
def test_ray_second_batch_begins_while_the_first_runs(tmp_path: Path) -> None:
    """On Ray tasks, the second worker's first batch begins while the preflight's batch still runs."""
    from tests.compute.test_speculation import BATCH, N, _setup, waits_for_the_second_batch

    out = _setup(tmp_path)
    fn = waits_for_the_second_batch(log_dir=str(tmp_path))
    fn.eval(list(range(N)), out, batch_size=BATCH, num_workers=2, scheduler="ray", progressbar=False)
    assert (tmp_path / "saw").read_text() == "True", "the second batch waited for the preflight's to end"
    assert out.y.numpy().tolist() == [2 * i for i in range(N)]
