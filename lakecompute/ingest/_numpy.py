"""`from_numpy`: a dataset from a dict of arrays, in one commit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.datasets import empty
from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.ingest._files import PathLike
from lakecompute.specs import parse_htype

if TYPE_CHECKING:
    from lakecompute.datasets import Dataset

__all__ = ["from_numpy"]


def from_numpy(
    path: PathLike,
    arrays: Mapping[str, Any],
    *,
    htypes: Mapping[str, str] | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Dataset:
    """Make a dataset with one tensor per array; the first axis of each array indexes samples.

    Args:
        path: where to create the dataset.
        arrays: tensor name -> a numpy array (or a list of per-sample arrays, which may differ in
            shape). Every entry must have the same number of samples. String arrays become ``text``
            tensors.
        htypes: tensor name -> htype for tensors that are not ``generic`` (e.g. ``{"images": "image"}``).
        overwrite: replace a dataset already at ``path``.
        storage_options: passed to the object store for ``s3://`` paths.

    Returns:
        The new dataset, with everything in one commit.

    Raises:
        InvalidArgumentError: the arrays have different numbers of samples, or an htype is unknown.

    Example:
        >>> import numpy as np
        >>> ds = lc.from_numpy("mem://fn-doc", {"x": np.zeros((4, 2)), "y": np.arange(4)}, overwrite=True)
        >>> len(ds), ds.x.shape
        (4, (4, 2))
    """
    if not isinstance(arrays, Mapping) or not arrays:
        raise InvalidTypeError(f"Expected a non-empty dict of tensor name -> array. Got {arrays!r:.80}.")
    htypes = dict(htypes or {})
    unknown = sorted(set(htypes) - set(arrays))
    if unknown:
        raise InvalidArgumentError(
            f"htypes names tensors {unknown!r} that are not in arrays ({sorted(arrays)!r})."
        )
    lengths = {name: len(values) for name, values in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise InvalidArgumentError(
            f"Every array needs the same number of samples (first axis). Got {lengths}."
        )
    ds = empty(path, overwrite=overwrite, storage_options=storage_options)
    with ds:
        for name, values in arrays.items():
            htype = htypes.get(name)
            if htype is None and isinstance(values, np.ndarray) and values.dtype.kind in "US":
                htype = "text"
            # An htype whose dtype the data decides (generic) keeps the array's; the others imply theirs.
            free = parse_htype(htype, name).dtype is None
            dtype = values.dtype if isinstance(values, np.ndarray) and free else None
            ds.create_tensor(name, htype=htype, dtype=dtype)
        ds.extend(
            {name: (values.tolist() if _is_text(values) else values) for name, values in arrays.items()}
        )
    return ds


def _is_text(values: Any) -> bool:
    return isinstance(values, np.ndarray) and values.dtype.kind in "US"
