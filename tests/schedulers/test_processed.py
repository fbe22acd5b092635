"""The processed scheduler: the conformance suite, and what only worker processes need."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import multiprocess
import numpy as np
import pytest

from lakecompute.errors import InvalidArgumentError, InvalidTypeError, UnpicklableTaskError, WorkerDiedError
from lakecompute.schedulers import (
    ProcessedScheduler,
    ProgressFn,
    Scheduler,
    Service,
    get_scheduler,
    worker_id,
)
from lakecompute.schedulers._processed import DEFAULT_PRELOAD
from lakecompute.testing.schedulers import SchedulerTestError, SchedulerTests, raise_with_cause, square
from tests.helpers import touch, wait_until
from tests.procs import wait_blocked_writing_pipe, wait_session_empty

REPO_ROOT = Path(__file__).resolve().parents[2]


class TestProcessed(SchedulerTests):
    scheduler_name = "processed"
    pickles_exceptions = True
    pickles_tasks = True

    def assert_workers_stopped(self) -> None:
        """No worker process of the run is alive."""
        assert multiprocess.active_children() == []


class TestProcessedSpawn(TestProcessed):
    """The same suite with workers started by spawn (the default outside Linux)."""

    def make_scheduler(self, num_workers: int = 2) -> Scheduler:
        """Build a processed scheduler whose workers are spawned."""
        return get_scheduler("processed", num_workers, start_method="spawn")


class TestProcessedForkserver(TestProcessed):
    """The same suite with workers forked by the fork server (what evals on S3 use)."""

    def make_scheduler(self, num_workers: int = 2) -> Scheduler:
        """Build a processed scheduler whose workers come from the fork server."""
        return get_scheduler("processed", num_workers).without_fork()


@dataclass(frozen=True)
class DescribedTask:
    """A task that describes itself for error messages."""

    index: int

    def describe(self) -> str:
        """Name the rows the task covers."""
        return f"rows {self.index * 10}..{self.index * 10 + 10}"


def kill_self_on_3(task: DescribedTask, progress: ProgressFn) -> int:
    """SIGKILL the worker on task 3, sleep a little otherwise."""
    if task.index == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.01)
    return task.index


def exit_on_3(task: int, progress: ProgressFn) -> int:
    """Leave the worker with os._exit(3) on task 3."""
    if task == 3:
        os._exit(3)
    time.sleep(0.01)
    return task


# Per-worker state, as the engine keeps its class-based compute instances: built once per worker process.
_STATE: dict[str, int] = {}


def init_once_per_worker(task: tuple[str, int], progress: ProgressFn) -> tuple[int, int, int]:
    """Count initialisations of this worker's state for one test (keyed by a token, the path of a
    folder); return them. Its first two tasks wait until the other worker has taken as many (each task
    leaves a file ``<pid>-<task>`` in the folder), so that both workers run several tasks."""
    token, i = task
    if token not in _STATE:
        _STATE[token] = 0
    _STATE[token] += 0 if f"{token}-init" in _STATE else 1
    _STATE[f"{token}-init"] = 1
    folder = Path(token)
    touch(folder / f"{os.getpid()}-{i}")

    def both_took_as_many() -> bool:
        taken = Counter(name.split("-")[0] for name in os.listdir(folder))
        mine = min(taken[str(os.getpid())], 2)
        return len(taken) >= 2 and all(count >= mine for count in taken.values())

    wait_until(both_took_as_many, what="the other worker to take as many tasks")
    return worker_id(), os.getpid(), _STATE[token]


def return_generator(task: int, progress: ProgressFn) -> object:
    """Return something that cannot be pickled."""
    return (i for i in range(task))


@pytest.mark.timeout(30)
def test_processed_sigkill_raises_worker_died() -> None:
    """A worker killed with SIGKILL raises WorkerDiedError naming the task and the signal."""
    tasks = [DescribedTask(i) for i in range(10)]
    with pytest.raises(WorkerDiedError) as info:
        list(ProcessedScheduler(2).run(kill_self_on_3, tasks))
    error = info.value
    assert error.task == DescribedTask(3)
    assert error.exitcode == -signal.SIGKILL
    assert "signal SIGKILL" in str(error)
    assert "while running task rows 30..40" in str(error)
    assert multiprocess.active_children() == []


def small_then_large(task: int, progress: ProgressFn) -> tuple[int, bytes]:
    """Task 0: this worker's pid; task 1: 4 MiB, far more than a pipe holds."""
    return os.getpid(), b"x" * (4 << 20 if task else 0)


