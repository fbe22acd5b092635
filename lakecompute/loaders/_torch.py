"""The torch adapter: a real ``torch.utils.data.DataLoader`` over a loader, a pass per epoch.

Imported only by `lakecompute.loaders.pytorch`, so ``import lakecompute`` never imports torch.

The dataset handed to the DataLoader is an ``IterableDataset`` whose every item is a whole batch
(``batch_size=None``: no per-sample collation). Each DataLoader worker reads the batches of its
own samples (`IndexPlan.worker_steps`); the DataLoader takes one batch from each worker in turn,
skipping workers that have run out, which is the steps' order, and ``prefetch_factor`` bounds what
each worker reads ahead. The loader and its dataset speak torch's stateful protocol (``state_dict``,
``load_state_dict``, ``set_epoch``; see `lakecompute.loaders._state`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch.utils.data

from lakecompute.errors import InvalidArgumentError
from lakecompute.loaders._loader import LoaderSpec, StepReader, WorkerFailure, int64_labels
from lakecompute.loaders._plan import IndexPlan
from lakecompute.loaders._state import LoaderCursor, Position
from lakecompute.schedulers import pickle_exception, reseed_globals

__all__ = ["LakeDataLoader", "TorchBatches", "make_dataloader"]


@dataclass(frozen=True, slots=True)
class _WorkerPass:
    """How far one DataLoader worker got in a pass: it yielded ``done`` of its steps of the pass of
    epoch ``epoch`` that started at step ``start``."""

    worker: int
    epoch: int
    start: int
    done: int

    def as_json(self) -> dict[str, int]:
        return {"id": self.worker, "epoch": self.epoch, "start": self.start, "done": self.done}

    @classmethod
    def from_json(cls, state: dict[str, Any]) -> _WorkerPass:
        return cls(int(state["id"]), int(state["epoch"]), int(state["start"]), int(state["done"]))


class TorchBatches(torch.utils.data.IterableDataset):  # type: ignore[type-arg]  # items are batch dicts
    """A loader as a torch ``IterableDataset`` of batches, each iteration a pass (an epoch).

    It speaks torch's stateful protocol itself, so another DataLoader iterating it (torchdata's
    ``StatefulDataLoader``, Accelerate's stateful mode) saves and resumes it without reading skipped
    samples: in the main process its state is the loader's (`LoaderCursor`); in a DataLoader worker,
    which reads every ``num_workers``-th step of the pass, it also says how far that worker got.

    Attributes:
        cursor: where the loader is (epoch, step) and what it reads.
        labels: the class_label tensors, whose values arrive as int64.
        planned: the plan of the pass `LakeDataLoader` started for its workers (copied into them).
    """

    def __init__(self, cursor: LoaderCursor, labels: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.cursor = cursor
        self.labels = labels
        self.planned: IndexPlan | None = None
        self._worker: _WorkerPass | None = None

    def __len__(self) -> int:
        return self.cursor.steps

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (Accelerate calls it on the dataset before every pass)."""
        _foreign(self.cursor.plan())
        self.cursor.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state (`LoaderCursor.state_dict`); in a worker, with how far that worker got."""
        state = self.cursor.state_dict()
        if self._worker is not None:
            state["worker"] = self._worker.as_json()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` says (a worker's state: where that worker stopped)."""
        self.cursor.load_state_dict(state)
        if "worker" in state:
            self._worker = _WorkerPass.from_json(state["worker"])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        if info is None:
            plan, self.planned = self.planned or _foreign(self.cursor.begin()), None
            return self._batches(plan, plan.worker_steps(0), advance=True)
        if info.num_workers != self.cursor.options.num_workers:
            # The plan deals samples to its own worker count; another one would skip or repeat some.
            raise InvalidArgumentError(
                f"This dataset was planned for num_workers={self.cursor.options.num_workers}, but the "
                f"DataLoader iterating it has {info.num_workers} workers. Build the DataLoader with the "
                "same num_workers (ds.pytorch(..., num_workers=n)), or iterate what ds.pytorch() returns."
            )
        plan, steps = self._worker_pass(info.id)
        return _reported(self._batches(plan, steps, advance=False))

    def _worker_pass(self, worker: int) -> tuple[IndexPlan, range]:
        """The plan and the steps worker ``worker`` reads: the rest of a loaded worker state's, else
        its steps of the pass planned in the main process (or, in another DataLoader, planned here)."""
        resume = self._worker
        if resume is not None and resume.worker == worker:
            plan = self.cursor.plan(Position(resume.epoch, resume.start))
            steps = plan.worker_steps(worker)[resume.done :]
        else:
            plan = self.planned or _foreign(self.cursor.begin())
            resume, steps = (
                _WorkerPass(worker, plan.epoch, plan.start_from_step, 0),
                plan.worker_steps(worker),
            )
        self._worker = resume
        return plan, steps

    def _batches(self, plan: IndexPlan, steps: range, advance: bool) -> Iterator[dict[str, Any]]:
        """The batches of ``steps``, each counted (by the cursor, or as the worker's) before it is yielded."""
        reader = StepReader(LoaderSpec(self.cursor.source, plan, self.cursor.options.transform))
        for step in steps:
            batch = int64_labels(reader.read_step(step), self.labels)
            if advance:
                self.cursor.advance()
            elif self._worker is not None:
                self._worker = replace(self._worker, done=self._worker.done + 1)
            yield batch
        if not advance:
            self._worker = None  # this worker's pass is over: a persistent worker's next one is new


