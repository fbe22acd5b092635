"""The torch adapter: a real ``torch.utils.data.DataLoader`` over a loader, a pass per epoch.

Imported only by `lakecompute.loaders.pytorch`, so ``import lakecompute`` never imports torch.

The dataset handed to the DataLoader is an ``IterableDataset`` whose every item is a whole batch; the
DataLoader takes them one at a time (its own ``batch_size`` is 1) and its ``collate_fn`` unwraps each,
so a user's ``collate_fn`` gets the batch's samples as a list, torch's convention. Each DataLoader
worker reads the batches of its own samples (`IndexPlan.worker_steps`); the DataLoader takes one batch
from each worker in turn, skipping workers that have run out, which is the steps' order, and
``prefetch_factor`` bounds what each worker reads ahead. The loader and its dataset speak torch's
stateful protocol (``state_dict``, ``load_state_dict``, ``set_epoch``; see `lakecompute.loaders._state`).

Under Accelerate with several processes (``accelerator.prepare(loader)``), Accelerate shards the stream
of items itself, so the dataset lays its items out for it (`_Layout`): step by step, every rank's batch
of that step, in rank order. Dispatching (Accelerate's default for an iterable dataset), rank 0 reads
them all and sends rank ``r`` the ``r``-th of each ``W``; with ``dispatch_batches=False`` every rank
iterates them and keeps the ``r``-th of each ``W``, the others being stand-ins that are never read.
Either way rank ``r`` trains on exactly the batches ``ds.pytorch(rank=r)`` gives it.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch.utils.data

from lakecompute.errors import InvalidArgumentError
from lakecompute.loaders._loader import LoaderSpec, StepReader, WorkerFailure, int64_labels
from lakecompute.loaders._options import LoaderOptions
from lakecompute.loaders._plan import IndexPlan
from lakecompute.loaders._state import LoaderCursor, Position
from lakecompute.schedulers import pickle_exception, reseed_globals

__all__ = ["LakeDataLoader", "TorchBatches", "make_dataloader", "samples_of"]


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


@dataclass(frozen=True, slots=True)
class _Layout:
    """How Accelerate turns the dataset's items into each of its ``world_size`` processes' batches.

    Attributes:
        kind: ``"dispatch"``: rank 0 iterates and sends rank ``r`` the ``r``-th item of each ``W``;
            ``"shard"`` (``dispatch_batches=False``): every rank iterates and keeps the ``r``-th of each
            ``W``.
        world_size: Accelerate's processes (``W``).
        rank: this process's index among them.
    """

    kind: Literal["dispatch", "shard"]
    world_size: int
    rank: int

    def items(self, steps: range) -> list[tuple[int, int]]:
        """``(rank, step)`` of the items of ``steps``: each step's batch of every rank, in rank order."""
        return [(rank, step) for step in steps for rank in range(self.world_size)]


