"""The Ray scheduler: every task runs as a Ray task, on one machine or across a cluster.

Imported only when ``scheduler="ray"`` is asked for (``import lakecompute`` never imports Ray).

- **Starting Ray is the user's choice.** If Ray is already initialised (``ray.init(address=...)``
  to join a cluster, or any ``ray.init(...)``), the scheduler uses that; so it does when
  ``RAY_ADDRESS`` names a cluster. Otherwise it starts a local instance of its own
  (``address="local"``: it never joins another cluster that happens to run on the machine) with
  ``num_cpus=num_workers`` and no dashboard, which lives until the process exits (or ``ray.shutdown()``).
- **At most ``num_workers`` tasks run at once.** Each submitted task holds one of ``num_workers``
  slots; the slot number is the task's `lakecompute.schedulers.worker_id`, so ids stay in
  ``range(num_workers)`` however many worker processes Ray uses. Up to ``max_in_flight`` tasks
  are taken from the input ahead of time (a streamed input stays bounded).
- **One transport with the processed scheduler** (`_transport`). Tasks are pickled here, by
  value, before they are submitted (a task that cannot be pickled is an
  `UnpicklableTaskError` at once). A task returns its result pickled, or its exception with
  the whole ``__cause__`` chain and the worker's traceback, so an error arrives as itself
  (`RemoteError` if it cannot be unpickled). Progress increments are summed in the task and
  delivered when it ends; ``progress(0)`` does nothing (tasks are cancelled from outside).
- **Fail fast.** On a failure (or when the consumer stops early) outstanding tasks are cancelled:
  first by interrupting them (``KeyboardInterrupt`` in the task, the worker process survives and
  Ray reuses it), then, for tasks still running after a grace period, by killing their worker.
  Tasks not yet submitted never start.
- **Lost tasks are retried** (`Ray.max_retries`, 3 by default): Ray runs a task again when its
  worker process or node died. That is safe because a task writes only its own slots and only the
  attempt that returns is committed. A task that raised is never retried (its error is the answer),
  and one that still dies after its retries is `WorkerDiedError`.
- **Resources are checked before anything runs, and again while nothing finishes:** a task that asks
  for more CPUs, GPUs or custom resources than any live node of the cluster has is an
  `InvalidArgumentError` naming the request and the nodes, instead of a task that waits forever
  (also when the only nodes that had them left mid-run).
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Iterator
from typing import Any, ClassVar, TypeVar, cast

from lakecompute.errors import InvalidArgumentError, WorkerDiedError
from lakecompute.schedulers._base import (
    PAUSE,
    Job,
    Results,
    Scheduler,
    TaskFn,
    _set_process_device,
    _set_process_worker_id,
    call_task,
    describe_task,
    pause_error,
)
from lakecompute.schedulers._devices import Placement
from lakecompute.schedulers._ray_options import Ray
from lakecompute.schedulers._transport import (
    PickledError,
    dump,
    dump_task,
    load_result,
    load_task,
    pickle_exception,
    rebuild_exception,
    unsendable_result,
)

__all__ = ["RayScheduler"]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

# How long interrupted tasks may take to stop before their workers are killed, and how long to wait
# for the kill to be done (seconds).
_CANCEL_GRACE = 1.0
_KILL_TIMEOUT = 5.0
# While no task finishes, how often to check that some live node can still run the tasks (seconds).
_RECHECK = 5.0

# The Ray remote function, built once per process (Ray exports it again to a new session by itself).
_REMOTE: Any = None


def _run_in_worker(fn: TaskFn[Any, Any], data: bytes, position: int, slot: int) -> tuple[str, Any, int]:
    """The body of every Ray task: run ``fn(task, progress)`` and pack the outcome for the driver."""
    # The slot is unique among the tasks of a run that are running at the same time.
    _set_process_worker_id(slot)
    _set_process_device(_ray_task_device())
    total = 0

    def progress(increment: int) -> None:
        nonlocal total
        total += increment

    try:
        task = load_task(data, position)
        value = call_task(fn, task, progress)
    except BaseException as exc:
        # Sent as data, not raised: Ray would pickle the exception without its __cause__ chain.
        # (A KeyboardInterrupt here is our own cancellation; nobody reads its outcome.)
        return ("error", pickle_exception(exc), total)
    try:
        result = dump(value)
    except Exception as exc:
        return ("error", pickle_exception(unsendable_result(task, exc, "Ray worker")), total)
    return ("done", result, total)


def _ray_task_device() -> str:
    """This Ray task's device: ``"cuda:0"`` when Ray gave it GPUs (it shows the task only those, through
    ``CUDA_VISIBLE_DEVICES``), else ``"cpu"``."""
    import ray

    try:
        gpus = ray.get_gpu_ids()
    except Exception:
        gpus = []
    return "cuda:0" if gpus else "cpu"


def _remote_function(ray: Any) -> Any:
    global _REMOTE
    if _REMOTE is None:
        # Retries and resources are set per run, through .options() (see Ray.task_options).
        _REMOTE = ray.remote(_run_in_worker)
    return _REMOTE


def _nodes_text(nodes: list[dict[str, Any]]) -> str:
    shown = [{k: v for k, v in n.get("Resources", {}).items() if not k.startswith("node:")} for n in nodes]
    return "; ".join(repr(r) for r in shown) or "none"


def check_resources(ray: Any, request: dict[str, float]) -> None:
    """Refuse a per-task request that no live node of the cluster can ever satisfy.

    Raises:
        InvalidArgumentError: naming the request and the nodes' resources.
    """
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    for node in nodes:
        have = node.get("Resources", {})
        if all(have.get(name, 0.0) >= amount for name, amount in request.items()):
            return
    raise InvalidArgumentError(
        f"Each task asks Ray for {request!r}, which no node of the cluster has (nodes: "
        f"{_nodes_text(nodes)}). Ask for less (lc.schedulers.Ray(num_cpus=..., num_gpus=..., "
        "resources=...)), or add a node that has it before the eval."
    )


class RayScheduler(Scheduler):
    """Runs tasks as Ray tasks, at most ``num_workers`` at a time.

    Task functions may be closures and lambdas (Ray pickles them with cloudpickle). Workers must be
    able to import lakecompute and the modules your functions live in: on a cluster, install them
    on every node or ship them with ``ray.init(runtime_env=...)``.

    Example:
        >>> import ray  # doctest: +SKIP
        >>> ray.init(address="auto")  # join a running cluster (else a local Ray starts)  # doctest: +SKIP
        >>> from lakecompute.schedulers import get_scheduler  # doctest: +SKIP
        >>> sorted(get_scheduler("ray", 8).run(lambda task, progress: task * 2, [1, 2]))  # doctest: +SKIP
        [(0, 2), (1, 4)]
    """

    name: ClassVar[str] = "ray"

    def __init__(
        self,
        num_workers: int = 1,
        *,
        options: Ray | None = None,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        """Create the scheduler (Ray itself is started, if needed, by the first `run`).

        Args:
            num_workers: how many tasks may run at the same time, at least 1.
            options: where to run, what each task holds and how often lost tasks are retried
                (default ``Ray()``).
            init_options: passed to ``ray.init`` when Ray is not initialised yet (they override
                the defaults ``address="local", num_cpus=num_workers, include_dashboard=False``, see
                `start_options`); ignored when Ray is already running.

        Raises:
            InvalidArgumentError: if ``num_workers`` is less than 1.
        """
        super().__init__(num_workers)
        if self.num_workers < 1:
            raise InvalidArgumentError(
                f"Expected num_workers >= 1 for the ray scheduler. Got {num_workers!r}. "
                "Use get_scheduler('ray', 0) or SerialScheduler() to run in the calling process."
            )
        self.options = options if options is not None else Ray()
        if not isinstance(self.options, Ray):
            raise InvalidArgumentError(f"Expected options=lc.schedulers.Ray(...). Got {options!r}.")
        self._init_options = dict(init_options or {})

    def with_devices(self, placement: Placement) -> Scheduler:
        """Refused: Ray places tasks on GPUs itself.

        Raises:
            InvalidArgumentError: always, naming ``lc.schedulers.Ray(num_gpus=...)``.
        """
        raise InvalidArgumentError(
            f"devices={list(placement.local)!r} places the workers of this machine; on Ray, ask Ray for GPUs "
            "per task instead: scheduler=lc.schedulers.Ray(num_gpus=1) (num_gpus=0.5 puts two tasks on one "
            "GPU). Ray then shows each task its GPUs, and lc.worker_device() gives 'cuda:0' in the task."
        )

    def _ray(self) -> Any:
        """The ``ray`` module, initialised."""
        import ray

        if not ray.is_initialized():
            options = self.start_options()
            try:
                ray.init(**options)
            except ValueError as exc:  # e.g. RAY_ADDRESS set to the dashboard's http:// address
                where = options.get("address") or os.environ.get("RAY_ADDRESS")
                raise InvalidArgumentError(
                    f"Ray refused the cluster address {where!r}: {exc} Use the cluster's GCS address "
                    "('HOST:6379', or 'auto' on a node of the cluster), 'ray://HOST:10001' from outside "
                    "it, or unset RAY_ADDRESS to run on a local Ray of this process's own."
                ) from exc
        return ray

    @property
    def spans_machines(self) -> bool:
        """Whether tasks may run on other machines that do not see this one's local disk (Ray is
        started, or joined, to find out: a cluster of more than one live node, not declared to share
        a file system)."""
        if self.options.shared_filesystem:
            return False
        ray = self._ray()
        return sum(1 for n in ray.nodes() if n.get("Alive")) > 1

    def start_options(self) -> dict[str, Any]:
        """The options of the ``ray.init`` call that starts Ray when it is not initialised yet.

        A local instance of its own (``address="local"``): without it, Ray joins any cluster already
        running on the machine (found through its address file), which refuses ``num_cpus``. Set
        ``RAY_ADDRESS`` (or pass ``init_options={"address": ...}``, or call ``ray.init`` first) to join
        a cluster instead.
        """
        options: dict[str, Any]
        if self.options.address is not None:
            options = {"address": self.options.address}
        elif os.environ.get("RAY_ADDRESS"):
            options = {}  # join the cluster the environment names, with its resources
        else:
            options = {"address": "local", "num_cpus": self.num_workers, "include_dashboard": False}
        options.update(self._init_options)
        return options

    def _run(self, job: Job[TaskT, ResultT]) -> Results[ResultT]:
        """The generator behind `run`; an empty input never touches Ray.

        Raises:
            WorkerDiedError: if a Ray worker (or its node) dies while running a task.
            UnpicklableTaskError: if a task cannot be pickled.
            RemoteError: if a task raised an exception that cannot be unpickled in the driver.
        """
        tasks = job.nonempty_tasks()
        if tasks is None:
            return
        on_progress = job.on_progress
        ray = self._ray()
        check_resources(ray, self.options.request())
        remote = _remote_function(ray).options(**self.options.task_options())
        # Stored once in Ray's object store; each task gets a reference, not another copy.
        slots = _Slots(remote, ray.put(job.fn), tasks, self.num_workers, job.limit)
        try:
            while True:
                slots.fill()
                if not slots.running:
                    return
                ready, _ = ray.wait(list(slots.running), num_returns=1, timeout=_RECHECK)
                if not ready:
                    # Nodes may have left since the start: tasks only they could run would wait forever.
                    check_resources(ray, self.options.request())
                for ref in ready:
                    position, task = slots.finished(ref)
                    kind, payload, increments = self._outcome(ray, ref, task)
                    if increments and on_progress is not None:
                        on_progress(increments)
                    if kind == "error":
                        raise rebuild_exception(cast(PickledError, payload))
                    yield position, cast(ResultT, load_result(payload, "driver"))
        finally:
            # Reached on success (nothing is running), on a failure, and when the consumer stops.
            self._cancel(ray, list(slots.running))

    def _outcome(self, ray: Any, ref: Any, task: Any) -> tuple[str, Any, int]:
        """What a finished Ray task returned; a dead worker or node becomes WorkerDiedError."""
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            # Our task body never raises, so this is Ray failing around it (e.g. the worker could
            # not unpickle the task function because a module is missing there): raise the cause.
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            raise cause from None
        except ray.exceptions.RayError as exc:
            why = type(exc).__name__
            hint = (
                "the node ran out of memory"
                if "OutOfMemory" in why
                else "the worker process or its node died"
            )
            retries = self.options.max_retries
            tried = f", on each of {retries + 1} attempts" if retries else ""
            raise WorkerDiedError(
                f"A Ray worker failed with {why} while running task {describe_task(task)}{tried}: {hint} "
                "(for example a segfault in native code, or a killed process). Run it with num_workers=0 "
                "to debug it in this process.",
                task=task,
                exitcode=None,
            ) from exc
        return cast(tuple[str, Any, int], outcome)

    @staticmethod
    def _cancel(ray: Any, refs: list[Any]) -> None:
        """Stop outstanding tasks: interrupt them, then kill the workers of those that do not stop."""
        if not refs:
            return
        for ref in refs:
            # Not started yet: removed from Ray's queue. Running: KeyboardInterrupt in the task.
            ray.cancel(ref, force=False)
        _, still_running = ray.wait(refs, num_returns=len(refs), timeout=_CANCEL_GRACE)
        if not still_running:
            return
        for ref in still_running:
            # E.g. a task stuck in native code, which a KeyboardInterrupt cannot reach.
            ray.cancel(ref, force=True)
        ray.wait(still_running, num_returns=len(still_running), timeout=_KILL_TIMEOUT)

    def __repr__(self) -> str:
        return f"RayScheduler(num_workers={self.num_workers}, options={self.options!r})"


class _Slots:
    """The tasks of one run taken from the input, and the Ray tasks running them (at most
    ``num_workers`` at once, each holding a slot, whose number is its worker id)."""

    def __init__(self, remote: Any, fn_ref: Any, tasks: Iterator[Any], num_workers: int, limit: int) -> None:
        self._remote = remote
        self._fn_ref = fn_ref
        self._tasks = tasks
        self._limit = limit
        self._positions = itertools.count()
        self._exhausted = False
        self._queued: deque[tuple[int, Any]] = deque()
        self._free = list(range(num_workers - 1, -1, -1))
        self.running: dict[Any, tuple[int, Any, int]] = {}
        """Submitted Ray tasks: object ref → (position, task, slot)."""

    def fill(self) -> None:
        """Take tasks from the input (within ``limit``) and submit as many as there are free slots."""
        while not self._exhausted and len(self._queued) + len(self.running) < self._limit:
            try:
                task = next(self._tasks)
            except StopIteration:
                self._exhausted = True
                break
            if task is PAUSE:  # no more until a result is taken: fill() runs again after each one
                if not self._queued and not self.running:
                    raise pause_error()
                break
            self._queued.append((next(self._positions), task))
        while self._queued and self._free:
            position, task = self._queued.popleft()
            # Pickled here (by value: Ray workers never import the driver's __main__), so a task that
            # cannot be pickled stops the run at once, named.
            data = dump_task(task, position, by_value=True)
            slot = self._free.pop()
            self.running[self._remote.remote(self._fn_ref, data, position, slot)] = (position, task, slot)

    def finished(self, ref: Any) -> tuple[int, Any]:
        """Free the slot of a finished Ray task; return its position and task."""
        position, task, slot = self.running.pop(ref)
        self._free.append(slot)
        return position, task
