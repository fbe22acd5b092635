"""The index plan: which samples each step of each rank reads, as pure arithmetic.

Every rank builds the same plan from the same options without talking to the others:

1. the epoch's order: a permutation of ``0 .. length - 1`` drawn from ``(seed, epoch)`` (the identity
   without ``shuffle``), the same on every rank;
2. position ``p`` of that order goes to rank ``p % world_size``; the rank's own positions, in order,
   are its stream ``q = 0, 1, 2, ...`` (``p = q * world_size + rank``);
3. the stream is cut into steps of ``batch_size``: step ``s`` is ``q = s * batch_size ..``;
4. steps are dealt to loader workers in turn: step ``s`` is read by worker
   ``(s - start_from_step) % num_workers``, so that a data loader taking one batch from each worker
   in turn yields the steps in order.

Every rank gets the same number of samples and steps: without ``drop_last`` the order is padded by
wrapping around to its start (at most ``world_size - 1`` repeated samples, and the last step may be
short, equally on every rank); with ``drop_last`` the tail that does not fill a step on every rank is
left out, so every step is full. Because a batch is a contiguous run of a rank's stream, its content
does not depend on ``num_workers``: a run resumed with another worker count yields the same batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["IndexPlan"]

# Shuffling draws from its own stream of the seed, apart from the per-sample generators transforms
# derive from the same seed.
_SHUFFLE_STREAM = 0x5EED_0001


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidTypeError(f"Expected {name} to be an int. Got {type(value).__name__}: {value!r}.")
    if value < minimum:
        raise InvalidArgumentError(f"Expected {name} >= {minimum}. Got {value!r}.")
    return int(value)


@dataclass(frozen=True, slots=True)
class IndexPlan:
    """Which samples every step of one rank reads in one epoch.

    Attributes:
        length: samples in the source (a dataset, a view, or token blocks).
        batch_size: samples per step (the last step may be shorter without ``drop_last``).
        shuffle: whether the epoch's order is a permutation drawn from ``(seed, epoch)``.
        seed: the seed of the permutation (and of a transform's per-sample generators).
        epoch: the epoch; each one has its own permutation.
        drop_last: leave out the tail that does not fill a whole step on every rank.
        rank: this process's rank among ``world_size``.
        world_size: how many ranks share the epoch.
        start_from_step: the first step this run yields (to resume after ``k`` steps).

    Example:
        >>> plan = IndexPlan(10, batch_size=2, world_size=2, rank=1)
        >>> plan.steps, [plan.step_indices(s).tolist() for s in range(plan.steps)]
        (3, [[1, 3], [5, 7], [9]])
    """

    length: int
    batch_size: int
    shuffle: bool = False
    seed: int = 0
    epoch: int = 0
    drop_last: bool = False
    rank: int = 0
    world_size: int = 1
    start_from_step: int = 0

    def __post_init__(self) -> None:
        _check_int("length", self.length, 0)
        _check_int("batch_size", self.batch_size, 1)
        _check_int("seed", self.seed, 0)
        _check_int("epoch", self.epoch, 0)
        _check_int("world_size", self.world_size, 1)
        _check_int("rank", self.rank, 0)
        _check_int("start_from_step", self.start_from_step, 0)
        if self.rank >= self.world_size:
            raise InvalidArgumentError(
                f"Expected 0 <= rank < world_size. Got rank={self.rank}, world_size={self.world_size}."
            )
        if self.start_from_step > self.steps:
            raise InvalidArgumentError(
                f"start_from_step={self.start_from_step} is past the end of the epoch, which has "
                f"{self.steps} steps per rank. To go on after an epoch, pass epoch={self.epoch + 1} and "
                "start_from_step=0."
            )

    @property
    def per_rank(self) -> int:
        """Samples each rank reads in the epoch (repeats included)."""
        if self.drop_last:
            return self.steps * self.batch_size
        return -(-self.length // self.world_size)

    @property
    def steps(self) -> int:
        """Steps (batches) of the epoch, the same on every rank."""
        if self.drop_last:
            return self.length // (self.world_size * self.batch_size)
        return -(-self.per_rank // self.batch_size)

    @property
    def padding(self) -> int:
        """Samples read twice in the epoch (across all ranks) so that every rank reads as many."""
        return 0 if self.drop_last else self.per_rank * self.world_size - self.length

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
        return np.random.default_rng(seq).permutation(self.length)

    def step_indices(self, step: int, order: np.ndarray | None = None) -> np.ndarray:
        """Indices of the samples step ``step`` of this rank reads, in batch order.

        Args:
            step: the step, ``0 <= step < steps``.
            order: `order`, when the caller computed it once for many steps.
        """
        if not 0 <= step < self.steps:
            raise InvalidArgumentError(f"Expected 0 <= step < {self.steps}. Got {step}.")
        if order is None and self.shuffle:
            order = self.order()
        q = np.arange(step * self.batch_size, min((step + 1) * self.batch_size, self.per_rank))
        p = (q * self.world_size + self.rank) % self.length
        return p if order is None else order[p]

    def worker_steps(self, worker: int, num_workers: int) -> range:
        """The steps loader worker ``worker`` of ``num_workers`` reads (0 workers: all of them)."""
        stride = max(1, num_workers)
        if not 0 <= worker < stride:
            raise InvalidArgumentError(f"Expected 0 <= worker < {stride}. Got {worker}.")
        return range(self.start_from_step + worker, self.steps, stride)