def _foreign(plan: IndexPlan) -> IndexPlan:
    """The plan of a pass another DataLoader started, unless it is Accelerate dispatching one process's
    batches to all (``accelerator.prepare()``'s default for an ``IterableDataset``): this loader already
    shards by rank, so the other ranks' samples would never be read."""
    if plan.world_size > 1 and _accelerate_dispatching():
        raise InvalidArgumentError(
            f"accelerator.prepare() would train {plan.world_size} processes on the batches of rank 0 only: "
            "Accelerate dispatches one process's batches to all, and this loader already gives each rank "
            "its own share. Do not pass the loader to prepare(); iterate it directly and checkpoint it with "
            "accelerator.register_for_checkpointing(loader) (see the Training guide, Accelerate)."
        )
    return plan


def _accelerate_dispatching() -> bool:
    """Whether Accelerate's ``DataLoaderDispatcher`` is the loader being iterated now."""
    if "accelerate" not in sys.modules:
        return False
    from accelerate.data_loader import DataLoaderDispatcher
    from accelerate.state import GradientState, is_initialized

    if not is_initialized():  # no Accelerator in this process
        return False
    active = GradientState().active_dataloader
    # With one process (as Accelerate counts them) each process reads its own loader: nothing is dispatched.
    return type(active) is DataLoaderDispatcher and active.state.num_processes > 1


def _reported(batches: Iterator[dict[str, Any]]) -> Iterator[Any]:
    """The worker's batches, then its exception (if any) as a `WorkerFailure` item."""
    try:
        yield from batches
    except Exception as exc:
        # As an item: torch re-raises a worker's exception as ``type(message)``, and our errors,
        # whose constructors take structured arguments, would arrive as a bare RuntimeError.
        yield WorkerFailure(pickle_exception(exc))


class _Collate:
    """The user's ``collate_fn`` (torch's ``default_convert`` if none), passing failures through."""

    def __init__(self, collate_fn: Callable[[Any], Any] | None) -> None:
        self.collate_fn = collate_fn or torch.utils.data.default_convert

    def __call__(self, item: Any) -> Any:
        return item if isinstance(item, WorkerFailure) else self.collate_fn(item)


class _RaisingIterator:
    """torch's DataLoader iterator, raising a worker's exception as itself where it arrives, and
    counting the batches the consumer takes (with workers, only the main process knows)."""

    def __init__(self, inner: Any, cursor: LoaderCursor | None) -> None:
        self._inner = inner
        self._cursor = cursor

    def __iter__(self) -> _RaisingIterator:
        return self

    def __next__(self) -> Any:
        item = next(self._inner)
        if isinstance(item, WorkerFailure):
            raise item.exception()
        if self._cursor is not None:
            self._cursor.advance()
        return item

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class LakeDataLoader(torch.utils.data.DataLoader):  # type: ignore[type-arg]  # items are batch dicts
    """A ``torch.utils.data.DataLoader`` that speaks torch's stateful protocol and runs an epoch per pass.

    ``state_dict()``, ``load_state_dict()`` and ``set_epoch()`` are the loader's (`LoaderCursor`), so
    Lightning, Accelerate and torchdata checkpoint and resume it exactly. Workers' errors keep their
    type (`lakecompute.errors` included: ``except lc.DatasetCorruptError`` and ``TransformError.index``
    work with workers).
    """

    dataset: TorchBatches

    def __iter__(self) -> Any:
        batches = self.dataset
        batches.planned = batches.cursor.begin()
        try:
            inner = super().__iter__()  # the dataset is iterated (or the workers start) here, with the plan
        finally:
            batches.planned = None
        # Without workers the dataset counts the batches, in this process.
        return _RaisingIterator(inner, batches.cursor if self.num_workers else None)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch``, from step 0 (the ``DistributedSampler`` convention)."""
        self.dataset.cursor.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is, as plain JSON (see `lakecompute.loaders.Batches.state_dict`)."""
        return self.dataset.cursor.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next pass continue exactly where ``state`` says (see
        `lakecompute.loaders.Batches.load_state_dict`)."""
        self.dataset.cursor.load_state_dict(state)


def _reseed_worker(worker: int) -> None:
    """Our workers' start hook (`reseed_globals`), from the seed torch gave this worker: numpy's
    generator differs per worker too, and ``torch.manual_seed`` in the main process still makes every
    worker's draws repeatable."""
    reseed_globals(torch.initial_seed())


def make_dataloader(cursor: LoaderCursor, labels: tuple[str, ...]) -> LakeDataLoader:
    """A DataLoader yielding the loader's batches in step order (numpy arrays become tensors)."""
    options = cursor.options
    extra: dict[str, Any] = {}
    if options.num_workers:
        extra["prefetch_factor"] = options.prefetch
        extra["worker_init_fn"] = _reseed_worker
        if not cursor.source.snapshot.fork_safe:
            # An object store's client hangs in a forked child once the parent used it.
            extra["multiprocessing_context"] = "forkserver"
    return LakeDataLoader(
        TorchBatches(cursor, labels),
        batch_size=None,
        num_workers=options.num_workers,
        collate_fn=_Collate(options.collate_fn) if options.num_workers else options.collate_fn,
        pin_memory=options.pin_memory,
        **extra,
    )
