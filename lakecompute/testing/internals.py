"""What tests see of a dataset's internals: its core, through one documented door.

Tests that check how data is stored (which fragments a tensor is made of, what a segment holds,
how a writer's lease behaves) need more than the public API. They get it here, by public names,
rather than by reading the handle's private attributes, so that the package can rearrange its
internals and the tests say in one place what they rely on.

Example:
    >>> import numpy as np
    >>> from lakecompute.testing.internals import dataset_core
    >>> ds = lc.empty("mem://internals-doc", overwrite=True)
    >>> _ = ds.create_tensor("x", dtype="int16")
    >>> ds.x.extend(np.arange(4))
    >>> core = dataset_core(ds)
    >>> [f.n for f in core.txn.head.tensors["x"].fragments]
    [4]
"""

from __future__ import annotations

import json
import os
from typing import Any

from lakecompute.datasets import Dataset, DatasetCore, DatasetView, Row, Tensor, TensorView, core_of
from lakecompute.storage import open_backend
from lakecompute.versioned import Table

__all__ = ["DatasetCore", "dataset_core", "whole_manifest"]


def dataset_core(data: Dataset | DatasetView | Row | Tensor | TensorView) -> DatasetCore:
    """The core of a dataset handle (or of the handle a view, row or tensor belongs to): its table and
    backend (``core.table``, ``core.backend``), chunk cache (``core.cache``), write transaction
    (``core.txn``: the committed ``base``, the working ``head``, the writer with its lease,
    ``txn.writer.lease``) and column readers (``core.reader(name)``).

    For tests only: what it returns is internal and changes with the package.
    """
    return core_of(data)


def whole_manifest(path: str | os.PathLike[str], version: int) -> dict[str, Any]:
    """Version ``version`` of the dataset at ``path`` as the JSON of its manifest stored whole (format
    ``lakecompute/1``: ``tensors`` with their fragments, ``evals``, ``info``, the history fields), however
    it is stored (a large version may be compressed, or stored as the change from its parent).

    For tests only.
    """
    body: dict[str, Any] = json.loads(Table(open_backend(path)).manifest(version).to_bytes())
    return body