@pytest.mark.timeout(60)
def test_processed_worker_killed_while_sending_a_large_result() -> None:
    """A worker killed halfway through sending a result larger than a pipe's buffer raises
    WorkerDiedError naming its task (the parent never waits for the rest of the message)."""
    run = ProcessedScheduler(1).run(small_then_large, [0, 1], max_in_flight=2)
    try:
        position, (pid, _) = next(run)
        assert position == 0
        # The parent reads only while it is iterated: the worker fills the pipe and waits.
        assert wait_blocked_writing_pipe(pid, timeout=30)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerDiedError) as info:
            next(run)
    finally:
        run.close()
    assert info.value.task == 1
    assert info.value.exitcode == -signal.SIGKILL
    assert "signal SIGKILL while running task 1." in str(info.value)
    assert multiprocess.active_children() == []


def global_draws(task: tuple[str, int], progress: ProgressFn) -> tuple[float, float, float]:
    """Draw from numpy's, Python's and torch's global generators (code that ignores its rng), once both
    workers have taken a task (each leaves a file named by its pid in the folder ``task[0]``)."""
    import torch

    folder = Path(task[0])
    touch(folder / str(os.getpid()))
    wait_until(lambda: len(list(folder.iterdir())) >= 2, what="both workers to take a task")
    return float(np.random.random()), random.random(), float(torch.rand(1))


@pytest.mark.timeout(60)
def test_processed_workers_reseed_global_generators(tmp_path: Path) -> None:
    """Workers forked from one parent reseed numpy's, Python's and torch's global generators as they start:
    no draw repeats across workers or repeats the parent's."""
    torch = pytest.importorskip("torch")
    np.random.seed(0)
    random.seed(0)
    torch.manual_seed(0)
    tasks = [(str(tmp_path), i) for i in range(6)]
    draws = [value for _, value in ProcessedScheduler(2).run(global_draws, tasks)]
    parent = (float(np.random.random()), random.random(), float(torch.rand(1)))
    assert len(list(tmp_path.iterdir())) == 2  # both workers drew
    for kind in range(3):
        values = {d[kind] for d in draws}
        assert len(values) == 6
        assert parent[kind] not in values


@pytest.mark.timeout(30)
def test_processed_os_exit_raises_worker_died() -> None:
    """A worker leaving with os._exit(3) raises WorkerDiedError with exit code 3 and the task's repr."""
    with pytest.raises(WorkerDiedError) as info:
        list(ProcessedScheduler(2).run(exit_on_3, range(10)))
    error = info.value
    assert error.task == 3
    assert error.exitcode == 3
    assert "exit code 3 while running task 3." in str(error)
    assert "num_workers=0" in str(error)
    assert multiprocess.active_children() == []


def _exited(pid: int) -> bool:
    """Whether process ``pid`` has exited: gone, or a zombie its parent has not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def last_task_outlives_the_idle_worker(task: tuple[str, int], progress: ProgressFn) -> bool:
    """Two tasks that run on different workers (each waits until the other has started). Task 1 then
    waits until task 0's worker, with no task left to take, has exited."""
    folder, number = Path(task[0]), task[1]
    touch(folder / f"{number}-{os.getpid()}")
    other = wait_until(lambda: [p for p in os.listdir(folder) if p.startswith(f"{1 - number}-")])
    if number == 0:
        return False
    pid = int(other[0].split("-")[1])
    return wait_until(lambda: _exited(pid), timeout=20, what="the idle worker to exit")


@pytest.mark.timeout(60)
def test_processed_idle_worker_exits_while_the_last_task_runs(tmp_path: Path) -> None:
    """Once every task is queued, a worker that finds none left exits at once (with a model's CUDA
    context, its teardown then overlaps the tasks still running) and that exit is not a death."""
    tasks = [(str(tmp_path), 0), (str(tmp_path), 1)]
    results = list(ProcessedScheduler(2).run(last_task_outlives_the_idle_worker, tasks))
    assert results == [(0, False), (1, True)]
    assert multiprocess.active_children() == []


def exit_0_on_last(task: int, progress: ProgressFn) -> int:
    """Leave the worker with os._exit(0) while running the last task (after every task was queued)."""
    if task == 3:
        os._exit(0)
    return task


