"""The options of a loader run, checked once at the user's call and carried whole from there down."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from lakecompute.loaders._plan import IndexPlan, _check_int
from lakecompute.loaders._transform import check_transform

__all__ = ["LoaderOptions"]

# Each count and the least value it may take. rank and world_size may also be None: pytorch()'s
# "torch.distributed's, when it is initialised", filled in before a plan is made (`plan` refuses None,
# so batches() does, with the message it always gave).
_LEAST = {
    "batch_size": 1,
    "seed": 0,
    "epoch": 0,
    "world_size": 1,
    "rank": 0,
    "start_from_step": 0,
    "num_workers": 0,
    "prefetch": 1,
}
_DISTRIBUTED = ("rank", "world_size")
# Flags are taken for their truth, as they always were (shuffle=1 shuffles).
_FLAGS = ("shuffle", "drop_last", "pin_memory")


@dataclass(frozen=True, slots=True)
class LoaderOptions:
    """Everything ``batches()`` or ``pytorch()`` was asked to do besides what to read (see
    `lakecompute.Dataset.batches` and `lakecompute.Dataset.pytorch` for each meaning).

    Attributes:
        batch_size: samples per batch.
        shuffle: draw a new order for every ``(seed, epoch)``.
        seed: the seed of the order and of a compute transform's per-sample ``rng``.
        epoch: the epoch (each has its own order and its own transform draws).
        drop_last: leave out the tail that would make a short or uneven last batch.
        rank: this process's rank (0 .. world_size - 1); None: torch.distributed's (``pytorch()`` only).
        world_size: how many ranks share the epoch; None: torch.distributed's (``pytorch()`` only).
        start_from_step: the first step this run yields (to resume after that many steps).
        transform: a compute function or pipeline, or a callable taking and returning a batch dict.
        num_workers: loader worker processes that read and decode; 0 reads in this process.
        prefetch: batches each worker may read ahead.
        collate_fn: the DataLoader's ``collate_fn`` (``pytorch()`` only; None: arrays become tensors).
        pin_memory: the DataLoader's ``pin_memory`` (``pytorch()`` only).
    """

    batch_size: int
    shuffle: bool = False
    seed: int = 0
    epoch: int = 0
    drop_last: bool = False
    rank: int | None = 0
    world_size: int | None = 1
    start_from_step: int = 0
    transform: Any = None
    num_workers: int = 0
    prefetch: int = 2
    collate_fn: Callable[[Any], Any] | None = None
    pin_memory: bool = False

    @classmethod
    def parse(cls, **options: Any) -> LoaderOptions:
        """Check the options of ``batches()`` or ``pytorch()``; counts become ints and flags bools.

        Raises:
            InvalidTypeError: a count that is not an int, or a transform that is not callable.
            InvalidArgumentError: a count out of range (``batch_size`` < 1, a negative ``seed``, ...).
        """
        checked = dict(options)
        for name, least in _LEAST.items():
            if name in options and not (name in _DISTRIBUTED and options[name] is None):
                checked[name] = _check_int(name, options[name], least)
        for name in _FLAGS:
            if name in options:
                checked[name] = bool(options[name])
        check_transform(options.get("transform"))
        return cls(**checked)

    @classmethod
    def pick(cls, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The entries of ``arguments`` that name an option: a call's own, given as its ``locals()``.

        The methods that take these options (``ds.batches()``, ``ds.pytorch()``, ``TokenBlocks``'s)
        spell each one out in their signatures; picking them from there, rather than naming each
        again in every body, keeps one list per signature.
        """
        return {f.name: arguments[f.name] for f in fields(cls) if f.name in arguments}

    def plan(self, length: int) -> IndexPlan:
        """The index plan of a run over ``length`` samples.

        Raises:
            InvalidTypeError: ``rank`` or ``world_size`` is still None (only ``pytorch()`` fills them in).
            InvalidArgumentError: ``rank >= world_size``, or ``start_from_step`` past the epoch's end.
        """
        world_size = _check_int("world_size", self.world_size, 1)
        rank = _check_int("rank", self.rank, 0)
        return IndexPlan(
            length,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            drop_last=self.drop_last,
            rank=rank,
            world_size=world_size,
            start_from_step=self.start_from_step,
            num_workers=self.num_workers,
        )
