"""Loaders: training from a dataset (``ds.batches()``, ``ds.pytorch()``, ``ds.tokens.blocks()``).

This package sits above `lakecompute.datasets` and `lakecompute.compute`; the dataset layer
reaches it only through lazy imports inside ``Dataset.batches``, ``Dataset.pytorch`` and
``Tensor.blocks``. torch is imported only by `pytorch` (``pip install torch``).

The pieces: `LoaderOptions` (the options of a call, checked once there and passed down whole),
`IndexPlan` (pure arithmetic: permutation, samples dealt to ranks then to loader
workers, each worker's batches, the steps' order, resume), chunk-aware reading
(`lakecompute.datasets.RowReader`), worker processes (the processed scheduler's, at most
``num_workers * prefetch`` batches ahead), the torch adapter, and `TokenBlocks`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakecompute.datasets import Dataset, DatasetView, StreamReader, snapshot
from lakecompute.errors import InvalidArgumentError, InvalidTypeError, TensorDoesNotExistError
from lakecompute.loaders._blocks import TokenBlocks
from lakecompute.loaders._firstuse import collected_after
from lakecompute.loaders._loader import Batches
from lakecompute.loaders._options import LoaderKwargs, LoaderOptions, TorchLoaderKwargs
from lakecompute.loaders._plan import IndexPlan
from lakecompute.loaders._sources import RowSource, TokenSource
from lakecompute.loaders._state import LoaderCursor
from lakecompute.optional import require
from lakecompute.parsing import parse_count
from lakecompute.specs import htype_declaration

if TYPE_CHECKING:
    import ray.data

    from lakecompute.loaders._torch import LakeDataLoader

__all__ = [
    "Batches",
    "IndexPlan",
    "LakeDataLoader",
    "LoaderCursor",
    "LoaderKwargs",
    "LoaderOptions",
    "TokenBlocks",
    "TorchLoaderKwargs",
    "batches",
    "blocks",
    "make_batches",
    "make_dataloader",
    "pytorch",
    "to_ray",
]


def __getattr__(name: str) -> object:
    """``LakeDataLoader``, imported on first use (it imports torch; ``import lakecompute`` never does)."""
    if name == "LakeDataLoader":
        from lakecompute.loaders._torch import LakeDataLoader

        return LakeDataLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _tensor_names(known: Sequence[str], tensors: str | Sequence[str] | None) -> tuple[str, ...]:
    if tensors is None:
        return tuple(known)
    if isinstance(tensors, str):
        tensors = [tensors]
    if not isinstance(tensors, Sequence):
        raise InvalidTypeError(f"Expected tensors= to be a name or a list of names. Got {tensors!r}.")
    names = list(tensors)
    for name in names:
        if not isinstance(name, str):
            raise InvalidTypeError(f"Expected tensors= to be tensor names. Got {name!r}.")
        if name not in known:
            raise TensorDoesNotExistError(name, list(known))
    if not names:
        raise InvalidArgumentError("tensors= is empty. Name at least one tensor, or pass None for all.")
    return tuple(names)


def _check_workers(source: RowSource | TokenSource, options: LoaderOptions) -> None:
    if options.num_workers and not source.snapshot.shared_between_processes and not _can_fork():
        raise InvalidArgumentError(
            f"{source.snapshot.url!r} lives in this process's memory, which loader workers started "
            "without fork cannot read. Use a local path, or num_workers=0."
        )


def _can_fork() -> bool:
    return sys.platform.startswith("linux")


def _with_cache(source: RowSource | TokenSource, options: LoaderOptions) -> RowSource | TokenSource:
    """``source`` read through the disk cache its options ask for (``cache_dir``, ``cache_size``: over
    the handle's)."""
    cache = options.cache(source.snapshot.cache)
    if cache == source.snapshot.cache:
        return source
    return dataclasses.replace(source, snapshot=dataclasses.replace(source.snapshot, cache=cache))


def make_batches(source: RowSource | TokenSource, options: LoaderOptions) -> Batches:
    """A batch loader over any source (what `batches` and ``TokenBlocks.batches`` build)."""
    source = _with_cache(source, options)
    _check_workers(source, options)
    options.plan(source.length)  # rank and world_size are ints here (only pytorch() reads torch.distributed)
    return Batches(source, options, _class_labels(source))


def _import_torch() -> None:
    with collected_after(lambda: "torch" in sys.modules):
        require(
            "torch",
            "pytorch()",
            'pip install torch (from a lakecompute checkout: pip install -e ".[torch]")',
            instead="or use batches() for numpy batches.",
        )


def _class_labels(source: RowSource | TokenSource) -> tuple[str, ...]:
    """The class_label tensors a source reads (their values arrive as int64)."""
    return source.labels if isinstance(source, RowSource) else ()


def make_dataloader(source: RowSource | TokenSource, options: LoaderOptions) -> LakeDataLoader:
    """A torch DataLoader over any source (what `pytorch` and ``TokenBlocks.pytorch`` build).

    ``rank`` and ``world_size`` left None are read from torch.distributed when each pass starts.
    """
    _import_torch()
    from lakecompute.loaders._torch import make_dataloader as torch_loader

    source = _with_cache(source, options)
    _check_workers(source, options)
    return torch_loader(LoaderCursor(source, options), _class_labels(source))


def _rows(data: Dataset | DatasetView, tensors: str | Sequence[str] | None) -> RowSource:
    snap = snapshot(data)
    names = _tensor_names(snap.tensors, tensors)
    labels = tuple(name for name in names if htype_declaration(data[name].htype).labels)
    return RowSource(snap, names, labels)


def batches(
    data: Dataset | DatasetView, tensors: str | Sequence[str] | None, options: LoaderOptions
) -> Batches:
    """Batches of a dataset or view as dicts of numpy arrays; see `lakecompute.Dataset.batches`."""
    return make_batches(_rows(data, tensors), options)


def pytorch(
    data: Dataset | DatasetView, tensors: str | Sequence[str] | None, options: LoaderOptions
) -> LakeDataLoader:
    """A torch DataLoader over a dataset or view; see `lakecompute.Dataset.pytorch`."""
    return make_dataloader(_rows(data, tensors), options)


def to_ray(
    data: Dataset | DatasetView, tensors: str | Sequence[str] | None, rows_per_block: int
) -> ray.data.Dataset:
    """A committed version of a dataset or view as a Ray Data dataset; see `lakecompute.Dataset.to_ray`."""
    require("ray.data", "to_ray()", 'pip install "ray[data]"')
    from lakecompute.loaders._ray_data import to_ray as ray_dataset

    source = _rows(data, tensors)
    if not source.snapshot.shared_between_processes:
        raise InvalidArgumentError(
            f"{source.snapshot.url!r} lives in this process's memory, which Ray workers cannot read. "
            "Use a local path (one machine) or s3:// (a cluster)."
        )
    return ray_dataset(source, rows_per_block)


def blocks(data: Dataset, tensor: str, seq_len: int, next_token: bool = True) -> TokenBlocks:
    """Token blocks over tensor ``tensor`` of ``data``; see `lakecompute.Tensor.blocks`.

    Raises:
        InvalidTypeError: the tensor does not hold 1-D integer samples.
        InvalidArgumentError: ``seq_len`` is less than 1.
    """
    seq_len = parse_count("seq_len", seq_len, 1)
    t = data[tensor]
    if t.dtype is not None and (t.dtype.kind not in "iu" or t.ndim not in (None, 1)):
        raise InvalidTypeError(
            f"blocks() reads a tensor of 1-D integer samples (token ids); {tensor!r} has dtype "
            f"{t.dtype} and {t.ndim} dimensions per sample."
        )
    snap = snapshot(data)
    stream = StreamReader(snap.open(), tensor)
    source = TokenSource(snap, tensor, seq_len, bool(next_token), stream.length, stream.array_path)
    return TokenBlocks(source)
