"""``transform=``: what runs on each batch in the loader workers, after reading.

Two kinds are accepted:

- a compute function or pipeline (``@lc.compute``): the same code users run offline with ``eval``,
  run on each sample of the batch through the engine's `SampleRunner`, with
  the seeded ``rng`` it derives from ``(seed, index)`` and the loader's key ``(epoch,)``. A sample may
  give 0, 1 or many output rows; the batch is made of all of them, in order.
- any other callable: called on the batch dict, returning the new batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lakecompute.compute import ComputeFunction, Pipeline, RowMeta
from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.htypes import stacked

__all__ = ["BatchTransform", "check_transform", "collate_rows"]


def check_transform(transform: Any) -> None:
    """Refuse a ``transform=`` that is neither a compute function, a pipeline nor a callable."""
    if transform is None or isinstance(transform, (ComputeFunction, Pipeline)) or callable(transform):
        return
    raise InvalidTypeError(
        "Expected transform= to be a compute function or pipeline (@lc.compute), or a callable taking "
        f"and returning a batch dict. Got {type(transform).__name__}: {transform!r:.80}."
    )


def _stack(values: list[Any]) -> np.ndarray | list[Any]:
    """One array when the values are numbers or arrays of one shape (`stacked`), else the list itself."""
    out = stacked(values)
    return values if out is None else out


def collate_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows (dicts of one sample's values) as a batch dict: stacked arrays, or lists when ragged."""
    if not rows:
        return {}
    names = list(rows[0])
    for j, row in enumerate(rows):
        if list(row) != names:
            raise InvalidArgumentError(
                f"Every output row of a transform must have the same tensors: row 0 has {names!r}, "
                f"row {j} has {list(row)!r}. Write the same tensors for every sample."
            )
    return {name: _stack([row[name] for row in rows]) for name in names}


def _sample(batch: dict[str, Any], j: int) -> dict[str, Any]:
    return {name: values[j] for name, values in batch.items()}


class BatchTransform:
    """Applies ``transform=`` to batches in one worker (a compute function's runner is built on first use).

    Attributes:
        transform: what the user passed (None: batches are passed through).
        seed: the loader's seed, from which per-sample generators are derived.
        epoch: the epoch, the key that makes every epoch's draws differ.
        meta: the tensors read (htype and info by name), which a compute function's ``sample_in``
            values answer.
    """

    def __init__(self, transform: Any, seed: int, epoch: int, meta: RowMeta = ()) -> None:
        self.transform = transform
        self.seed = seed
        self.epoch = epoch
        self.meta = meta
        self._runner: Any = None

    def __call__(self, batch: dict[str, Any], indices: np.ndarray) -> dict[str, Any]:
        if self.transform is None:
            return batch
        if not isinstance(self.transform, (ComputeFunction, Pipeline)):
            out = self.transform(batch)
            if not isinstance(out, dict):
                raise InvalidTypeError(
                    f"A transform callable must return the batch as a dict. Got {type(out).__name__}."
                )
            return out
        if self._runner is None:
            # Built here, in the worker, on first use: a class-based function's __init__ (a model
            # loading) runs once per loader worker and never in the caller.
            # The engine's per-sample runner (issue 11, item 1): the same code and rng as eval.
            from lakecompute.compute import SampleRunner

            self._runner = SampleRunner(self.transform, seed=self.seed)
        rows: list[dict[str, Any]] = []
        for j, index in enumerate(indices.tolist()):
            rows.extend(self._runner.run(_sample(batch, j), index, key=(self.epoch,), meta=self.meta))
        return collate_rows(rows)
