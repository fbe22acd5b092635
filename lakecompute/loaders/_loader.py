"""One loader run: a source, an index plan and a transform, read in this process or in workers."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from lakecompute.loaders._plan import IndexPlan
from lakecompute.loaders._sources import RowSource, TokenSource
from lakecompute.loaders._transform import BatchTransform

__all__ = ["Batches", "LoaderSpec", "reseed_globals", "worker_batches"]


@dataclass(frozen=True, slots=True)
class LoaderSpec:
    """Everything a loader worker needs, fixed before it starts (small and picklable).

    Attributes:
        source: what is read (rows of a dataset, or token blocks).
        plan: which steps this run yields and which samples each reads.
        transform: applied to each batch after reading (see `lakecompute.loaders._transform`).
    """

    source: RowSource | TokenSource
    plan: IndexPlan
    transform: Any = None


def reseed_globals() -> None:
    """Reseed numpy's and Python's global generators from fresh entropy.

    A forked worker starts with a copy of its parent's generator state, so code that draws from
    ``np.random`` without the ``rng`` it is given would repeat the same draws in every worker.
    """
    np.random.seed()
    random.seed()


def worker_batches(spec: LoaderSpec, worker: int) -> Iterator[dict[str, Any]]:
    """The batches of the steps loader worker ``worker`` reads (`IndexPlan.worker_steps`), in order.

    Opens the source here (in the worker), computes the epoch's order once, and reads each step's
    samples with one chunk-aware read; samples of steps other workers own, or of steps before
    ``start_from_step``, are never read.
    """
    reader = spec.source.open()
    apply = BatchTransform(spec.transform, spec.plan.seed, spec.plan.epoch)
    order = spec.plan.order()
    for step in spec.plan.worker_steps(worker):
        indices = spec.plan.step_indices(step, order)
        yield apply(reader.read(indices), indices)


class Batches(Iterator[dict[str, Any]]):
    """An iterator over the batches of one loader run (one epoch from ``start_from_step``).

    ``len()`` is the number of batches it yields in all. With workers, they start at the first
    ``next()`` and stop when the iterator is exhausted, closed (`close`, or leaving a ``with``
    block) or garbage-collected.

    Attributes:
        spec: what is read, and how (its plan says how many loader workers read it).
        prefetch: batches each worker may read ahead of the consumer.
    """

    def __init__(self, spec: LoaderSpec, prefetch: int) -> None:
        self.spec = spec
        self.prefetch = prefetch
        self._it: Iterator[dict[str, Any]] | None = None

    @property
    def plan(self) -> IndexPlan:
        """The index plan of this run."""
        return self.spec.plan

    @property
    def num_workers(self) -> int:
        """Loader worker processes (0: read in this process)."""
        return self.spec.plan.num_workers

    def __len__(self) -> int:
        return len(self.spec.plan)

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._it is None:
            if self.num_workers:
                from lakecompute.loaders._workers import parallel_batches

                self._it = parallel_batches(self.spec, self.prefetch)
            else:
                self._it = worker_batches(self.spec, 0)
        return next(self._it)

    def close(self) -> None:
        """Stop the workers (if any) and end the iteration."""
        if self._it is not None and hasattr(self._it, "close"):
            self._it.close()
        self._it = iter(())

    def __enter__(self) -> Batches:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        p = self.spec.plan
        return (
            f"Batches({len(self)} batches of {p.batch_size}, rank {p.rank}/{p.world_size}, "
            f"epoch {p.epoch}, from step {p.start_from_step}, num_workers={self.num_workers})"
        )
