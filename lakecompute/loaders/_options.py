"""The options of a loader run: typed once (`LoaderKwargs`, `TorchLoaderKwargs`), checked once at the
user's call (`LoaderOptions.parse`) and carried whole from there down."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from lakecompute.errors import InvalidArgumentError
from lakecompute.loaders._plan import LEAST, IndexPlan
from lakecompute.loaders._transform import check_transform
from lakecompute.parsing import parse_count, parse_flag, parse_keywords, parse_size
from lakecompute.storage import CacheSpec, cache_folder, cache_spec

__all__ = ["LoaderKwargs", "LoaderOptions", "TorchLoaderKwargs"]


class _CommonKwargs(TypedDict, total=False):
    """The options ``batches()`` and ``pytorch()`` share (each optional)."""

    shuffle: bool
    """Draw a new order for every ``(seed, epoch)`` (default False)."""
    shuffle_block: int
    """With ``shuffle``: shuffle blocks of this many consecutive samples, then the samples within each
    block, instead of all samples at once (default 0: all at once). A batch then lies in a block or two,
    read as slices of few chunks (litdata's and MosaicML Streaming's chunk-local shuffle; see
    docs/training.md for what it does to batch statistics)."""
    seed: int
    """The seed of the order and of a compute transform's per-sample ``rng`` (default 0)."""
    epoch: int
    """The epoch: each has its own order and its own transform draws (default 0)."""
    drop_last: bool
    """Leave out the tail that would make a short or uneven last batch (default False)."""
    start_from_step: int
    """Resume: yield exactly the batches an uninterrupted run with the same options (``num_workers``
    too) yields from this step on, found in O(1); samples of skipped steps are never read (default 0)."""
    transform: Any
    """A compute function or pipeline (``@lc.compute``), run on each sample in the workers with an
    ``rng`` derived from ``(seed, epoch, index)``, or a callable taking and returning a batch dict
    (default None)."""
    num_workers: int
    """Loader worker processes that read and decode; 0 (the default) reads in this process."""
    prefetch: int
    """Batches each worker may read ahead (default 2; ``pytorch()``: the DataLoader's
    ``prefetch_factor``)."""
    cache_dir: Any
    """A folder for the local disk cache of a remote dataset's chunks, shared by the loader's workers
    and other processes (default: the handle's, from ``lc.load(..., cache_dir=...)``, else
    ``LAKECOMPUTE_CACHE_DIR``, else none; see docs/cluster.md)."""
    cache_size: Any
    """The most bytes the disk cache holds: an int or text such as ``"20GB"`` (default: the handle's,
    else ``LAKECOMPUTE_CACHE_SIZE``, else 20 GB)."""


class LoaderKwargs(_CommonKwargs, total=False):
    """The keyword options of ``batches()`` (`lakecompute.Dataset.batches`), each optional."""

    rank: int
    """This process's rank, ``0 .. world_size - 1`` (default 0)."""
    world_size: int
    """How many ranks share the epoch (default 1)."""


class TorchLoaderKwargs(_CommonKwargs, total=False):
    """The keyword options of ``pytorch()`` (`lakecompute.Dataset.pytorch`), each optional."""

    rank: int | None
    """This process's rank; None (the default): ``torch.distributed.get_rank()`` when torch.distributed
    is initialised, else 0 (read when each pass starts)."""
    world_size: int | None
    """How many ranks share the epoch; None (the default): ``torch.distributed.get_world_size()``
    likewise, else 1."""
    collate_fn: Callable[[Any], Any] | None
    """Applied to each batch dict (default None: numpy arrays become tensors)."""
    pin_memory: bool
    """The DataLoader's ``pin_memory`` (default False)."""


# Each count and the least value it may take. rank and world_size may also be None: pytorch()'s
# "torch.distributed's, when it is initialised", filled in before a plan is made (`plan` refuses None,
# so batches() does, with the message it always gave).
_DISTRIBUTED = ("rank", "world_size")
# Flags follow `lakecompute.parsing.parse_flag`, like every other call's: True or False (numpy bools too).
_FLAGS = ("shuffle", "drop_last", "pin_memory")


