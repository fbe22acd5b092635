"""Adapters over everything ``eval`` accepts as ``data_in``.

A source is described in the parent and read in the workers: dataset input travels as a location,
a version and positions (never as data); sequences are inherited by forked workers or pickled once
per worker; only length-less iterables send their items with each task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from lakecompute.compute._samples import column_row_class, row_class
from lakecompute.datasets import Dataset, DatasetView
from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.storage import BackendSpec, open_backend, read_manifest

__all__ = ["DatasetSource", "IterableSource", "SequenceSource", "Source", "make_source"]


class Source:
    """Base of the input adapters."""

    #: Number of samples, or None for a streamed iterable.
    length: int | None = None
    #: Tensor names of dataset input (for preflight), else None.
    tensor_names: list[str] | None = None

    def read(self, start: int, stop: int, batch: bool) -> list[Any]:
        """Samples ``start..stop`` as ``sample_in`` objects (or one batch object if ``batch``)."""
        raise NotImplementedError

    def sample(self, index: int) -> Any:
        """The input sample at ``index``, as users see it (for errors)."""
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        """What identifies this input for resuming (location and version, or content)."""
        raise NotImplementedError


class DatasetSource(Source):
    """Dataset or view input: workers open the same committed version and read their range."""

    def __init__(self, data_in: Dataset | DatasetView, pad: bool) -> None:
        base = data_in._base_ds()
        if base._dirty or any(base._session.pending(n) for n in base._head.tensors):
            raise InvalidArgumentError(
                f"data_in {base.path!r} has uncommitted changes. Commit them first (leave the `with` block "
                "or call ds.commit()), so the workers read what you see."
            )
        self.spec: BackendSpec = base._backend.spec
        self.version = base.version
        self.tensor_names: list[str] = list(base._head.tensors)
        full = base.max_len if pad else len(base)
        self.positions: range | np.ndarray = (
            data_in.positions if isinstance(data_in, DatasetView) else range(full)
        )
        self.length = len(self.positions)
        self.pad = pad
        self.lengths = {n: base._head.tensors[n].length for n in self.tensor_names}
        self._ds: Dataset | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ds"] = None  # reopened in each worker: open handles do not travel
        return state

    def dataset(self) -> Dataset:
        if self._ds is None:
            backend = open_backend(self.spec.url, self.spec.storage_options)
            self._ds = Dataset(backend, read_manifest(backend, self.version), read_only=True, pinned=True)
        return self._ds

    def _column(self, ds: Dataset, name: str, pos: range | np.ndarray) -> list[Any] | np.ndarray:
        reader = ds._reader(name)
        n = self.lengths[name]
        if isinstance(pos, range) and pos.step == 1 and pos.stop <= n:
            return reader.read_range(pos.start, pos.stop) if len(pos) else []
        ndim = ds._head.tensors[name].ndim or 0
        out: list[Any] = []
        for p in (int(x) for x in pos):
            out.append(
                reader.read_one(p) if p < n else np.zeros((0,) * max(ndim, 1), dtype=reader.dtype or "uint8")
            )
        return out

    def read(self, start: int, stop: int, batch: bool) -> list[Any]:
        ds = self.dataset()
        pos = self.positions[start:stop]
        columns = {name: self._column(ds, name, pos) for name in self.tensor_names or []}
        if batch:
            return [row_class(tuple(columns))(columns, start)]
        # One row per sample, holding the columns and its position: no dict per sample.
        row = column_row_class(tuple(columns))
        return [row(columns, j, start + j) for j in range(stop - start)]

    def sample(self, index: int) -> Any:
        (row,) = self.read(index, index + 1, batch=False)
        return row

    def identity(self) -> dict[str, Any]:
        pos = self.positions
        where = [pos.start, pos.stop, pos.step] if isinstance(pos, range) else np.asarray(pos).tolist()
        return {
            "kind": "dataset",
            "path": self.spec.url,
            "version": self.version,
            "positions": where,
            "pad": self.pad,
        }


class SequenceSource(Source):
    """A list, tuple, range, numpy array, or anything with ``__len__`` and ``__getitem__``."""

    def __init__(self, data: Sequence[Any]) -> None:
        self.data = data
        self.length = len(data)

    def read(self, start: int, stop: int, batch: bool) -> list[Any]:
        data = self.data
        if isinstance(data, (np.ndarray, list, tuple, range)):
            block: Any = data[start:stop]
        else:
            block = [data[i] for i in range(start, stop)]
        if batch:
            return [block]
        return list(block)

    def sample(self, index: int) -> Any:
        return self.data[index]

    def identity(self) -> dict[str, Any]:
        from lakecompute.compute._fingerprint import fingerprint_value

        return {"kind": "sequence", "content": fingerprint_value(self.data, "data_in")}


class IterableSource(Source):
    """An iterable without a length: the parent pulls items and sends them with each task."""

    def __init__(self, data: Iterable[Any]) -> None:
        self.data = data
        self.length = None

    def chunks(self, size: int) -> Iterator[list[Any]]:
        chunk: list[Any] = []
        for item in self.data:
            chunk.append(item)
            if len(chunk) >= size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def sample(self, index: int) -> Any:
        return None

    def identity(self) -> dict[str, Any]:
        from lakecompute.errors import FingerprintError

        raise FingerprintError(
            f"Cannot fingerprint data_in of type {type(self.data).__name__}: a stream without a length "
            "cannot be resumed, so checkpoint_interval needs a dataset or a sequence. Pass list(data_in), "
            "or run without checkpoint_interval."
        )


def make_source(data_in: Any, pad: bool) -> Source:
    """Choose the adapter for ``data_in``."""
    if isinstance(data_in, (Dataset, DatasetView)):
        return DatasetSource(data_in, pad)
    if pad:
        raise InvalidArgumentError("pad_data_in=True is only for dataset input; data_in is not a dataset.")
    if isinstance(data_in, (str, bytes, dict)):
        raise InvalidTypeError(
            f"data_in must be a dataset, a sequence or an iterable of samples. Got {type(data_in).__name__}; "
            "wrap a single sample in a list."
        )
    if hasattr(data_in, "__len__") and hasattr(data_in, "__getitem__"):
        return SequenceSource(data_in)
    if isinstance(data_in, Iterable):
        return IterableSource(data_in)
    raise InvalidTypeError(
        "data_in must be a dataset, a sequence (with len and indexing) or an iterable. "
        f"Got {type(data_in).__name__}."
    )
