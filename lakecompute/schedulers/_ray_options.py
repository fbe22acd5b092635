"""What an eval asks of Ray: where to run, what each task needs, and how often a lost task is retried.

Kept apart from ``_ray`` so that ``lakecompute.schedulers.Ray(...)`` can be written (and checked)
without importing Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.parsing import parse_amount, parse_count, parse_flag, parse_name

if TYPE_CHECKING:
    from lakecompute.schedulers._base import Scheduler

__all__ = ["Ray"]


@dataclass(frozen=True, slots=True)
class Ray:
    """Run an eval's tasks on Ray, with these settings: ``eval(..., scheduler=lc.schedulers.Ray(...))``.

    ``scheduler="ray"`` means ``Ray()``: the defaults below. ``num_workers`` still says how many tasks
    run at the same time.

    Attributes:
        address: the cluster to connect to when Ray is not initialised in this process (``"auto"``, a
            GCS address ``"HOST:6379"``, or ``"ray://HOST:10001"``). None: ``RAY_ADDRESS`` if it is
            set, else a local Ray of this process's own.
        num_cpus: CPUs each task holds (None: 1).
        num_gpus: GPUs each task holds (None: none): Ray shows each task its GPUs (through
            ``CUDA_VISIBLE_DEVICES``) and ``lc.worker_device()`` is ``"cuda:0"`` there; the multi-node form
            of ``eval(devices=...)``. A fraction below 1 shares a GPU (``0.5``: two tasks on each); above
            1, whole GPUs only (Ray's rule).
        resources: custom resources each task holds, e.g. ``{"node:big-disk": 1}``.
        max_retries: how many times Ray runs a task again whose worker process or node died. Safe:
            a task writes only its own slots, and only the attempt that returns is committed.
            0 turns retries off (a lost task is `lakecompute.errors.WorkerDiedError` at once).
        shared_filesystem: say that local dataset paths are on a file system every node sees (NFS,
            a shared volume); without it a local path on a cluster of several nodes is refused.

    Raises:
        InvalidArgumentError: a negative amount or retry count.
        InvalidTypeError: a value of the wrong type.

    Example:
        >>> lc.schedulers.Ray(num_gpus=1, max_retries=0).task_options()
        {'num_cpus': 1.0, 'max_retries': 0, 'num_gpus': 1.0}
    """

    address: str | None = None
    num_cpus: float | None = None
    num_gpus: float | None = None
    resources: Mapping[str, float] | None = field(default=None, hash=False)
    max_retries: int = 3
    shared_filesystem: bool = False

    name: ClassVar[str] = "ray"

    def __post_init__(self) -> None:
        parse_name("Ray address", self.address, optional=True)
        parse_amount("Ray num_cpus", self.num_cpus, optional=True)
        gpus = parse_amount("Ray num_gpus", self.num_gpus, optional=True)
        if gpus is not None and gpus > 1 and not gpus.is_integer():
            raise InvalidArgumentError(
                "Expected Ray num_gpus to be a fraction below 1 (GPUs shared between tasks) or a whole "
                f"number. "
                f"Got {self.num_gpus!r}. Use {int(gpus)} or {int(gpus) + 1}, or a fraction such as 0.5."
            )
        if self.resources is not None:
            if not isinstance(self.resources, Mapping) or not all(isinstance(k, str) for k in self.resources):
                raise InvalidTypeError(
                    "Expected Ray resources to be a dict of resource names to amounts. "
                    f"Got {self.resources!r}."
                )
            for key, amount in self.resources.items():
                parse_amount(f"Ray resource {key!r}", amount)
        parse_count("Ray max_retries", self.max_retries, hint="Use 0 to turn retries off.")
        parse_flag("Ray shared_filesystem", self.shared_filesystem)

    def task_options(self) -> dict[str, Any]:
        """The options each Ray task is submitted with (Ray's ``.options(...)``)."""
        options: dict[str, Any] = {"num_cpus": parse_amount("num_cpus", self.num_cpus, optional=True) or 1.0}
        options["max_retries"] = int(self.max_retries)  # a numpy integer, checked, travels as an int
        if self.num_gpus:
            options["num_gpus"] = float(self.num_gpus)
        if self.resources:
            options["resources"] = {k: float(v) for k, v in self.resources.items()}
        return options

    def request(self) -> dict[str, float]:
        """What one task holds while it runs, in the names Ray reports resources by (``CPU``, ``GPU``)."""
        options = self.task_options()
        wanted = {"CPU": options["num_cpus"], "GPU": options.get("num_gpus", 0.0)}
        wanted.update(options.get("resources", {}))
        return {k: v for k, v in wanted.items() if v}

    def build(self, num_workers: int) -> Scheduler:
        """The Ray scheduler with these settings (Ray is imported now; it starts at the first run)."""
        from lakecompute.schedulers import _ray_factory

        return _ray_factory(num_workers, options=self)
