"""What a loader reads: rows of a dataset (or view), or fixed windows over a token stream.

A source is described in the caller and opened in each worker (`Source.open`): it carries a
`Snapshot` (location, version, positions), never data, so a worker
process opens its own store client (STORAGE-NOTES "Processes") and decodes its own chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from lakecompute.compute import tensor_meta
from lakecompute.datasets import RowReader, Snapshot, StreamReader
from lakecompute.storage import LOADER_CACHE_BYTES

__all__ = ["BatchReader", "RowSource", "Source", "TokenSource"]


class BatchReader(Protocol):
    """An opened source: reads the samples at some source indices as one batch dict."""

    def read_batch(self, indices: np.ndarray) -> dict[str, Any]: ...

    def read_span(self, lo: int, hi: int) -> dict[str, Any]:
        """`read_batch` of the indices ``lo .. hi - 1``."""
        ...


class Source(Protocol):
    """A source as described in the caller: its length, where it lives, and how to open it."""

    @property
    def length(self) -> int: ...

    @property
    def snapshot(self) -> Snapshot: ...

    def open(self) -> BatchReader: ...


def _dataset_positions(positions: range | np.ndarray, indices: np.ndarray) -> np.ndarray:
    if isinstance(positions, range):
        return np.asarray(positions.start + indices * positions.step, dtype=np.int64)
    selected: np.ndarray = np.asarray(positions, dtype=np.int64)[indices]
    return selected


@dataclass(frozen=True, slots=True)
class RowSource:
    """Rows of a dataset or view: batch ``{tensor: values}``, index ``i`` is the view's ``i``-th sample.

    Attributes:
        snapshot: the dataset version and the view's positions.
        tensors: the tensors read.
        labels: those of them that are class labels (their values arrive as int64), known where the
            source is described (opening the version again to learn them costs a store client and a
            manifest read: on S3, two requests).
    """

    snapshot: Snapshot
    tensors: tuple[str, ...]
    labels: tuple[str, ...] = ()

    @property
    def length(self) -> int:
        return len(self.snapshot)

    def open(self) -> _RowBatches:
        return _RowBatches(self.snapshot, self.tensors)


class _RowBatches:
    def __init__(self, snapshot: Snapshot, tensors: Sequence[str]) -> None:
        self._snapshot = snapshot
        self._positions = snapshot.positions
        ds = snapshot.open(LOADER_CACHE_BYTES)
        self.reader = RowReader(ds, tensors)
        #: The tensors' htypes and infos, which a transform's ``sample_in`` values answer.
        self.meta = tensor_meta(ds, tensors)

    def _kept(self, batch: dict[str, Any], rows: range | np.ndarray) -> dict[str, Any]:
        """The batch holding only the objects a ``filter_labels`` view keeps."""
        snap = self._snapshot
        return batch if snap.objects is None else {n: snap.kept(n, rows, v) for n, v in batch.items()}

    def read_batch(self, indices: np.ndarray) -> dict[str, Any]:
        batch = self.reader.read_rows(_dataset_positions(self._positions, indices))
        return self._kept(batch, indices)

    def read_span(self, lo: int, hi: int) -> dict[str, Any]:
        positions = self._positions
        if isinstance(positions, range) and positions.step == 1:  # a run of the dataset: no array made
            return self._kept(
                self.reader.read_span(positions.start + lo, positions.start + hi), range(lo, hi)
            )
        return self.read_batch(np.arange(lo, hi, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class TokenSource:
    """Fixed windows over the concatenated samples of a 1-D tensor (seed 003).

    Block ``i`` is ``x = stream[i * seq_len : (i + 1) * seq_len]`` and, with ``next_token``, the
    labels ``y`` are the same window one value later. Batches are ``{"x": (n, seq_len)}`` plus ``"y"``.

    Attributes:
        snapshot: the dataset version.
        tensor: the tensor whose samples form the stream.
        seq_len: values per block.
        next_token: whether blocks carry next-value labels ``y`` (then each needs ``seq_len + 1``
            values, so the last value of the stream is never an input).
        num_values: values in the stream.
        array_path: the typed zarr array holding the whole stream, if it is one (after compact()).
    """

    snapshot: Snapshot
    tensor: str
    seq_len: int
    next_token: bool
    num_values: int
    array_path: str | None = None

    @property
    def length(self) -> int:
        usable = self.num_values - 1 if self.next_token else self.num_values
        return max(0, usable) // self.seq_len

    def open(self) -> _TokenBatches:
        return _TokenBatches(self)


class _TokenBatches:
    def __init__(self, source: TokenSource) -> None:
        self.source = source
        self.reader = StreamReader(source.snapshot.open(LOADER_CACHE_BYTES), source.tensor)

    def read_batch(self, indices: np.ndarray) -> dict[str, Any]:
        n = self.source.seq_len
        width = n + 1 if self.source.next_token else n
        windows = self.reader.windows(np.asarray(indices, dtype=np.int64) * n, width)
        if not self.source.next_token:
            return {"x": windows}
        return {"x": np.ascontiguousarray(windows[:, :n]), "y": np.ascontiguousarray(windows[:, 1:])}

    def read_span(self, lo: int, hi: int) -> dict[str, Any]:
        return self.read_batch(np.arange(lo, hi, dtype=np.int64))
