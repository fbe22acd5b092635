"""Reading blocks of columns: how the transform engine reads its input from a dataset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.datasets._core import core_of
from lakecompute.errors import DatasetCorruptError

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset

__all__ = ["open_columns", "pad_value", "read_columns"]


def pad_value(ds: Dataset, name: str) -> Any:
    """What stands in for a missing sample of tensor ``name`` when shorter tensors are padded
    (``eval(pad_data_in=True)``): its htype's declared pad (`lakecompute.specs.HType.pad`) — an empty
    array of the tensor's rank and dtype, zero for a tensor of scalars (a label, a number), so that the
    value can be stored again; ``""`` for text, None for json, no objects for polygons."""
    state = core_of(ds).state(name)
    spec = state.spec
    dtype = np.dtype(spec.dtype if spec.declaration.numeric and spec.dtype else "float64")
    return spec.declaration.pad(dtype, state.ndim or 0)


def read_columns(
    ds: Dataset, names: Sequence[str], positions: range | np.ndarray, pad: bool = False
) -> dict[str, np.ndarray | list[Any]]:
    """The samples at ``positions`` of each tensor in ``names``: one stacked array per tensor when its
    samples come from uniform fragments of one shape, else a list of values.

    Contiguous ranges are read in a few large reads (whole chunks, decoded once). With ``pad``,
    positions past a tensor's end give its `pad_value`.
    """
    return {name: _column(ds, name, positions, pad) for name in names}


def _column(ds: Dataset, name: str, pos: range | np.ndarray, pad: bool) -> np.ndarray | list[Any]:
    reader = core_of(ds).reader(name)
    n = reader.length
    if isinstance(pos, range) and pos.step == 1 and pos.stop <= n:
        return reader.read_range(pos.start, pos.stop) if len(pos) else []
    positions = np.asarray(pos, dtype=np.int64)
    if not len(positions) or int(positions.max()) < n:
        return reader.read_at(positions, stack="fragments")  # any order: each chunk decoded once
    filler = pad_value(ds, name) if pad else None
    return [reader.read_one(p) if p < n else filler for p in (int(x) for x in pos)]


def open_columns(ds: Dataset, names: Sequence[str], position: int) -> None:
    """Open ahead what reading sample ``position`` of each tensor in ``names`` starts with: its arrays,
    checked, and how their chunks are read (a layout's verdict, decided once per process), reading no
    chunk (`ColumnReader.prepare`). A warm-up: damage found here is left to the read that needs the data,
    which reports it naming the samples it reads."""
    core = core_of(ds)
    for name in names:
        try:
            core.reader(name).prepare(position)
        except DatasetCorruptError:
            continue  # the read of these samples raises it again, where it is the read's error
