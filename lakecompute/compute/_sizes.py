"""About how many bytes a value holds: what sizes a block of input, a drain of outputs and a streamed
task's items within a worker's budget (`lakecompute.compute._budget.WorkerBudget`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lakecompute.compute._deferred import Deferred
from lakecompute.compute._samples import SAMPLE_ROWS
from lakecompute.htypes import is_tensor

__all__ = ["estimate_bytes"]


def estimate_bytes(value: Any) -> int:
    """About how many bytes ``value`` holds (arrays, bytes and strings exactly; containers sampled)."""
    if isinstance(value, np.ndarray) or is_tensor(value):  # a tensor: a batch decoded on a GPU
        return int(value.nbytes)
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, Deferred):  # a tensor not read yet: from its stored shapes
        return value.nbytes()
    nbytes = getattr(value, "nbytes", None)  # an object that says what it holds (a table's image bytes)
    if isinstance(nbytes, int):
        return nbytes
    return _container_bytes(value)


def _container_bytes(value: Any) -> int:
    """`estimate_bytes` of a row, a dict, a list or tuple (sampled), or something else (64)."""
    if isinstance(value, SAMPLE_ROWS):  # a row: its values as held (reading none that is deferred)
        return sum(estimate_bytes(v.held()) for v in value.tensors.values())
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return sum(estimate_bytes(v) for v in to_dict().values())
    if isinstance(value, dict):
        return sum(estimate_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        head = value[:16]
        return sum(estimate_bytes(v) for v in head) * max(1, len(value)) // max(1, len(head))
    return 64