@dataclass(frozen=True, slots=True)
class LoaderOptions:
    """Everything ``batches()`` or ``pytorch()`` was asked to do besides what to read (see
    `lakecompute.Dataset.batches` and `lakecompute.Dataset.pytorch` for each meaning).

    Attributes:
        batch_size: samples per batch.
        shuffle: draw a new order for every ``(seed, epoch)``.
        shuffle_block: with ``shuffle``, shuffle blocks of this many consecutive samples, then within
            each block (0: all samples at once).
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
        cache_dir: the disk cache's folder (None: the handle's, else ``LAKECOMPUTE_CACHE_DIR``).
        cache_size: the disk cache's bound in bytes (None: the handle's, else the default).
    """

    batch_size: int
    shuffle: bool = False
    shuffle_block: int = 0
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
    cache_dir: str | None = None
    cache_size: int | None = None

    @classmethod
    def parse(cls, call: str, batch_size: object, options: Mapping[str, Any]) -> LoaderOptions:
        """Check the options of ``call`` (``"batches"``: `LoaderKwargs`; ``"pytorch"``:
        `TorchLoaderKwargs`); counts become ints and flags bools.

        Raises:
            InvalidTypeError: a count that is not an int, a transform that is not callable, or an
                option ``call`` does not take.
            InvalidArgumentError: a count out of range (``batch_size`` < 1, a negative ``seed``, ...).
        """
        known = TorchLoaderKwargs.__optional_keys__ if call == "pytorch" else LoaderKwargs.__optional_keys__
        parse_keywords(call, options, known)
        checked = {"batch_size": batch_size, **options}
        for name, least in LEAST.items():
            if name in checked and not (name in _DISTRIBUTED and checked[name] is None):
                checked[name] = parse_count(name, checked[name], least)
        for name in _FLAGS:
            if name in checked:
                checked[name] = parse_flag(name, checked[name])
        if call == "pytorch":  # torch.distributed's rank and world size unless given
            checked.setdefault("rank", None)
            checked.setdefault("world_size", None)
        check_transform(checked.get("transform"))
        # The cache's options, checked at the user's call (the folder itself is made when first written).
        if checked.get("cache_dir") is not None:
            checked["cache_dir"] = cache_folder(checked["cache_dir"])
        if checked.get("cache_size") is not None:
            checked["cache_size"] = parse_size("cache_size", checked["cache_size"])
        if checked.get("shuffle_block") and not checked.get("shuffle"):
            raise InvalidArgumentError(
                f"shuffle_block={checked['shuffle_block']} shuffles blocks of samples, so it needs "
                "shuffle=True. Pass shuffle=True, or leave shuffle_block out."
            )
        return cls(**checked)

    def cache(self, handle: tuple[str, int] | None) -> tuple[str, int] | None:
        """The disk cache a run reads through, as its folder and bound: these options over the handle's
        (``handle``; a `lakecompute.datasets.Snapshot`'s ``cache``)."""
        if self.cache_dir is None and self.cache_size is None:
            return handle
        inherit = None if handle is None else CacheSpec(*handle)
        spec = cache_spec(self.cache_dir, self.cache_size, inherit=inherit)
        return None if spec is None else (spec.directory, spec.max_bytes)

    def plan(self, length: int) -> IndexPlan:
        """The index plan of a run over ``length`` samples.

        Raises:
            InvalidTypeError: ``rank`` or ``world_size`` is still None (only ``pytorch()`` fills them in).
            InvalidArgumentError: ``rank >= world_size``, or ``start_from_step`` past the epoch's end.
        """
        world_size = parse_count("world_size", self.world_size, LEAST["world_size"])
        rank = parse_count("rank", self.rank, LEAST["rank"])
        return IndexPlan(
            length,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            shuffle_block=self.shuffle_block,
            seed=self.seed,
            epoch=self.epoch,
            drop_last=self.drop_last,
            rank=rank,
            world_size=world_size,
            start_from_step=self.start_from_step,
            num_workers=self.num_workers,
        )
