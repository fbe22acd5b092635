"""Read-only access shared by datasets, views and rows; views and rows themselves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.datasets._index import compose
from lakecompute.datasets._tensor import TensorView
from lakecompute.errors import InvalidTypeError, ReadOnlyError, TensorDoesNotExistError

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset

__all__ = ["DatasetView", "Row", "base_dataset"]


class _Reading:
    """Read access shared by datasets, views and rows."""

    def _base_ds(self) -> Dataset:
        raise NotImplementedError

    @property
    def tensors(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except TensorDoesNotExistError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute or tensor {name!r}; "
                f"tensors: {sorted(self.tensors)!r}."
            ) from None

    def __getitem__(self, key: Any) -> Any:
        raise NotImplementedError


class DatasetView(_Reading):
    """A read-only selection of a dataset's samples (``ds[2:10]``, ``ds[[3, 1]]``, ``ds[mask]``)."""

    def __init__(self, ds: Dataset, positions: range | np.ndarray) -> None:
        self._ds = ds
        self._pos = positions

    def _base_ds(self) -> Dataset:
        return self._ds

    @property
    def positions(self) -> range | np.ndarray:
        """Positions of this view's samples in the underlying dataset."""
        return self._pos

    @property
    def path(self) -> str:
        return self._ds.path

    @property
    def version(self) -> int:
        return self._ds.version

    @property
    def read_only(self) -> bool:
        return True

    @property
    def tensors(self) -> dict[str, TensorView]:
        return {name: TensorView(self._ds, name, self._pos) for name in self._ds._names()}

    def __len__(self) -> int:
        return len(self._pos)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            self._ds._state(key)
            return TensorView(self._ds, key, self._pos)
        pos = compose(self._pos, key)
        if isinstance(pos, int):
            return Row(self._ds, pos)
        return DatasetView(self._ds, pos)

    def __iter__(self) -> Iterator[Row]:
        for p in self._pos:
            yield Row(self._ds, int(p))

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnlyError(
            "Dataset views are read-only. Write to the dataset itself, or eval() into another dataset."
        )

    append = extend = create_tensor = _refuse

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self._refuse()

    def __repr__(self) -> str:
        return f"DatasetView(path={self.path!r}, version={self.version}, samples={len(self)})"

    def _repr_html_(self) -> str:
        from lakecompute.viz import dataset_html  # the notebook view: summary table and thumbnails

        return dataset_html(self._ds, self.positions)


class Row(_Reading):
    """One sample of a dataset: ``ds[3].images.numpy()``, ``ds[3]["labels"]``."""

    def __init__(self, ds: Dataset, position: int) -> None:
        self._ds = ds
        self._pos = position

    def _base_ds(self) -> Dataset:
        return self._ds

    @property
    def index(self) -> int:
        return self._pos

    @property
    def tensors(self) -> dict[str, TensorView]:
        return {name: TensorView(self._ds, name, self._pos) for name in self._ds._names()}

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, str):
            raise InvalidTypeError(f"A row is indexed by tensor name. Got {type(key).__name__}: {key!r}.")
        self._ds._state(key)
        return TensorView(self._ds, key, self._pos)

    def keys(self) -> list[str]:
        return list(self._ds._names())

    def to_dict(self) -> dict[str, Any]:
        """The row's values by tensor name (arrays, or str/values for text/json)."""
        return {name: view._values() for name, view in self.tensors.items()}

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            raise ReadOnlyError("Rows are read-only; write with ds.<tensor>[i] = value.")

    def __repr__(self) -> str:
        return f"Row(index={self._pos}, tensors={self.keys()!r})"


def base_dataset(data: Dataset | DatasetView | Row) -> Dataset:
    """The dataset a view or row reads from (a dataset is its own)."""
    return data._base_ds()
