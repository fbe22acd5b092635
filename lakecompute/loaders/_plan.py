"""The index plan: which samples each step of each rank reads, as pure arithmetic.

Every rank builds the same plan from the same options without talking to the others (seed 001, the
contract of ``ds.batches()`` and ``ds.pytorch()``):

1. the epoch's order: a permutation of ``0 .. length - 1`` drawn from ``(seed, epoch)`` (the identity
   without ``shuffle``), the same on every rank;
2. position ``p`` of that order goes to rank ``p % world_size``; the rank's own positions, in order,
   are its share ``q = 0, 1, 2, ...`` (``p = q * world_size + rank``);
3. position ``q`` of the share goes to loader worker ``q % num_workers`` (``p`` to worker
   ``(p // world_size) % num_workers``); ``num_workers=0`` is one stream, as one worker;
4. each worker cuts its own samples, in order, into batches of ``batch_size`` (its last batch may be
   short; with ``drop_last`` each worker leaves out its own short batch);
5. the steps interleave the workers' batches as torch's DataLoader does: step ``s`` is batch
   ``s // num_workers`` of worker ``s % num_workers``. The workers' batch counts differ by at most
   one and never grow with the worker's number, so when some workers have run out only the last
   round is short, and the others continue in turn, as torch does.

Every rank gets the same share and so the same number of steps: without ``drop_last`` the order is
padded by wrapping around to its start (at most ``world_size - 1`` repeated samples); with
``drop_last`` the share is ``length // world_size`` and each worker's short batch is left out, so
every batch is full. Because a worker's batch is made of every ``num_workers``-th sample of the share,
batch contents depend on ``num_workers`` (as with torch's ``IterableDataset`` sharding): a run
resumed with ``start_from_step`` yields the uninterrupted run's batches only with the same options,
``num_workers`` included. Resuming rotates the workers: worker ``i`` of a run resumed at step ``k``
reads the steps worker ``(k + i) % num_workers`` of the uninterrupted run would read from there on,
so that the DataLoader's first batch is step ``k``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.parsing import parse_count

__all__ = ["LEAST", "PLAN_OPTIONS", "IndexPlan"]

LEAST: Final = MappingProxyType(
    {
        "length": 0,
        "batch_size": 1,
        "seed": 0,
        "epoch": 0,
        "world_size": 1,
        "rank": 0,
        "start_from_step": 0,
        "num_workers": 0,
        "prefetch": 1,
        "shuffle_block": 0,
    }
)
"""The smallest value of every count a loader takes (the plan's and the loader options')."""

# Marks the fields of a plan that are options: what decides which samples each step reads, the same for
# every epoch, rank and resume (the others say where a run is: the source's length, epoch, rank, step).
_OPTION: Final = MappingProxyType({"option": True})

# Shuffling draws from its own stream of the seed, apart from the per-sample generators transforms
# derive from the same seed.
_SHUFFLE_STREAM = 0x5EED_0001


@dataclass(frozen=True, slots=True)
class IndexPlan:
    """Which samples every step of one rank reads in one epoch, and which loader worker reads them.

    Attributes:
        length: samples in the source (a dataset, a view, or token blocks).
        batch_size: samples per step (a worker's last batch may be shorter without ``drop_last``).
        shuffle: whether the epoch's order is a permutation drawn from ``(seed, epoch)``.
        shuffle_block: with ``shuffle``, the order shuffles blocks of this many consecutive samples, then
            the samples within each block (a chunk-local shuffle); 0 shuffles all samples at once.
        seed: the seed of the permutation (and of a transform's per-sample generators).
        epoch: the epoch; each one has its own permutation.
        drop_last: give every rank ``length // world_size`` samples and leave out each worker's
            short last batch, so that every batch is full and no sample repeats.
        rank: this process's rank among ``world_size``.
        world_size: how many ranks share the epoch.
        start_from_step: the first step this run yields (to resume after ``k`` steps).
        num_workers: loader workers per rank (0: one stream, read as by one worker).

    Example:
        >>> plan = IndexPlan(16, batch_size=2, world_size=2, rank=1, num_workers=2)
        >>> plan.worker_indices(0).tolist(), plan.worker_indices(1).tolist()
        ([1, 5, 9, 13], [3, 7, 11, 15])
        >>> plan.steps, [plan.step_indices(s).tolist() for s in range(plan.steps)]
        (4, [[1, 5], [3, 7], [9, 13], [11, 15]])
    """

    length: int
    batch_size: int = dataclasses.field(metadata=_OPTION)
    shuffle: bool = dataclasses.field(default=False, metadata=_OPTION)
    seed: int = dataclasses.field(default=0, metadata=_OPTION)
    epoch: int = 0
    drop_last: bool = dataclasses.field(default=False, metadata=_OPTION)
    rank: int = 0
    world_size: int = dataclasses.field(default=1, metadata=_OPTION)
    start_from_step: int = 0
    num_workers: int = dataclasses.field(default=0, metadata=_OPTION)
    shuffle_block: int = dataclasses.field(default=0, metadata=_OPTION)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if field.name in LEAST:
                parse_count(field.name, getattr(self, field.name), LEAST[field.name])
        if self.rank >= self.world_size:
            raise InvalidArgumentError(
                f"Expected 0 <= rank < world_size. Got rank={self.rank}, world_size={self.world_size}."
            )
        if self.start_from_step > self.steps:
            raise InvalidArgumentError(
                f"start_from_step={self.start_from_step} is past the end of the epoch, which has "
                f"{self.steps} steps per rank with num_workers={self.num_workers}. To go on after an "
                f"epoch, pass epoch={self.epoch + 1} and start_from_step=0."
            )

    @property
    def streams(self) -> int:
        """Worker streams a rank's share is dealt to: ``num_workers``, or 1 for 0 workers."""
        return max(1, self.num_workers)

    @property
    def share(self) -> int:
        """Positions of the epoch's order each rank is dealt (padding included, nothing dropped yet)."""
        if self.drop_last:
            return self.length // self.world_size
        return -(-self.length // self.world_size)

    def worker_samples(self, worker: int) -> int:
        """Positions of the rank's share dealt to worker ``worker`` of the uninterrupted run."""
        self._check_worker(worker)
        return len(range(worker, self.share, self.streams))

    def _batches(self, samples: int) -> int:
        if self.drop_last:
            return samples // self.batch_size
        return -(-samples // self.batch_size)

    @property
    def steps(self) -> int:
        """Steps (batches) of the epoch, the same on every rank."""
        # Workers 0 .. extra - 1 are dealt one sample more than the others.
        base, extra = divmod(self.share, self.streams)
        return extra * self._batches(base + 1) + (self.streams - extra) * self._batches(base)

    @property
    def per_rank(self) -> int:
        """Samples each rank reads in the epoch (repeats included)."""
        if self.drop_last:
            return self.steps * self.batch_size
        return self.share

    @property
    def padding(self) -> int:
        """Samples read twice in the epoch (across all ranks) so that every rank reads as many."""
        return 0 if self.drop_last else self.share * self.world_size - self.length

    @property
    def dropped(self) -> int:
        """Samples not read in the epoch (``drop_last``)."""
        return self.length - self.per_rank * self.world_size if self.drop_last else 0

    def __len__(self) -> int:
        """Steps this run yields: the epoch's steps from ``start_from_step``."""
        return self.steps - self.start_from_step

    def order(self) -> np.ndarray | None:
        """The epoch's order of sample indices, or None for the identity (no ``shuffle``)."""
        if not self.shuffle:
            return None
        seq = np.random.SeedSequence(self.seed, spawn_key=(_SHUFFLE_STREAM, self.epoch))
        rng = np.random.default_rng(seq)
        if not self.shuffle_block or self.shuffle_block >= self.length:
            return rng.permutation(self.length)
        # Chunk-local: the blocks of shuffle_block consecutive samples in a random order, and the samples
        # of each block in a random order among themselves.
        block = np.arange(self.length) // self.shuffle_block
        place = rng.permutation(int(block[-1]) + 1)
        order: np.ndarray = np.lexsort((rng.random(self.length), place[block]))
        return order

    def step_indices(self, step: int, order: np.ndarray | None = None) -> np.ndarray:
        """Indices of the samples step ``step`` of this rank reads, in batch order.

        Step ``s`` is batch ``s // streams`` of worker ``s % streams`` (of the uninterrupted run).

        Args:
            step: the step, ``0 <= step < steps``.
            order: `order`, when the caller computed it once for many steps.
        """
        if not 0 <= step < self.steps:
            raise InvalidArgumentError(f"Expected 0 <= step < {self.steps}. Got {step}.")
        if order is None and self.shuffle:
            order = self.order()
        batch, worker = divmod(step, self.streams)
        lo = batch * self.batch_size
        hi = min(lo + self.batch_size, self.worker_samples(worker))
        if self.streams == 1 and self.world_size == 1 and hi <= self.length:  # one stream: a run
            run = np.arange(lo, hi)
            return run if order is None else order[run]
        j = np.arange(lo, hi)
        q = j * self.streams + worker
        p = (q * self.world_size + self.rank) % self.length
        return p if order is None else order[p]

    def step_span(self, step: int) -> tuple[int, int] | None:
        """``(lo, hi)`` when step ``step`` reads samples ``lo .. hi - 1`` in order, which is every step of
        a plan without ``shuffle`` of one stream on one rank; None for any other plan.

        The same samples as `step_indices`, worked out without an array: a loader reading in process
        calls it per batch.

        Raises:
            InvalidArgumentError: ``step`` is not a step of the epoch (only where the plan is one run).
        """
        if self.shuffle or self.num_workers > 1 or self.world_size > 1:
            return None
        lo = step * self.batch_size
        hi = min(lo + self.batch_size, self.length)
        if step < 0 or lo >= self.length or (self.drop_last and hi - lo < self.batch_size):
            raise InvalidArgumentError(f"Expected 0 <= step < {self.steps}. Got {step}.")
        return lo, hi

    def worker_steps(self, worker: int) -> range:
        """The steps loader worker ``worker`` of this run reads, in order.

        Worker ``i`` reads steps ``start_from_step + i``, then every ``streams``-th: in an uninterrupted
        run, exactly the batches of its own samples; resumed at step ``k``, the rest of the steps of
        worker ``(k + i) % streams``, so that taking one batch from each worker in turn (as torch's
        DataLoader does) yields the steps in order.
        """
        self._check_worker(worker)
        return range(self.start_from_step + worker, self.steps, self.streams)

    def worker_indices(self, worker: int, order: np.ndarray | None = None) -> np.ndarray:
        """Indices of the samples loader worker ``worker`` of this run reads, in order (`worker_steps`)."""
        if order is None and self.shuffle:
            order = self.order()
        parts = [self.step_indices(s, order) for s in self.worker_steps(worker)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _check_worker(self, worker: int) -> None:
        if not 0 <= worker < self.streams:
            raise InvalidArgumentError(
                f"Expected 0 <= worker < {self.streams} (num_workers={self.num_workers}). Got {worker}."
            )


PLAN_OPTIONS: Final = tuple(f.name for f in dataclasses.fields(IndexPlan) if f.metadata.get("option"))
"""The options of an `IndexPlan`: a loader state resumes only a plan made with the same."""