class TorchBatches(torch.utils.data.IterableDataset):  # type: ignore[type-arg]  # items are batch dicts
    """A loader as a torch ``IterableDataset`` of batches, each iteration a pass (an epoch).

    It speaks torch's stateful protocol itself, so another DataLoader iterating it (torchdata's
    ``StatefulDataLoader``, Accelerate's stateful mode) saves and resumes it without reading skipped
    samples: in the main process its state is the loader's (`LoaderCursor`); in a DataLoader worker,
    which reads its own share of the pass's items, it also says how far that worker got.

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
        self._processes: tuple[int, int] | None = None  # Accelerate's (count, index), sent to workers
        self._saved_by: int | None = None  # the rank whose state was loaded last

    def __getstate__(self) -> dict[str, Any]:
        # A worker process that is not forked may not have Accelerate's state: it gets the caller's.
        state = dict(self.__dict__)
        state["_processes"] = _accelerate_processes()
        return state

    def __len__(self) -> int:
        # The items of a full epoch: under Accelerate's processes, every rank's batches (it shards them
        # itself, and its len() is this one's divided by its process count).
        return self.cursor.steps * (self._processes or _accelerate_processes())[0]

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (Accelerate calls it on the dataset before every pass).

        Called by Accelerate's loader, it also refuses here, in every process, what the pass would refuse:
        dispatching, only process 0 reads, while the others wait for its batch in a collective, so a
        refusal made when process 0 reads would leave them waiting for ever.
        """
        self.cursor.set_epoch(epoch)
        kind = _accelerate_caller(inspect.currentframe())
        if kind is not None:
            count, index = self._processes or _accelerate_processes()
            if count > 1:
                _check_layout(self.cursor.resolved(), _Layout(kind, count, index), self._saved_by)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state (`LoaderCursor.state_dict`); in a worker, with how far that worker got."""
        state = self.cursor.state_dict()
        if self._worker is not None:
            state["worker"] = self._worker.as_json()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` says (a worker's state: where that worker stopped)."""
        self.cursor.load_state_dict(state)
        saved_by = state.get("rank")
        self._saved_by = saved_by if isinstance(saved_by, int) else None
        if "worker" in state:
            self._worker = _WorkerPass.from_json(state["worker"])

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        planned = self.planned
        layout = self._layout(own=planned is not None, sharded=_in_accelerate_shard(inspect.currentframe()))
        if info is None:
            self.planned = None
            return self._main_pass(planned, layout)
        if info.num_workers != self.cursor.options.num_workers:
            # The plan deals samples to its own worker count; another one would skip or repeat some.
            raise InvalidArgumentError(
                f"This dataset was planned for num_workers={self.cursor.options.num_workers}, but the "
                f"DataLoader iterating it has {info.num_workers} workers. Build the DataLoader with the "
                "same num_workers (ds.pytorch(..., num_workers=n)), or iterate what ds.pytorch() returns."
            )
        plan, items = self._worker_pass(info.id, info.num_workers, layout)
        batches = self._batches(plan, items, layout, advance=False)
        # Under Accelerate an error is raised as itself: a failure item would reach the training loop.
        return batches if layout is not None else _reported(batches)

    def _layout(self, own: bool, sharded: bool) -> _Layout | None:
        """How Accelerate shards this iteration's items: when Accelerate runs several processes and the
        iterating DataLoader is not this loader's own (`LakeDataLoader`), it is Accelerate's: sharding
        them in each rank (``dispatch_batches=False``: ``IterableDatasetShard`` iterates this dataset),
        else dispatching them from rank 0 (its default for an iterable dataset)."""
        count, index = self._processes or _accelerate_processes()
        if count <= 1 or (own and not sharded):
            return None
        return _Layout("shard" if sharded else "dispatch", count, index)

    def _main_pass(self, planned: IndexPlan | None, layout: _Layout | None) -> Iterator[Any]:
        """A pass in this process, planned when its first batch is asked for (a DataLoader may make its
        iterator long before it iterates: torchdata's, when Accelerate asks for its state)."""
        plan = planned or self.cursor.begin()
        _check_layout(plan, layout, self._saved_by)
        yield from self._batches(plan, _items(plan, layout, 0, 0), layout, advance=True)

    def _worker_pass(
        self, worker: int, workers: int, layout: _Layout | None
    ) -> tuple[IndexPlan, list[tuple[int, int]]]:
        """The plan and the items worker ``worker`` reads: the rest of a loaded worker state's, else its
        share of the pass planned in the main process (or, in another DataLoader, planned here)."""
        resume = self._worker
        if resume is not None and resume.worker == worker:
            plan = self.cursor.plan(Position(resume.epoch, resume.start))
            items = _items(plan, layout, worker, workers)
            items = items[_resumed_at(resume.done, layout) :]
        else:
            plan = self.planned or self.cursor.begin()
            resume = _WorkerPass(worker, plan.epoch, plan.start_from_step, 0)
            items = _items(plan, layout, worker, workers)
        _check_layout(plan, layout, self._saved_by)
        self._worker = resume
        return plan, items

    def _batches(
        self, plan: IndexPlan, items: list[tuple[int, int]], layout: _Layout | None, advance: bool
    ) -> Iterator[Any]:
        """The batches of ``items``, each counted (by the cursor, or as the worker's) before it is yielded.

        The cursor counts a step once its last item is out: under Accelerate, which takes a whole step's
        items at a time (and on rank 0 one step ahead), a step partly taken is not counted.
        """
        reader = StepReader(LoaderSpec(self.cursor.source, plan, self.cursor.options.transform))
        last = plan.rank if layout is None else layout.world_size - 1
        for rank, step in items:
            if layout is not None and layout.kind == "shard" and rank != layout.rank:
                batch: Any = None  # another rank's: Accelerate drops it unread, so it is never read
            else:
                batch = int64_labels(reader.read_step(step, rank), self.labels)
            if advance:
                if rank == last:
                    self.cursor.advance()
            elif self._worker is not None:
                self._worker = replace(self._worker, done=self._worker.done + 1)
            yield batch
        if not advance:
            self._worker = None  # this worker's pass is over: a persistent worker's next one is new


