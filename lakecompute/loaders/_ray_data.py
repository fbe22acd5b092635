"""A committed version of a dataset (or view) as a Ray Data dataset: ``ds.to_ray()``.

The Ray dataset is planned, not copied: one small item per range of rows, and a ``map_batches``
step that reads each range where Ray runs it, through the loaders' row source (the same checked
reader, decoding in the worker). So a cluster reads the data in parallel straight from storage,
and the driver never holds it. Ray is imported only here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.loaders._firstuse import collected_after
from lakecompute.loaders._sources import RowSource
from lakecompute.parsing import parse_count

if TYPE_CHECKING:
    import ray.data

__all__ = ["ROWS_PER_BLOCK", "to_ray"]

#: Rows each Ray Data block reads by default: large enough that opening the dataset in a task is
#: cheap beside the reading, small enough to spread a dataset of a few thousand rows over a cluster.
ROWS_PER_BLOCK = 1024


class _ReadRanges:
    """The ``map_batches`` step: reads each ``[start, stop)`` range of the source's rows."""

    def __init__(self, source: RowSource) -> None:
        self.source = source
        self._reader: Any = None

    def __call__(self, ranges: dict[str, np.ndarray]) -> dict[str, Any]:
        if self._reader is None:  # opened once per Ray worker process that runs this step
            self._reader = self.source.open()
        parts = [
            self._reader.read_batch(np.arange(start, stop, dtype=np.int64))
            for start, stop in zip(ranges["start"].tolist(), ranges["stop"].tolist(), strict=True)
        ]
        return {name: _column([p[name] for p in parts]) for name in self.source.tensors}


def _column(parts: list[Any]) -> np.ndarray:
    """One column of a block: stacked when every part is an array of one sample shape; else an object
    array holding one value per row (ragged samples, text, json)."""
    if all(isinstance(p, np.ndarray) for p in parts) and len({p.shape[1:] for p in parts}) == 1:
        return np.concatenate(parts)
    values = [v for part in parts for v in part]
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def to_ray(source: RowSource, rows_per_block: int = ROWS_PER_BLOCK) -> ray.data.Dataset:
    """A Ray Data dataset of ``source``'s rows, in order: one column per tensor.

    Raises:
        InvalidArgumentError: ``rows_per_block`` is less than 1.
    """
    import ray.data

    rows_per_block = parse_count("rows_per_block", rows_per_block, 1)
    n = source.length
    ranges = [{"start": s, "stop": min(s + rows_per_block, n)} for s in range(0, n, rows_per_block)]
    with collected_after(ray.is_initialized):  # Ray Data's first use starts a local Ray
        if not ranges:
            return ray.data.from_items([])
        planned = ray.data.from_items(ranges, override_num_blocks=len(ranges))
    # Rows in the dataset's order (Ray Data otherwise yields blocks as they finish); the derived
    # datasets a user builds on it inherit the setting.
    planned.context.execution_options.preserve_order = True
    # A damaged chunk raises DatasetCorruptError in the reading task. Ray Data would wrap it in a
    # UserCodeException whose __cause__ is lost on its way to the driver; raised as itself, it reaches
    # the consumer as RayTaskError(DatasetCorruptError), which ``except lc.DatasetCorruptError`` catches.
    if hasattr(planned.context, "raise_original_map_exception"):
        planned.context.raise_original_map_exception = True
    return planned.map_batches(_ReadRanges(source), batch_size=1, batch_format="numpy")
