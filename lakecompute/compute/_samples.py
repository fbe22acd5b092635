"""The objects user code sees: ``sample_in`` rows and the ``sample_out`` buffer."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidTypeError, TensorDoesNotExistError

__all__ = [
    "ColumnRow",
    "InputRow",
    "InputValue",
    "RowMeta",
    "SampleOut",
    "TensorMeta",
    "column_row_class",
    "row_class",
    "tensor_meta",
]


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """What a value read from a dataset's tensor is: the tensor's name, htype and info."""

    name: str
    htype: str
    info_json: str
    """The tensor's info as JSON text: hashable (row classes are cached by it), and every reader's
    `info` is its own copy."""

    @property
    def info(self) -> dict[str, Any]:
        """The tensor's info, a new copy each time."""
        info: dict[str, Any] = json.loads(self.info_json)
        return info


#: The tensors of a row's values (one `TensorMeta` each), read once per input; () when not known.
RowMeta = tuple[TensorMeta, ...]


def tensor_meta(ds: Any, names: Iterable[str]) -> RowMeta:
    """The `TensorMeta` of the tensors ``names`` of a dataset (one read of each tensor's info)."""
    tensors = ds.tensors
    return tuple(
        TensorMeta(n, tensors[n].htype, json.dumps(dict(tensors[n].info), sort_keys=True)) for n in names
    )


class InputValue:
    """One tensor's value in a ``sample_in`` row: ``.numpy()``, ``.text()``, ``.data()``, ``.shape``, and,
    for a value read from a dataset, the tensor's ``.name``, ``.htype`` and ``.info``."""

    __slots__ = ("_meta", "_value")

    def __init__(self, value: Any, meta: TensorMeta | None = None) -> None:
        self._value = value
        self._meta = meta

    @property
    def htype(self) -> str | None:
        """The htype of the tensor the value was read from (None: not read from a dataset's tensor)."""
        return None if self._meta is None else self._meta.htype

    @property
    def info(self) -> dict[str, Any] | None:
        """The info of the tensor the value was read from, the caller's own copy (a bbox tensor's
        ``format`` and ``normalized``, class names, keypoint names); None when not read from a tensor."""
        return None if self._meta is None else self._meta.info

    @property
    def name(self) -> str:
        """The tensor the value was read from ("" when not known)."""
        return "" if self._meta is None else self._meta.name

    def numpy(self, aslist: bool = False) -> Any:
        v = self._value
        if v.__class__ is np.ndarray:  # the common case first: called once per tensor per sample
            return v
        if aslist and isinstance(v, list):
            return v
        if isinstance(v, np.ndarray):
            return v
        if isinstance(v, list):
            return np.stack([np.asarray(x) for x in v]) if v else np.empty((0,))
        return np.asarray(v)

    def text(self) -> Any:
        return self._value

    def data(self) -> Any:
        return self._value

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self._value))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else np.asarray(arr)

    def __repr__(self) -> str:
        return f"InputValue({self._value!r:.60})"