def _items(plan: IndexPlan, layout: _Layout | None, worker: int, workers: int) -> list[tuple[int, int]]:
    """``(rank, step)`` of the items worker ``worker`` of ``workers`` (0: no workers) reads in a pass.

    Alone: its steps (`IndexPlan.worker_steps`) of the plan's rank. Under Accelerate, every rank's item of
    each step: sharded (every rank iterates), a worker takes whole steps, as alone; dispatched (rank 0
    reads for all), item ``j`` of the pass goes to worker ``j % workers``, so that torch's taking one item
    from each worker in turn keeps every step's items together and in rank order.
    """
    if layout is None:
        return [(plan.rank, step) for step in plan.worker_steps(worker)]
    if layout.kind == "shard":
        return layout.items(plan.worker_steps(worker))
    if layout.rank != 0:
        return []  # Accelerate makes an iterator on every rank but takes items on rank 0 only
    every = layout.items(range(plan.start_from_step, plan.steps))
    streams = _dispatch_streams(layout, workers)
    return every[worker::streams] if worker < streams else []


def _dispatch_streams(layout: _Layout, workers: int) -> int:
    """The workers that read when Accelerate dispatches: one (the others have nothing, and torch skips
    them). Accelerate takes ``W`` items at a time from rank 0's loader, one step ahead of the training
    loop, and a worker's state can only say how many of its own items were taken: with one reading worker
    that is the whole pass's count, from which `_resumed_at` finds the step to resume exactly."""
    return 1


def _resumed_at(done: int, layout: _Layout | None) -> int:
    """Where a worker's items resume from, given the ``done`` items the consumer had taken from it.

    Accelerate dispatching saves the state taken just before the last item of the step it fetched ahead
    of the training loop: what it holds of that step was not trained on, so the pass resumes at the
    step's first item (with one reading worker, ``done`` counts every item of the pass taken).
    """
    if layout is None or layout.kind != "dispatch":
        return done
    return done - done % layout.world_size


def _check_layout(
    plan: IndexPlan | LoaderOptions, layout: _Layout | None, saved_by: int | None = None
) -> None:
    """Refuse a plan (or resolved options) sharded for another number of processes than Accelerate runs,
    and, dispatching, a state saved by a process that never reads. Every process refuses alike (each
    loaded the same state), so that none is left waiting for the one that refused."""
    if layout is None:
        return
    if (plan.world_size, plan.rank) != (layout.world_size, layout.rank):
        raise InvalidArgumentError(
            f"This loader is sharded for rank {plan.rank} of {plan.world_size}, but Accelerate runs it as "
            f"process {layout.rank} of {layout.world_size}. Leave rank and world_size unset in "
            "ds.pytorch() (they are read from torch.distributed), or iterate the loader without prepare()."
        )
    if layout.kind == "dispatch" and saved_by not in (None, 0):
        raise InvalidArgumentError(
            f"The loader state loaded here was saved by process {saved_by}, which reads nothing while "
            "Accelerate dispatches batches from process 0, so it does not say where training was. "
            "(Accelerate's save_state writes every process's loader state to the same dl_state_dict.bin, "
            f"and process {saved_by}'s came last.) After save_state, write process 0's over it: "
            "accelerator.wait_for_everyone(); if accelerator.is_main_process: "
            "torch.save(loader.state_dict(), os.path.join(checkpoint, 'dl_state_dict.bin')). Or prepare "
            "with DataLoaderConfiguration(dispatch_batches=False), where every process's state is the same."
        )


