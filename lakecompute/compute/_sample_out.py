"""The ``sample_out`` buffer user code writes to: ``sample_out.<tensor>.append(value)`` and ``extend``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidTypeError, TensorDoesNotExistError

__all__ = ["SampleOut"]


class _TensorOut:
    __slots__ = ("_items", "_name", "_runs")

    def __init__(self, items: list[Any], name: str, runs: list[tuple[int, np.ndarray]]) -> None:
        self._items = items
        self._name = name
        self._runs = runs

    def append(self, value: Any) -> None:
        self._items.append(value)

    def extend(self, values: Iterable[Any]) -> None:
        if isinstance(values, (str, bytes, Mapping)):
            raise InvalidTypeError(
                f"sample_out.{self._name}.extend() takes a sequence of samples. Got {type(values).__name__}; "
                "use append() for one sample."
            )
        if isinstance(values, np.ndarray):
            if values.ndim == 0:
                raise InvalidTypeError(f"sample_out.{self._name}.extend() got a 0-d array; use append().")
            self._runs.append((len(self._items), values))  # whole, for SampleOut.runs
        self._items.extend(values)

    def __len__(self) -> int:
        return len(self._items)


class SampleOut:
    """What a compute function writes to: ``append(dict)``, ``extend(dict of lists)``,
    ``sample_out.<tensor>.append/extend`` and ``sample_out["tensor"]``.

    Args:
        tensors: the names that may be written, or None to accept any (a pipeline's middle step).
    """

    _allowed: list[str] | None
    _data: dict[str, list[Any]]
    _runs: dict[str, list[tuple[int, np.ndarray]]]

    def __init__(self, tensors: Iterable[str] | None) -> None:
        object.__setattr__(self, "_allowed", None if tensors is None else list(tensors))
        object.__setattr__(self, "_data", {})
        object.__setattr__(self, "_runs", {})
        for t in tensors or ():
            self._new_list(t)

    def _new_list(self, name: str) -> list[Any]:
        items: list[Any] = []
        self._data[name] = items
        self._runs[name] = []
        if name.isidentifier() and not name.startswith("_") and not hasattr(SampleOut, name):
            # Found by plain attribute lookup from now on: ``sample_out.images`` runs once per
            # sample, and a ``__getattr__`` miss costs ~1 µs in Python 3.11. The list object never
            # changes (reset and truncate empty it in place), so neither does its _TensorOut.
            self.__dict__[name] = _TensorOut(items, name, self._runs[name])
        return items

    def _tensor(self, name: str) -> _TensorOut:
        data = self._data
        items = data.get(name)
        if items is None:
            if self._allowed is not None:
                raise TensorDoesNotExistError(name, self._allowed)
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"sample_out tensor names are non-empty strings. Got {name!r}.")
            items = self._new_list(name)
        return _TensorOut(items, name, self._runs[name])

    def __getattr__(self, name: str) -> _TensorOut:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._tensor(name)

    def __getitem__(self, name: str) -> _TensorOut:
        return self._tensor(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise InvalidTypeError(
            f"Cannot assign sample_out.{name}; append to it instead: sample_out.{name}.append(value)."
        )

    def append(self, sample: Mapping[str, Any]) -> SampleOut:
        """Add one output sample: ``{"images": a, "labels": 0}``."""
        if sample.__class__ is dict:
            # Fast path (once per sample): append to the known tensors' lists, and should a key name
            # none (an unknown name, a middle step's new tensor), take back what was appended before
            # it and take the checked path below. (A subset test of the keys first costs more than
            # the appends: ~0.2 µs a sample.)
            data: dict[str, list[Any]] = self._data
            try:
                for k in sample:
                    data[k].append(sample[k])
            except KeyError:
                for k in sample:
                    if k not in data:
                        break
                    data[k].pop()
            else:
                return self
        elif not isinstance(sample, Mapping):
            raise InvalidTypeError(
                f"sample_out.append() takes a dict of tensor -> value. Got {type(sample).__name__}."
            )
        targets = [(self._tensor(k), v) for k, v in sample.items()]
        for t, v in targets:
            t.append(v)
        return self

    def extend(self, samples: Mapping[str, Any]) -> SampleOut:
        """Add several output samples: ``{"images": [a, b], "labels": [0, 1]}``."""
        if not isinstance(samples, Mapping):
            raise InvalidTypeError(
                f"sample_out.extend() takes a dict of tensor -> list of values. Got {type(samples).__name__}."
            )
        targets = [(self._tensor(k), v) for k, v in samples.items()]
        for t, v in targets:
            t.extend(v)
        return self

    # -- for the engine ------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        data = self._data
        return {k: len(v) for k, v in data.items()}

    def total(self) -> int:
        """Values written so far, over all tensors."""
        return sum(map(len, self._data.values()))

    def items(self) -> dict[str, list[Any]]:
        data = self._data
        return data

    def runs(self, name: str) -> list[np.ndarray] | None:
        """The arrays whose rows are all of ``name``'s values, in order, when its values were written by
        extending it with arrays (a batched function's columns) and nothing else; else None."""
        runs, values = self._runs.get(name), self._data.get(name)
        if not runs or values is None:
            return None
        at = 0
        for start, arr in runs:
            if start != at:
                return None
            at += len(arr)
        return [arr for _, arr in runs] if at == len(values) else None

    def truncate(self, counts: Mapping[str, int]) -> None:
        """Drop everything written after ``counts`` (a failed sample's partial output)."""
        data = self._data
        for k, v in data.items():
            keep = counts.get(k, 0)
            del v[keep:]
            runs = self._runs[k]
            runs[:] = [(start, arr) for start, arr in runs if start + len(arr) <= keep]

    def reset(self) -> None:
        data = self._data
        for v in data.values():
            v.clear()
        for runs in self._runs.values():
            runs.clear()

    def __repr__(self) -> str:
        return f"SampleOut({self.counts()!r})"