class InputRow:
    """A ``sample_in`` row: attribute or item access by tensor name gives an `InputValue`."""

    __slots__ = ("_values", "index")

    #: The tensors the values were read from, by name: set on the classes `row_class` makes for rows
    #: read from a dataset (a class attribute: nothing per row).
    _meta: ClassVar[Mapping[str, TensorMeta]] = {}
    _row_meta: ClassVar[RowMeta] = ()

    def __init__(self, values: Mapping[str, Any], index: int) -> None:
        self._values = values
        self.index = index

    def _value(self, name: str) -> InputValue:
        return InputValue(self._values[name], self._meta.get(name))

    def __getattr__(self, name: str) -> InputValue:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._value(name)
        except KeyError:
            raise AttributeError(
                f"sample_in has no tensor {name!r}; it has {sorted(self._values)!r}."
            ) from None

    def __getitem__(self, name: str) -> InputValue:
        try:
            return self._value(name)
        except KeyError:
            raise TensorDoesNotExistError(name, list(self._values)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def keys(self) -> list[str]:
        return list(self._values)

    @property
    def tensors(self) -> dict[str, InputValue]:
        return {k: self._value(k) for k in self._values}

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def __reduce__(self) -> tuple[Any, ...]:
        if not self._row_meta:
            return (InputRow, (dict(self._values), self.index))
        return (_typed_row, (dict(self._values), self.index, self._row_meta))

    def __repr__(self) -> str:
        return f"Row(index={self.index}, tensors={sorted(self._values)!r})"


def _typed_row(values: dict[str, Any], index: int, meta: RowMeta) -> InputRow:
    """A row read from a dataset, rebuilt after pickling (its class keeps the tensors' meta)."""
    return row_class(tuple(values), meta)(values, index)


def _meta_attrs(meta: RowMeta) -> dict[str, Any]:
    """The class attributes of a row class whose values were read from the tensors ``meta``."""
    return {"_meta": {m.name: m for m in meta}, "_row_meta": meta} if meta else {}


_ROW_CLASSES: dict[tuple[tuple[str, ...], RowMeta], type[InputRow]] = {}


def _plain_name(name: object, cls: type) -> bool:
    """Whether tensor ``name`` can be a property of ``cls`` (an identifier it does not use)."""
    return (
        isinstance(name, str) and name.isidentifier() and not name.startswith("_") and not hasattr(cls, name)
    )


def _tensor_property(name: str, meta: TensorMeta | None) -> property:
    def get(self: InputRow) -> InputValue:
        return InputValue(self._values[name], meta)

    return property(get)


class ColumnRow(InputRow):
    """A row of a block that was read column by column (dataset input).

    Building a dict per sample costs more than most small samples' numpy work, so a column row
    keeps the block's columns and its position, and takes values from the columns when they are
    asked for. Everything else behaves as a plain row: its ``_values`` dict is built on first use.
    """

    __slots__ = ("_columns", "_j")

    def __init__(self, columns: Mapping[str, Any], j: int, index: int) -> None:
        self._columns = columns
        self._j = j
        self.index = index

    def __getattr__(self, name: str) -> Any:
        if name == "_values":
            values = {k: v[self._j] for k, v in self._columns.items()}
            self._values = values
            return values
        return InputRow.__getattr__(self, name)


def _column_property(name: str, meta: TensorMeta | None) -> property:
    def get(self: ColumnRow) -> InputValue:
        return InputValue(self._columns[name][self._j], meta)

    return property(get)


_COLUMN_ROW_CLASSES: dict[tuple[tuple[str, ...], RowMeta], type[ColumnRow]] = {}


def column_row_class(names: tuple[str, ...], meta: RowMeta = ()) -> type[ColumnRow]:
    """A `ColumnRow` subclass in which the tensors ``names`` are properties (see
    `row_class`)."""
    cls = _COLUMN_ROW_CLASSES.get((names, meta))
    if cls is None:
        attrs: dict[str, Any] = {"__slots__": (), "__module__": InputRow.__module__, **_meta_attrs(meta)}
        by_name = {m.name: m for m in meta}
        for n in names:
            if _plain_name(n, ColumnRow):
                attrs[n] = _column_property(n, by_name.get(n))
        cls = type("InputRow", (ColumnRow,), attrs)
        if len(_COLUMN_ROW_CLASSES) < 256:
            _COLUMN_ROW_CLASSES[(names, meta)] = cls
    return cls


def row_class(names: tuple[str, ...], meta: RowMeta = ()) -> type[InputRow]:
    """An `InputRow` subclass in which the tensors ``names`` are properties, and whose values know the
    tensors ``meta`` they were read from (their ``.htype`` and ``.info``).

    ``sample_in.images`` on a plain row goes through ``__getattr__``, which Python 3.11 calls only
    after making and discarding an AttributeError: ~1 µs per access, once per tensor per sample,
    as much as a small sample's numpy work. A property is found at once. Rows built with a class
    from here behave exactly like plain rows (and pickle as plain rows, with their meta). The meta is
    the class's, so a row costs nothing more for it.
    """
    cls = _ROW_CLASSES.get((names, meta))
    if cls is None:
        attrs: dict[str, Any] = {"__slots__": (), "__module__": InputRow.__module__, **_meta_attrs(meta)}
        by_name = {m.name: m for m in meta}
        for n in names:
            if _plain_name(n, InputRow):
                attrs[n] = _tensor_property(n, by_name.get(n))
        cls = type("InputRow", (InputRow,), attrs)
        if len(_ROW_CLASSES) < 256:  # middle steps may write many different sets of names
            _ROW_CLASSES[(names, meta)] = cls
    return cls


class _TensorOut:
    __slots__ = ("_items", "_name")

    def __init__(self, items: list[Any], name: str) -> None:
        self._items = items
        self._name = name

    def append(self, value: Any) -> None:
        self._items.append(value)

    def extend(self, values: Iterable[Any]) -> None:
        if isinstance(values, (str, bytes, Mapping)):
            raise InvalidTypeError(
                f"sample_out.{self._name}.extend() takes a sequence of samples. Got {type(values).__name__}; "
                "use append() for one sample."
            )
        if isinstance(values, np.ndarray) and values.ndim == 0:
            raise InvalidTypeError(f"sample_out.{self._name}.extend() got a 0-d array; use append().")
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

    def __init__(self, tensors: Iterable[str] | None) -> None:
        object.__setattr__(self, "_allowed", None if tensors is None else list(tensors))
        object.__setattr__(self, "_data", {})
        for t in tensors or ():
            self._new_list(t)

    def _new_list(self, name: str) -> list[Any]:
        items: list[Any] = []
        self._data[name] = items
        if name.isidentifier() and not name.startswith("_") and not hasattr(SampleOut, name):
            # Found by plain attribute lookup from now on: ``sample_out.images`` runs once per
            # sample, and a ``__getattr__`` miss costs ~1 µs in Python 3.11. The list object never
            # changes (reset and truncate empty it in place), so neither does its _TensorOut.
            self.__dict__[name] = _TensorOut(items, name)
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
        return _TensorOut(items, name)

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
            # Fast path (once per sample): every key names a known tensor's list. Anything else
            # (an unknown name, a middle step's new tensor) takes the checked path below.
            data: dict[str, list[Any]] = self._data
            lists = [data.get(k) for k in sample]
            if None not in lists:
                for items, v in zip(lists, sample.values(), strict=True):
                    items.append(v)  # type: ignore[union-attr]
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

    def truncate(self, counts: Mapping[str, int]) -> None:
        """Drop everything written after ``counts`` (a failed sample's partial output)."""
        data = self._data
        for k, v in data.items():
            del v[counts.get(k, 0) :]

    def reset(self) -> None:
        data = self._data
        for v in data.values():
            v.clear()

    def __repr__(self) -> str:
        return f"SampleOut({self.counts()!r})"
