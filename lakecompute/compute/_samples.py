"""The objects user code sees: ``sample_in`` rows (the ``sample_out`` buffer is ``_sample_out.py``'s).

An eval over small samples (a 28x28 flip) spends as much time on these objects as on its numpy work, so
the rows of dataset input are built without running Python code per sample: `column_rows` chains
C-level iterators (the columns' per-sample views, ``zip``, ``map`` over tuple subclasses), and their
tensors are read through ``namedtuple``'s C field accessor. They behave as the plain rows do, and their
values know the tensors they were read from (``.htype``, ``.info``) through a class attribute or a
shared `TensorMeta`: nothing per sample.
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

import numpy as np

from lakecompute.compute._deferred import Deferred, DeferredSample, resolved
from lakecompute.errors import TensorDoesNotExistError
from lakecompute.htypes import is_tensor, stack_samples
from lakecompute.schedulers import worker_device

#: The accessor ``namedtuple`` gives its fields (C on CPython): ``_tuplegetter(k, doc)`` reads item ``k``
#: of a tuple without a Python frame. Taken from a namedtuple's field, as namedtuple itself makes them.
_tuplegetter: Any = type(collections.namedtuple("_Probe", "field").field)  # type: ignore[attr-defined]


__all__ = [
    "SAMPLE_ROWS",
    "ColumnRow",
    "InputRow",
    "InputValue",
    "RowMeta",
    "TensorMeta",
    "column_row_class",
    "column_rows",
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


class InputValue(tuple):  # type: ignore[type-arg]
    """One tensor's value in a ``sample_in`` row: ``.numpy()``, ``.torch()``, ``.text()``, ``.data()``,
    ``.shape``, and, for a value read from a dataset, the tensor's ``.name``, ``.htype`` and ``.info``.

    Made as ``InputValue((value, meta))``: a pair built by tuple's own constructor (one per tensor per
    sample, so no Python ``__init__``; ``meta`` is the tensor's `TensorMeta`, shared, or None). It is not
    a sequence to its users: indexing, ``len`` and iteration raise, as they did before it was a tuple,
    and it compares and hashes by identity.
    """

    __slots__ = ()
    _value: Any = _tuplegetter(0, "the value")
    _meta: TensorMeta | None = _tuplegetter(1, "the tensor the value was read from, if known")

    def held(self) -> Any:
        """The value as held: a `Deferred` for a tensor not read yet (the function has not asked)."""
        return self._value

    @property
    def htype(self) -> str | None:
        """The htype of the tensor the value was read from (None: not read from a dataset's tensor)."""
        meta = self._meta
        return None if meta is None else meta.htype

    @property
    def info(self) -> dict[str, Any] | None:
        """The info of the tensor the value was read from, the caller's own copy (a bbox tensor's
        ``format`` and ``normalized``, class names, keypoint names); None when not read from a tensor."""
        meta = self._meta
        return None if meta is None else meta.info

    @property
    def name(self) -> str:
        """The tensor the value was read from ("" when not known)."""
        meta = self._meta
        return "" if meta is None else meta.name

    def numpy(self, aslist: bool = False) -> Any:
        v = self._value
        if v.__class__ is np.ndarray:  # the common case first: called once per tensor per sample
            return v
        if isinstance(v, Deferred):  # a tensor read when first used
            v = v.get()
            if v.__class__ is np.ndarray:
                return v
        if isinstance(v, np.ndarray):
            return v
        if isinstance(v, list):
            if v and v[0].__class__ not in _HOST_TYPES and is_tensor(v[0]):
                v = _on_host(v)  # images of several shapes decoded on a GPU (decode_on_device)
            return v if aslist else stack_samples(v, self.name)
        if v.__class__ not in _HOST_TYPES and is_tensor(v):
            return _on_host(v)  # a batch decoded on a GPU (decode_on_device): copied back
        return np.asarray(v)

    def torch(self) -> Any:
        """The value as a torch tensor on this worker's device (``lc.worker_device()``; "cpu" without
        ``devices=``): a batch's images as one uint8 tensor, BxHxWxC as ``numpy()`` gives them.

        With ``eval(decode_on_device=True)``, JPEG images decoded on the GPU are that tensor already (no
        copy). Otherwise it is ``numpy()``'s array: shared on the CPU, copied to a GPU without waiting
        (``non_blocking``; from page-locked memory when the worker stacked the batch there).

        Raises:
            RaggedShapeError: samples of several shapes (``numpy(aslist=True)`` gives them as a list).
        """
        import torch

        device = worker_device()
        v = resolved(self._value)
        if not is_tensor(v):
            arr = self.numpy()
            v = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
        return v if str(v.device) == device else v.to(device, non_blocking=True)

    def text(self) -> Any:
        v = self._value
        return v.get() if isinstance(v, Deferred) else v

    def data(self) -> Any:
        v = self._value
        return v.get() if isinstance(v, Deferred) else v

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(resolved(self._value)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr.astype(dtype) if dtype is not None else np.asarray(arr)

    def _not_a_sequence(self, *args: Any) -> NoReturn:
        raise TypeError(
            f"{self!r} is a tensor value, not a sequence: call .numpy() (or .text(), .data()) for its value."
        )

    __getitem__ = __len__ = __iter__ = __contains__ = _not_a_sequence
    __add__ = __radd__ = __mul__ = __rmul__ = _not_a_sequence
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        return True

    def __reduce__(self) -> tuple[Any, ...]:
        return (InputValue, ((resolved(self._value), self._meta),))

    def __repr__(self) -> str:
        return f"InputValue({resolved(self._value)!r:.60})"


#: Values that are never tensors, the usual ones: `InputValue.numpy` asks no more of them (it is called
#: once per tensor per sample).
_HOST_TYPES = frozenset(
    {np.ndarray, int, float, bool, str, bytes, np.int64, np.int32, np.float32, np.float64, np.bool_}
)


def _on_host(value: Any) -> Any:
    """A tensor (or a list of them) on a GPU, as numpy arrays on the host."""
    if isinstance(value, list):
        return [v.cpu().numpy() for v in value]
    return value.cpu().numpy()


class InputRow:
    """A ``sample_in`` row: attribute or item access by tensor name gives an `InputValue`.

    Attributes:
        index: the input's position in ``data_in`` (a batch's: its first input's).
        row: for dataset input (a view included), the dataset row the input was read from (a batch's: its
            first input's); for the rows a pipeline's step gives the next, the row of the input they came
            from; None when ``data_in`` is not a dataset. Over a whole dataset ``row == index``; over
            ``ds[100:200]``, input 0 is row 100.
    """

    __slots__ = ("_values", "index", "row")

    #: The tensors the values were read from, by name: set on the classes `row_class` makes for rows
    #: read from a dataset (a class attribute: nothing per row).
    _meta: ClassVar[Mapping[str, TensorMeta]] = {}
    _row_meta: ClassVar[RowMeta] = ()

    def __init__(self, values: Mapping[str, Any], index: int, row: int | None = None) -> None:
        self._values = values
        self.index = index
        self.row = row

    def _value(self, name: str) -> InputValue:
        return InputValue((self._values[name], self._meta.get(name)))

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
        return {name: resolved(value) for name, value in self._values.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        if not self._row_meta:
            return (InputRow, (self.to_dict(), self.index, self.row))
        return (_typed_row, (self.to_dict(), self.index, self._row_meta, self.row))

    def __repr__(self) -> str:
        return f"Row(index={self.index}, row={self.row}, tensors={sorted(self._values)!r})"


def _typed_row(values: dict[str, Any], index: int, meta: RowMeta, row: int | None = None) -> InputRow:
    """A row read from a dataset, rebuilt after pickling (its class keeps the tensors' meta)."""
    return row_class(tuple(values), meta)(values, index, row)


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
        return InputValue((self._values[name], meta))

    return property(get)


class ColumnRow(tuple):  # type: ignore[type-arg]
    """A row of a block that was read column by column (dataset input): ``(value, ..., index, row)``.

    Behaves as an `InputRow` (attribute and item access by tensor name, ``index``, ``row``, ``keys()``,
    ``tensors``, ``to_dict()``, pickling as a plain row, with its meta), but is built in C by
    `column_rows` and its tensors are C field accessors: the per-sample cost of a row is a few tuple
    constructions. Each names-set and meta has its subclass (`column_row_class`); ``_names`` are its
    tensors in order.
    """

    __slots__ = ()
    _names: tuple[str, ...] = ()
    _at: dict[str, int] = {}  # noqa: RUF012 - set per subclass, never changed
    _row_meta: ClassVar[RowMeta] = ()

    @property
    def index(self) -> int:  # type: ignore[override]  # the input's position, as InputRow.index
        return int(tuple.__getitem__(self, len(self._names)))

    @property
    def row(self) -> int:  # the dataset row, as InputRow.row
        return int(tuple.__getitem__(self, len(self._names) + 1))

    def _tensor(self, name: object) -> InputValue | None:
        at = self._at.get(name) if isinstance(name, str) else None
        return None if at is None else tuple.__getitem__(self, at)

    def __getattr__(self, name: str) -> InputValue:
        if name.startswith("__"):
            raise AttributeError(name)
        value = self._tensor(name)
        if value is None:
            raise AttributeError(f"sample_in has no tensor {name!r}; it has {sorted(self._names)!r}.")
        return value

    def __getitem__(self, name: str) -> InputValue:  # type: ignore[override]
        value = self._tensor(name)
        if value is None:
            raise TensorDoesNotExistError(name, list(self._names))
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._at

    def _not_a_sequence(self, *args: Any) -> NoReturn:
        raise TypeError("sample_in is a row, not a sequence: read its tensors by name (sample_in.keys()).")

    __len__ = __iter__ = __add__ = __radd__ = __mul__ = __rmul__ = _not_a_sequence
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        return True

    def keys(self) -> list[str]:
        return list(self._names)

    @property
    def tensors(self) -> dict[str, InputValue]:
        return {n: tuple.__getitem__(self, k) for k, n in enumerate(self._names)}

    @property
    def _values(self) -> dict[str, Any]:
        return self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {n: v.data() for n, v in self.tensors.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        if not self._row_meta:
            return (InputRow, (self.to_dict(), self.index, self.row))
        return (_typed_row, (self.to_dict(), self.index, self._row_meta, self.row))

    def __repr__(self) -> str:
        return f"Row(index={self.index}, row={self.row}, tensors={sorted(self._names)!r})"


_COLUMN_ROW_CLASSES: dict[tuple[tuple[str, ...], RowMeta], type[ColumnRow]] = {}


def column_row_class(names: tuple[str, ...], meta: RowMeta = ()) -> type[ColumnRow]:
    """The `ColumnRow` subclass for tensors ``names`` (read from the tensors ``meta``, when known): each
    (an identifier it does not use) a C field accessor, at its position in the row."""
    cls = _COLUMN_ROW_CLASSES.get((names, meta))
    if cls is None:
        attrs: dict[str, Any] = {
            "__slots__": (),
            "__module__": InputRow.__module__,
            "_names": names,
            "_at": {n: k for k, n in enumerate(names)},
            "_row_meta": meta,
        }
        for k, n in enumerate(names):
            if _plain_name(n, ColumnRow):
                attrs[n] = _tuplegetter(k, f"tensor {n!r}")
        attrs["index"] = _tuplegetter(len(names), "the input's position in data_in")
        attrs["row"] = _tuplegetter(len(names) + 1, "the dataset row the input was read from")
        cls = type("InputRow", (ColumnRow,), attrs)
        if len(_COLUMN_ROW_CLASSES) < 256:
            _COLUMN_ROW_CLASSES[(names, meta)] = cls
    return cls


def _per_sample(column: Any, count: int) -> Iterator[Any]:
    """A column's values one sample at a time, without a Python frame per sample: rows of an array
    (views), 0-d views of a 1-D array (``a[j, ...]``: an array, as ``.numpy()`` gives, not a scalar),
    or a list's items."""
    if isinstance(column, np.ndarray) and column.ndim == 1:
        return map(column.__getitem__, zip(range(count), itertools.repeat(Ellipsis)))
    if hasattr(column, "sample"):  # a column read on first use: a deferred value per sample
        return map(DeferredSample, zip(itertools.repeat(column), range(count)))
    return iter(column)


def column_rows(
    columns: Mapping[str, Any], start: int, count: int, meta: RowMeta = (), rows: Iterable[int] | None = None
) -> Iterator[ColumnRow]:
    """The rows ``start .. start + count`` of a block read column by column (each column holds ``count``
    values; ``meta``: the tensors they were read from; ``rows``: the dataset rows they were read from,
    ``start ..`` by default), made lazily, in C: a row that user code does not keep is freed at once."""
    cls = column_row_class(tuple(columns), meta)
    by_name = {m.name: m for m in meta}
    values = [
        map(InputValue, zip(_per_sample(c, count), itertools.repeat(by_name.get(name))))
        for name, c in columns.items()
    ]
    rows = range(start, start + count) if rows is None else rows
    return map(cls, zip(*values, range(start, start + count), rows, strict=True))


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


#: Every kind of ``sample_in`` row (for isinstance checks).
SAMPLE_ROWS = (InputRow, ColumnRow)