@pytest.mark.timeout(30)
def test_processed_clean_exit_during_a_task_is_still_a_death() -> None:
    """Exit code 0 is no excuse: a worker that exits while running a task died, even once the workers
    have been told to exit when idle."""
    with pytest.raises(WorkerDiedError) as info:
        list(ProcessedScheduler(2).run(exit_0_on_last, range(4)))
    assert info.value.task == 3
    assert info.value.exitcode == 0
    assert multiprocess.active_children() == []


def square_or_fail(task: int, progress: ProgressFn) -> int:
    """task squared; ValueError for 5; task 3 SIGKILLs its process."""
    if task == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    if task == 5:
        raise ValueError("five is refused")
    return task * task


@pytest.mark.timeout(60)
def test_service_answers_requests_and_reports_a_death() -> None:
    """Service: each future gets its task's result or exception; a helper killed while running a task is a
    WorkerDiedError naming the task and the signal, for that request and every later one; stop ends the
    helpers."""
    service = Service(square_or_fail, 2)
    try:
        assert [service.submit(k).result(timeout=30) for k in (0, 1, 2, 4)] == [0, 1, 4, 16]
        failed = service.submit(5).exception(timeout=30)
        assert isinstance(failed, ValueError)
        assert str(failed) == "five is refused"
        died = service.submit(3).exception(timeout=30)
        assert isinstance(died, WorkerDiedError)
        assert "signal SIGKILL while running task 3" in str(died)
        assert service.submit(1).exception(timeout=30) is died
    finally:
        service.stop()
    assert multiprocess.active_children() == []


