"""The torch adapter: a real ``torch.utils.data.DataLoader`` over a loader run.

Imported only by `lakecompute.loaders.pytorch`, so ``import lakecompute`` never imports torch.

The dataset handed to the DataLoader is an ``IterableDataset`` whose every item is a whole batch
(``batch_size=None``: no per-sample collation). Each DataLoader worker reads the batches of its
own samples (`IndexPlan.worker_steps`); the DataLoader takes one batch from each worker in turn,
skipping workers that have run out, which is the steps' order, and ``prefetch_factor`` bounds what
each worker reads ahead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from lakecompute.errors import InvalidArgumentError
from lakecompute.loaders._loader import LoaderSpec, WorkerFailure, worker_batches
from lakecompute.loaders._options import LoaderOptions
from lakecompute.schedulers import pickle_exception, reseed_globals

__all__ = ["LakeDataLoader", "TorchBatches", "make_dataloader"]


class TorchBatches(torch.utils.data.IterableDataset):  # type: ignore[type-arg]  # items are batch dicts
    """A loader run as a torch ``IterableDataset`` of batches.

    Attributes:
        spec: what is read, and how.
    """

    def __init__(self, spec: LoaderSpec) -> None:
        super().__init__()
        self.spec = spec

    def __len__(self) -> int:
        return len(self.spec.plan)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return worker_batches(self.spec, 0)
        if info.num_workers != self.spec.plan.streams:
            # The plan deals samples to its own worker count; another one would skip or repeat some.
            raise InvalidArgumentError(
                f"This dataset was planned for num_workers={self.spec.plan.num_workers}, but the "
                f"DataLoader iterating it has {info.num_workers} workers. Build the DataLoader with "
                "ds.pytorch(..., num_workers=n) rather than wrapping its dataset in another one."
            )
        return _reported(worker_batches(self.spec, info.id))


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
    """torch's DataLoader iterator, raising a worker's exception as itself where it arrives."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __iter__(self) -> _RaisingIterator:
        return self

    def __next__(self) -> Any:
        item = next(self._inner)
        if isinstance(item, WorkerFailure):
            raise item.exception()
        return item

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class LakeDataLoader(torch.utils.data.DataLoader):  # type: ignore[type-arg]  # items are batch dicts
    """A ``torch.utils.data.DataLoader`` whose workers' errors keep their type (`lakecompute.errors`
    included: ``except lc.DatasetCorruptError`` and ``TransformError.index`` work with workers)."""

    def __iter__(self) -> Any:
        return _RaisingIterator(super().__iter__())


def _reseed_worker(worker: int) -> None:
    """Our workers' start hook (`reseed_globals`), from the seed torch gave this worker: numpy's
    generator differs per worker too, and ``torch.manual_seed`` in the main process still makes every
    worker's draws repeatable."""
    reseed_globals(torch.initial_seed())


def make_dataloader(spec: LoaderSpec, options: LoaderOptions) -> torch.utils.data.DataLoader[Any]:
    """A DataLoader yielding the run's batches in step order (numpy arrays become tensors)."""
    num_workers = spec.plan.num_workers
    extra: dict[str, Any] = {}
    if num_workers:
        extra["prefetch_factor"] = options.prefetch
        extra["worker_init_fn"] = _reseed_worker
        if not spec.source.snapshot.fork_safe:
            # An object store's client hangs in a forked child once the parent used it.
            extra["multiprocessing_context"] = "forkserver"
    return LakeDataLoader(
        TorchBatches(spec),
        batch_size=None,
        num_workers=num_workers,
        collate_fn=_Collate(options.collate_fn) if num_workers else options.collate_fn,
        pin_memory=options.pin_memory,
        **extra,
    )
