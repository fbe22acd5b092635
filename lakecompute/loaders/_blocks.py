"""Token blocks (seed 003): fixed windows over a token tensor's concatenated stream.

Tokenize once into a tensor of 1-D samples (one per document); read it as one flat stream cut into
blocks of any length, without tokenizing again and without holding the stream in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lakecompute.errors import InvalidTypeError, SampleIndexError
from lakecompute.loaders._options import LoaderOptions
from lakecompute.loaders._sources import TokenSource, _TokenBatches

if TYPE_CHECKING:
    from typing import Unpack

    from lakecompute.loaders import LakeDataLoader
    from lakecompute.loaders._loader import Batches
    from lakecompute.loaders._options import LoaderKwargs, TorchLoaderKwargs

__all__ = ["TokenBlocks"]


class TokenBlocks:
    """Fixed windows of ``seq_len`` values over the concatenated samples of a 1-D integer tensor.

    Block ``i`` is ``x = stream[i * seq_len : (i + 1) * seq_len]``; with ``next_token`` its labels are
    ``y = stream[i * seq_len + 1 : (i + 1) * seq_len + 1]`` (the next value of each). ``len()`` is the
    number of whole blocks: ``(num_values - 1) // seq_len`` with ``next_token``, else
    ``num_values // seq_len``. Get one with ``ds.tokens.blocks(seq_len)``.

    Example:
        >>> import numpy as np
        >>> ds = lc.empty("mem://blocks-doc", overwrite=True)
        >>> _ = ds.create_tensor("tokens", dtype="int32")
        >>> ds.tokens.extend([np.arange(5), np.arange(10, 17)])
        >>> blocks = ds.tokens.blocks(4)
        >>> len(blocks), [a.tolist() for a in blocks[1]]
        (2, [[4, 10, 11, 12], [10, 11, 12, 13]])
    """

    def __init__(self, source: TokenSource) -> None:
        self.source = source
        self._reader: _TokenBatches | None = None

    @property
    def seq_len(self) -> int:
        """Values per block."""
        return self.source.seq_len

    @property
    def next_token(self) -> bool:
        """Whether each block comes with next-value labels ``y``."""
        return self.source.next_token

    @property
    def num_values(self) -> int:
        """Values (tokens) in the whole stream."""
        return self.source.num_values

    @property
    def zarr_path(self) -> str | None:
        """The path, inside the dataset, of the typed zarr array that holds the whole stream.

        Set once the tensor is compacted (``ds.compact()``): then
        ``zarr.open_array(f"{ds.path}/{blocks.zarr_path}")[:]`` is the stream with plain zarr. None
        before: the stream is spread over runs of bytes in shared segments.
        """
        return self.source.array_path

    def __len__(self) -> int:
        return self.source.length

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
        """Block ``i``: ``(x, y)`` with ``next_token``, else ``x``; reads only the chunks that cover it.

        Raises:
            SampleIndexError: ``i`` is out of range.
            InvalidTypeError: ``i`` is not an int.
        """
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise InvalidTypeError(f"Token blocks are indexed by an int. Got {type(i).__name__}: {i!r}.")
        n = len(self)
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise SampleIndexError(f"Block {i} is out of range for {n} blocks of {self.seq_len} values.")
        if self._reader is None:
            self._reader = self.source.open()
        batch = self._reader.read_batch(np.array([j], dtype=np.int64))
        if self.next_token:
            return batch["x"][0], batch["y"][0]
        x: np.ndarray = batch["x"][0]
        return x

    def batches(self, batch_size: int, **options: Unpack[LoaderKwargs]) -> Batches:
        """Batches ``{"x": (n, seq_len), "y": (n, seq_len)}`` of blocks, with the options of
        `lakecompute.Dataset.batches` (sharding, resume, transform, workers).

        Args:
            batch_size: blocks per batch.
            **options: the options of `lakecompute.loaders.LoaderKwargs`, by keyword.
        """
        from lakecompute.loaders import make_batches

        return make_batches(self.source, LoaderOptions.parse("batches", batch_size, options))

    def pytorch(self, batch_size: int, **options: Unpack[TorchLoaderKwargs]) -> LakeDataLoader:
        """A torch DataLoader of block batches, with the options of `lakecompute.Dataset.pytorch`.

        Args:
            batch_size: blocks per batch.
            **options: the options of `lakecompute.loaders.TorchLoaderKwargs`, by keyword.
        """
        from lakecompute.loaders import make_dataloader

        return make_dataloader(self.source, LoaderOptions.parse("pytorch", batch_size, options))

    def __repr__(self) -> str:
        return (
            f"TokenBlocks(tensor={self.source.tensor!r}, seq_len={self.seq_len}, "
            f"next_token={self.next_token}, blocks={len(self)}, values={self.num_values})"
        )