def torch_threads(task: int, progress: ProgressFn) -> tuple[int, str | None]:
    """The worker's torch intra-op threads and its OMP_NUM_THREADS."""
    import torch

    return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_processed_workers_get_their_share_of_cpu_threads(
    start_method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of n workers runs torch (loaded before it started, or after) on cpus // n threads, as
    DataLoader and Ray workers do: n workers each on every core ran a model 2.2x slower."""
    pytest.importorskip("torch")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    results = list(get_scheduler("processed", 2, start_method=start_method).run(torch_threads, range(2)))
    assert [value for _, value in results] == [(share, str(share))] * 2


def torch_parallel_op(task: int, progress: ProgressFn) -> tuple[int, float]:
    """A parallel torch operator in the worker (a matmul and a reduction), and its intra-op threads."""
    import torch

    ones = torch.ones(512, 512)
    return torch.get_num_threads(), float((ones @ ones).sum()) + float(torch.ones(4_000_000).sum())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_a_worker_runs_torch_after_the_caller_used_torchs_thread_pool(
    start_method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's OpenMP pool does not survive a fork: once the caller has run a parallel operator, a forked
    child that runs one on more than one thread waits forever (an eval with one worker hung after a
    matmul in the caller). A forked worker runs torch on one thread, as DataLoader workers do; one
    started by the fork server, which never runs an operator, gets its share of the CPUs."""
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    big = torch.ones(1024, 1024)
    assert float((big @ big).sum()) == 1024.0**3  # the caller's pool has run
    share = len(os.sched_getaffinity(0))
    expected = 1 if start_method == "fork" else share
    results = list(get_scheduler("processed", 1, start_method=start_method).run(torch_parallel_op, range(2)))
    assert [value for _, value in results] == [(expected, 512.0**3 + 4_000_000)] * 2


@pytest.mark.timeout(120)
def test_processed_workers_leave_the_users_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """OMP_NUM_THREADS set by the user decides: the workers' torch uses what a fresh process given it
    does (torch caps it at the cores), not the share (here 2 where the share of 2 workers is half)."""
    pytest.importorskip("torch")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    fresh = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    results = list(get_scheduler("processed", 2, start_method="spawn").run(torch_threads, range(2)))
    assert [value for _, value in results] == [(int(fresh.stdout), "2")] * 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_processed_closures_and_lambdas(start_method: str) -> None:
    """Closures and lambdas work as task functions with every start method."""
    offset = 100

    def add_offset(task: int, progress: ProgressFn) -> int:
        progress(1)
        return task + offset

    received: list[int] = []
    sched = get_scheduler("processed", 2, start_method=start_method)
    assert dict(sched.run(add_offset, range(6), on_progress=received.append)) == {
        i: i + offset for i in range(6)
    }
    assert sum(received) == 6
    assert dict(sched.run(lambda task, progress: task * 3, range(4))) == {i: i * 3 for i in range(4)}
    assert multiprocess.active_children() == []


def test_processed_worker_ids_and_state_per_worker(tmp_path: Path) -> None:
    """Each worker process has its own id, runs several tasks, and builds its state once."""
    token = str(tmp_path)
    values = [
        value for _, value in ProcessedScheduler(2).run(init_once_per_worker, [(token, i) for i in range(40)])
    ]
    assert {worker for worker, _, _ in values} == {0, 1}
    pids_by_worker = {worker: {pid for w, pid, _ in values if w == worker} for worker in (0, 1)}
    assert all(len(pids) == 1 for pids in pids_by_worker.values())
    assert pids_by_worker[0] != pids_by_worker[1]
    assert os.getpid() not in pids_by_worker[0] | pids_by_worker[1]
    tasks_per_worker = [sum(1 for w, _, _ in values if w == worker) for worker in (0, 1)]
    assert min(tasks_per_worker) >= 2
    assert {count for _, _, count in values} == {1}


def test_processed_remote_traceback_attached() -> None:
    """A re-raised exception carries the worker's traceback as a str attribute and as a note."""
    with pytest.raises(SchedulerTestError) as info:
        list(ProcessedScheduler(1).run(raise_with_cause, [5]))
    remote = info.value.remote_traceback  # type: ignore[attr-defined]  # added by the scheduler
    assert isinstance(remote, str)
    assert "in raise_with_cause" in remote
    assert "OSError: disk of task 5 is full" in remote
    assert info.value.__notes__ == [f"Traceback in the worker process:\n{remote.rstrip()}"]


def test_processed_unpicklable_result_raises_invalid_type() -> None:
    """A result that cannot be pickled raises InvalidTypeError naming the task."""
    with pytest.raises(InvalidTypeError, match="The result of task 2 cannot be sent from the worker process"):
        list(ProcessedScheduler(1).run(return_generator, [2]))
    assert multiprocess.active_children() == []


_FORKS = [0]
os.register_at_fork(before=lambda: _FORKS.__setitem__(0, _FORKS[0] + 1))


def test_processed_first_task_is_queued_before_any_worker_is_forked() -> None:
    """The first task is pickled and queued before the workers start (so that the first worker runs it
    while the others are being forked): a first task that cannot be pickled stops the run before any
    process is forked."""
    forks = _FORKS[0]
    with pytest.raises(UnpicklableTaskError) as info:
        list(ProcessedScheduler(2).run(square, [(j for j in range(3)), 2]))  # a generator does not pickle
    assert info.value.position == 0
    assert _FORKS[0] == forks
    assert multiprocess.active_children() == []
    assert dict(ProcessedScheduler(2).run(square, [1, 2, 3])) == {0: 1, 1: 4, 2: 9}
    assert _FORKS[0] >= forks + 2  # the hook counts the forks made here


def test_processed_rejects_bad_arguments() -> None:
    """An unknown start method or zero workers are refused with InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match="Expected start_method to be one of"):
        ProcessedScheduler(2, start_method="threads")  # type: ignore[arg-type]  # the wrong value on purpose
    with pytest.raises(InvalidArgumentError, match="Expected num_workers >= 1 for the processed scheduler"):
        ProcessedScheduler(0)


def test_processed_default_start_method() -> None:
    """The default start method is fork on Linux and spawn elsewhere."""
    expected = "fork" if sys.platform.startswith("linux") else "spawn"
    assert ProcessedScheduler(1).start_method == expected


_PARENT_SCRIPT = textwrap.dedent(
    """
    import time

    import multiprocess

    from lakecompute.schedulers import get_scheduler


    def slow(task, progress):
        progress(1)
        time.sleep(120)
        return task


    announced = False


    def on_progress(increment):
        global announced
        if not announced:
            announced = True
            print("READY", *[p.pid for p in multiprocess.active_children()], flush=True)


    for _ in get_scheduler("processed", 2).run(slow, range(10), on_progress=on_progress):
        pass
    """
)


def _run_parent_then_signal(signum: int) -> tuple[subprocess.Popen[str], list[int], str]:
    """Start a parent running a processed job in its own session, wait for its workers, send it a signal."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _PARENT_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Its own session, so every process it starts can be found (and cleaned up) by session id.
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != "READY":
        proc.kill()
        _, stderr = proc.communicate(timeout=20)
        pytest.fail(f"The parent script did not start its workers:\n{stderr}")
    workers = [int(pid) for pid in line[1:]]
    os.kill(proc.pid, signum)
    # communicate() also closes the pipes.
    _, stderr = proc.communicate(timeout=20)
    return proc, workers, stderr


@pytest.mark.timeout(60)
def test_processed_sigint_in_parent_stops_workers() -> None:
    """SIGINT to the parent raises KeyboardInterrupt there and leaves no worker process behind."""
    proc, workers, stderr = _run_parent_then_signal(signal.SIGINT)
    try:
        assert len(workers) == 2
        assert "KeyboardInterrupt" in stderr
        assert proc.returncode == -signal.SIGINT
        # Workers were terminated by the parent before it exited.
        assert wait_session_empty(proc.pid, timeout=10) == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.timeout(60)
def test_processed_parent_killed_workers_exit() -> None:
    """Workers whose parent is killed with SIGKILL notice it and exit instead of lingering as orphans."""
    proc, workers, _ = _run_parent_then_signal(signal.SIGKILL)
    try:
        assert len(workers) == 2
        assert proc.returncode == -signal.SIGKILL
        assert wait_session_empty(proc.pid, timeout=15) == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_processed_start_method_capabilities() -> None:
    """Forked workers need fork-safe storage and without_fork() swaps them for the fork server's; the
    other start methods need nothing; worker processes never share the caller's memory."""
    forked = ProcessedScheduler(3)
    if forked.start_method != "fork":
        pytest.skip("fork is not the default start method here")
    assert forked.needs_fork_safe_storage
    assert not forked.shares_memory
    served = forked.without_fork()
    assert isinstance(served, ProcessedScheduler)
    assert (served.start_method, served.num_workers, served.preload) == ("forkserver", 3, DEFAULT_PRELOAD)
    assert not served.needs_fork_safe_storage
    assert served.without_fork() is served
    spawned = ProcessedScheduler(2, start_method="spawn")
    assert not spawned.needs_fork_safe_storage
    assert spawned.without_fork() is spawned


def test_processed_preload_refuses_main() -> None:
    """Preloading __main__ is refused: workers never run the user's script again."""
    with pytest.raises(InvalidArgumentError) as info:
        ProcessedScheduler(2, start_method="forkserver", preload=["lakecompute", "__main__"])
    assert str(info.value) == (
        "Expected preload to name importable modules. Got ['lakecompute', '__main__'], with '__main__': "
        "workers never run your script again (its functions travel by value). Leave it out."
    )
    assert ProcessedScheduler(2, preload=["numpy"]).preload == ("numpy",)


_NO_GUARD_SCRIPT = textwrap.dedent(
    """
    import sys

    import numpy as np

    from lakecompute.schedulers import get_scheduler

    print("SCRIPT STARTS", flush=True)
    K = 3


    class Scale:
        def __init__(self, k):
            self.k = k


    def times_k(task, progress):
        return int(np.int64(task) * Scale(K).k)


    sched = get_scheduler("processed", 2, start_method=sys.argv[1])
    print("RESULT", sorted(sched.run(times_k, range(6))), flush=True)
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_processed_script_without_main_guard_runs_once(tmp_path: Path, start_method: str) -> None:
    """A script without a main guard runs once whatever the start method: its function, class and
    globals reach the workers by value, and no worker imports the script."""
    script = tmp_path / "no_guard.py"
    script.write_text(_NO_GUARD_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.run(
        [sys.executable, str(script), start_method], capture_output=True, text=True, env=env, timeout=100
    )
    assert run.returncode == 0, run.stderr
    expected = [(i, 3 * i) for i in range(6)]
    assert run.stdout.splitlines() == ["SCRIPT STARTS", f"RESULT {expected}"]


def write_to_stderr(task: int, progress: ProgressFn) -> int:
    """Write a line to stderr through Python and one straight to descriptor 2, then return ``task``."""
    sys.stderr.write(f"python line from task {task}\n")
    sys.stderr.flush()
    os.write(2, f"raw line from task {task}\n".encode())
    return task


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_processed_worker_stderr_reaches_parent_stderr(
    capfd: pytest.CaptureFixture[str], start_method: str
) -> None:
    """What workers write to stderr shows on the parent's stderr by the time the run is over."""
    sched = get_scheduler("processed", 2, start_method=start_method)
    assert dict(sched.run(write_to_stderr, range(3))) == {0: 0, 1: 1, 2: 2}
    err = capfd.readouterr().err
    for task in range(3):
        assert f"raw line from task {task}\n" in err
        if start_method == "spawn":
            # A forked worker writes Python-level output to whatever sys.stderr the parent had
            # (under pytest, its capture file); a spawned worker's sys.stderr is descriptor 2.
            assert f"python line from task {task}\n" in err


def say_then_die_on_2(task: int, progress: ProgressFn) -> int:
    """Write a last word to stderr and SIGKILL the worker on task 2."""
    if task == 2:
        os.write(2, b"native library: out of buffers\n")
        os.kill(os.getpid(), signal.SIGKILL)
    return task


@pytest.mark.timeout(60)
def test_processed_worker_died_error_quotes_stderr_tail(capfd: pytest.CaptureFixture[str]) -> None:
    """A worker killed while running a task raises WorkerDiedError ending with its last stderr lines."""
    with pytest.raises(WorkerDiedError) as info:
        list(ProcessedScheduler(2).run(say_then_die_on_2, range(6)))
    message = str(info.value)
    assert "died with signal SIGKILL while running task 2." in message
    assert message.endswith("Its stderr ended with:\n    native library: out of buffers")
    assert "native library: out of buffers" in capfd.readouterr().err


_STARTUP_MODULE = textwrap.dedent(
    """
    import os
    import signal
    import sys

    import multiprocess

    # Module-level code that only breaks in a worker process, as code reading a worker-only
    # configuration would.
    if multiprocess.current_process().name.startswith("lakecompute-worker"):
        print("loading weights from /models/missing.bin", file=sys.stderr, flush=True)
        if os.environ.get("STARTUP_FAULT") == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("cannot start in a worker")


    def task_fn(task, progress):
        return task
    """
)


def _startup_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """A module on sys.path whose import fails (or kills the process) inside a worker."""
    name = f"startup_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(_STARTUP_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return __import__(name).task_fn


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_processed_worker_start_failure_reports_its_exception(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start_method: str
) -> None:
    """A worker that fails while starting (its task function's module raises on import there) raises
    WorkerDiedError with the worker's own exception as the cause and its stderr tail, not a guess."""
    fn = _startup_module(tmp_path, monkeypatch)
    with pytest.raises(WorkerDiedError) as info:
        list(get_scheduler("processed", 2, start_method=start_method).run(fn, range(4)))  # type: ignore[arg-type]  # a task function loaded at run time
    error = info.value
    message = str(error)
    assert "failed while starting, before it ran a task: RuntimeError: cannot start in a worker." in message
    assert message.endswith("Its stderr ended with:\n    loading weights from /models/missing.bin")
    assert "out-of-memory" not in message
    assert error.task is None
    assert type(error.__cause__) is RuntimeError
    assert str(error.__cause__) == "cannot start in a worker"
    assert multiprocess.active_children() == []


@pytest.mark.timeout(120)
def test_processed_worker_killed_while_starting_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed while starting says so (not a guess about the OOM killer) with its stderr tail."""
    fn = _startup_module(tmp_path, monkeypatch)
    monkeypatch.setenv("STARTUP_FAULT", "kill")
    with pytest.raises(WorkerDiedError) as info:
        list(get_scheduler("processed", 2, start_method="spawn").run(fn, range(4)))  # type: ignore[arg-type]  # a task function loaded at run time
    message = str(info.value)
    assert "died with signal SIGKILL while starting, before it ran a task." in message
    assert message.endswith("Its stderr ended with:\n    loading weights from /models/missing.bin")
    assert "out-of-memory" not in message
    assert info.value.exitcode == -signal.SIGKILL
    assert multiprocess.active_children() == []


def fork_sleeper(task: int, progress: ProgressFn) -> int:
    """Fork a child that sleeps for 10 minutes (and never returns into the worker); return its pid."""
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    return pid


def _alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fail", [False, True], ids=["success", "failure"])
def test_processed_processes_started_by_tasks_end_with_run(fail: bool) -> None:
    """A process a task forked and left running is killed when the run ends, on success or failure."""
    tasks = [(0, 99), (1, 99), (2, 2 if fail else 99)]

    def fork_then_maybe_fail(task: tuple[int, int], progress: ProgressFn) -> int:
        pid = fork_sleeper(task[0], progress)
        fail_at = task[1]
        if task[0] == fail_at:
            raise SchedulerTestError(f"task {task[0]} failed after forking {pid}")
        return pid

    pids: list[int] = []
    try:
        for _, pid in ProcessedScheduler(2).run(fork_then_maybe_fail, tasks):
            pids.append(pid)
    except SchedulerTestError as exc:
        pids.append(int(str(exc).rsplit(" ", 1)[1]))
    assert len(pids) == 3 or (fail and pids)
    wait_until(lambda: not any(_alive(pid) for pid in pids), what="the forked children to exit")
    assert multiprocess.active_children() == []