def _accelerate_processes() -> tuple[int, int]:
    """Accelerate's process count in this program and this process's index ((1, 0) without Accelerate)."""
    if "accelerate" not in sys.modules:
        return 1, 0
    from accelerate.state import PartialState, is_initialized

    if not is_initialized():
        return 1, 0
    state = PartialState()
    return int(state.num_processes), int(state.process_index)


def _accelerate_caller(frame: Any) -> Literal["dispatch", "shard"] | None:
    """Which of Accelerate's loaders called the frame ``frame``'s function (`TorchBatches.set_epoch`):
    its dispatcher, the shard of an iterable dataset (``dispatch_batches=False``), or neither."""
    if "accelerate" not in sys.modules or frame is None or frame.f_back is None:
        return None
    from accelerate.data_loader import DataLoaderDispatcher

    caller = frame.f_back.f_locals.get("self")
    if isinstance(caller, DataLoaderDispatcher):
        return "dispatch"
    return "shard" if _in_accelerate_shard(frame) else None


def _in_accelerate_shard(frame: Any) -> bool:
    """Whether the caller of the frame ``frame`` (the dataset's ``__iter__``) is Accelerate's
    ``IterableDatasetShard``, which keeps every ``W``-th item for its rank (``dispatch_batches=False``).
    Told by the caller, because a DataLoader may start its workers before Accelerate's loader says what it
    is (torchdata does, for a first state)."""
    if "accelerate" not in sys.modules or frame is None or frame.f_back is None:
        return False
    from accelerate.data_loader import IterableDatasetShard

    return isinstance(frame.f_back.f_locals.get("self"), IterableDatasetShard)


def _reported(batches: Iterator[dict[str, Any]]) -> Iterator[Any]:
    """The worker's batches, then its exception (if any) as a `WorkerFailure` item."""
    try:
        yield from batches
    except Exception as exc:
        # As an item: torch re-raises a worker's exception as ``type(message)``, and our errors,
        # whose constructors take structured arguments, would arrive as a bare RuntimeError.
        yield WorkerFailure(pickle_exception(exc))


def samples_of(batch: dict[str, Any]) -> list[dict[str, Any]]:
    """A batch dict of columns as the list of its samples, each a dict of tensor name to value (what
    torch's ``collate_fn`` takes)."""
    columns = list(batch.items())
    count = len(columns[0][1]) if columns else 0
    return [{name: values[i] for name, values in columns} for i in range(count)]


class _Collate:
    """The DataLoader's ``collate_fn``. The DataLoader takes the dataset's items one at a time (its own
    ``batch_size`` is 1), and each is one of our batches: a failure passes through; given the user's
    ``collate_fn``, it gets the batch's samples as a list of dicts (torch's and Deep Lake's convention);
    without one, the batch's arrays become tensors."""

    def __init__(self, collate_fn: Callable[[Any], Any] | None) -> None:
        self.collate_fn = collate_fn

    def __call__(self, items: list[Any]) -> Any:
        (item,) = items
        if isinstance(item, WorkerFailure):
            return item
        if self.collate_fn is None:
            return torch.utils.data.default_convert(item)  # type: ignore[no-untyped-call]  # torch's own
        return self.collate_fn(samples_of(item))


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

    def __len__(self) -> int:
        """The batches of a full epoch for this rank."""
        return self.dataset.cursor.steps

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
        batch_size=1,  # one item at a time: every item is a whole batch (see _Collate)
        num_workers=options.num_workers,
        collate_fn=_Collate(options.collate_fn),
        pin_memory=options.pin_memory,
        **extra,
    )
