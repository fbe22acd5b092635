"""Tensors: one named column of a dataset, and read-only selections of it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.datasets._core import HasCore, core_of
from lakecompute.datasets._index import Positions, compose, parse_index
from lakecompute.datasets._info import TensorInfo, parse_tensor_info
from lakecompute.datasets._taken import TakenAt
from lakecompute.errors import InvalidArgumentError, InvalidTypeError, ReadOnlyError
from lakecompute.htypes import stack_samples
from lakecompute.versioned import Fragment

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.datasets._objects import ObjectSelection
    from lakecompute.datasets._reader import ColumnReader
    from lakecompute.datasets._upward import TokenBlocks

__all__ = ["Tensor", "TensorInfo", "TensorView"]


class _Readable(HasCore):
    """Reading shared by whole tensors and selections of them (through the dataset's core)."""

    _ds: Dataset
    name: str

    @property
    def htype(self) -> str:
        """The htype: ``generic``, ``image``, ``class_label``, ``embedding``, ``text``, ``json``, ``bbox``,
        ``binary_mask``, ``segment_mask``, ``keypoints`` or ``polygon``."""
        return self._core.state(self.name).spec.htype

    @property
    def sample_compression(self) -> str | None:
        """How each sample is encoded (``png``, ``jpeg``, ``webp``), or None."""
        return self._core.state(self.name).spec.sample_compression

    @property
    def chunk_compression(self) -> str | None:
        """How chunks are compressed (``zstd``, ``lz4``, ``gzip``), or None."""
        return self._core.state(self.name).spec.chunk_compression

    @property
    def info(self) -> TensorInfo:
        """The tensor's info, the caller's own copy; ``info.class_names`` for class_label tensors.

        ``info[key] = value``, ``info.update(...)`` and ``del info[key]`` commit (see `TensorInfo`); on a
        view's tensor they raise `ReadOnlyError`.
        """
        return TensorInfo(self._core.state(self.name).info, None)

    def _reader(self) -> ColumnReader:
        return self._core.reader(self.name)

    def _positions(self) -> Positions:
        raise NotImplementedError

    def _objects(self) -> ObjectSelection | None:
        """The objects a view keeps (``filter_labels``), aligned with this selection's samples."""
        return None

    def _values(self) -> list[Any] | np.ndarray | Any:
        reader = self._reader()
        pos = self._positions()
        objects = self._objects()
        if isinstance(pos, int):
            value = reader.read_one(pos)
            return value if objects is None else objects.sample(self.name, 0, value)
        if isinstance(pos, range) and pos.step == 1:
            values = reader.read_range(pos.start, pos.stop) if len(pos) else []
        else:
            values = list(reader.read_at(np.asarray(pos, dtype=np.int64), stack="fragments"))
        return values if objects is None else objects.samples(self.name, range(len(pos)), values)

    def numpy(self, aslist: bool = False) -> Any:
        """The samples as a numpy array (one sample, or stacked), or a list with ``aslist=True``.

        A ``polygon`` sample is a list (one entry per object) of lists of ``(m, 2)`` arrays (an
        object's polygons); several samples come as a list of those.

        Raises:
            RaggedShapeError: samples of different shapes without ``aslist=True``.
        """
        values = self._values()
        if not self._core.state(self.name).spec.declaration.stacks:
            # Samples that are never one array (a polygon sample's objects): a list of them.
            return values if isinstance(self._positions(), int) else list(values)
        if isinstance(self._positions(), int):
            return np.asarray(values) if not isinstance(values, np.ndarray) else values
        if isinstance(values, np.ndarray):
            return list(values) if aslist else values
        if aslist:
            return [np.asarray(v) if not isinstance(v, np.ndarray) else v for v in values]
        return stack_samples(values, self.name)

    def text(self) -> Any:
        """The text of a text sample (a list for several samples)."""
        return self._decoded(text=True)

    def data(self) -> Any:
        """The value of a json sample (or text; a list for several samples)."""
        return self._decoded(text=False)

    def _decoded(self, text: bool) -> Any:
        spec = self._core.state(self.name).spec
        if spec.declaration.numeric or (text and spec.dtype != "str"):
            raise InvalidTypeError(
                f"Tensor {self.name!r} has htype {spec.htype!r}; text() is for text tensors and data() for "
                "json and text tensors. Use .numpy() for arrays."
            )
        values = self._values()
        return values if isinstance(self._positions(), int) else list(values)

    def tobytes(self) -> bytes:
        """One sample's bytes as stored: the PNG, JPEG or WebP file of an image tensor with a sample
        compression (not decoded, not encoded again), UTF-8 for text, JSON for json.

        Raises:
            InvalidTypeError: not one sample (``ds.images[3]``), or a tensor stored as arrays.
        """
        spec = self._core.state(self.name).spec
        pos = self._positions()
        objects = self._objects()
        if objects is not None and objects.group(self.name) is not None:
            raise InvalidTypeError(
                f"tobytes() gives a sample as stored, with all its objects, and this view keeps some of the "
                f"objects of tensor {self.name!r} (filter_labels): read its values with .numpy()."
            )
        if not isinstance(pos, int) or spec.kind != "bytes":
            raise InvalidTypeError(
                f"tobytes() gives the stored bytes of one sample of an encoded tensor (an image with a "
                f"sample_compression, text, json, polygon); tensor {self.name!r} "
                + ("is stored as arrays: use .numpy()." if spec.kind != "bytes" else "needs one index: t[i].")
            )
        (encoded,) = self._reader().read_encoded(pos, pos + 1)
        assert encoded.blob is not None
        return bytes(encoded.blob)  # read blobs are bytes already: not copied

    def tolist(self) -> list[Any]:
        """Samples as a list (arrays for numeric tensors, values for text/json)."""
        pos = self._positions()
        if isinstance(pos, int):
            return [self._values()]
        values = self._values()
        return list(values)


class TensorView(TakenAt, _Readable):  # type: ignore[override]  # _Readable's `_ds`: TakenAt's, read-only
    """A read-only selection of a tensor: one sample (``ds.images[3]``) or several (``ds.images[2:9]``),
    of the version its dataset's handle read when it was taken (like a view: see `TakenAt`)."""

    def __init__(
        self, ds: Dataset, name: str, positions: Positions, objects: ObjectSelection | None = None
    ) -> None:
        self._take(ds)
        self.name = name
        self._pos = positions
        # Only a selection that filters this tensor's objects is kept: the others leave it as stored.
        self._kept = objects if objects is not None and objects.group(name) is not None else None

    def _positions(self) -> Positions:
        return self._pos

    def _objects(self) -> ObjectSelection | None:
        return self._kept

    def __reduce__(self) -> tuple[Any, ...]:
        # The dataset travels as where it lives (Dataset.__reduce__); the core is its reopened handle's.
        return (TensorView, (self._ds, self.name, self._pos, self._kept))

    def __len__(self) -> int:
        if isinstance(self._pos, int):
            raise InvalidTypeError(f"A single sample of {self.name!r} has no len(); use .shape or .numpy().")
        return len(self._pos)

    def __getitem__(self, key: Any) -> TensorView:
        if isinstance(self._pos, int):
            raise InvalidTypeError(f"Cannot index a single sample of {self.name!r}; index .numpy() instead.")
        what = f"tensor {self.name!r}"
        inner = parse_index(key, len(self._pos), what)
        kept = None if self._kept is None else self._kept.take([inner] if isinstance(inner, int) else inner)
        return TensorView(self._ds, self.name, compose(self._pos, inner, what), kept)

    def __iter__(self) -> Iterator[TensorView]:
        if isinstance(self._pos, int):
            raise InvalidTypeError(f"Cannot iterate over a single sample of {self.name!r}.")
        for i, p in enumerate(self._pos):
            yield TensorView(
                self._ds, self.name, int(p), None if self._kept is None else self._kept.take([i])
            )

    def __setitem__(self, key: Any, value: Any) -> None:
        raise ReadOnlyError(
            f"Cannot write to a selection of tensor {self.name!r}. "
            f"Write through the dataset: ds.{self.name}[i] = value."
        )

    def append(self, sample: Any) -> None:
        """Refused: a selection of rows cannot grow; append through the dataset's tensor.

        Raises:
            ReadOnlyError: always, naming the tensor and the call to make instead.
        """
        raise self._rows_fixed("append to", "Append", "append(sample)")

    def extend(self, samples: Any) -> None:
        """Refused, like `append`.

        Raises:
            ReadOnlyError: always, naming the tensor and the call to make instead.
        """
        raise self._rows_fixed("extend", "Extend", "extend(samples)")

    def _rows_fixed(self, verb: str, instead: str, call: str) -> ReadOnlyError:
        """The error for growing a selection (its rows are fixed): ``call`` on the dataset's tensor."""
        return ReadOnlyError(
            f"Cannot {verb} a selection of tensor {self.name!r}: a view's rows are fixed. "
            f"{instead} through the dataset: ds.{self.name}.{call}."
        )

    @property
    def shape(self) -> tuple[int | None, ...]:
        """The sample's shape, or (count, *shape) with None where samples differ."""
        reader = self._reader()
        if isinstance(self._pos, int):
            shapes = [reader.shape_of(self._pos)]
        elif isinstance(self._pos, range) and self._pos.step == 1:
            shapes = reader.shapes(self._pos.start, self._pos.stop)
        else:
            shapes = [reader.shape_of(int(p)) for p in self._pos]
        if self._kept is not None:  # the view keeps some of each sample's objects
            shapes = self._kept_shapes(shapes)
        return shapes[0] if isinstance(self._pos, int) else (len(shapes), *_merge_shapes(shapes))

    def _kept_shapes(self, shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        assert self._kept is not None
        group = self._kept.group(self.name)
        assert group is not None
        axis = group.axis(self.name)
        counts = group.kept_counts().tolist()
        out = []
        for shape, count in zip(shapes, counts, strict=True):
            dims = list(shape)
            if dims:
                dims[axis if axis is not None else 0] = count
            out.append(tuple(dims))
        return out

    @property
    def dtype(self) -> np.dtype[Any] | None:
        return Tensor(self._ds, self.name).dtype

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self.numpy())
        return arr.astype(dtype) if dtype is not None else arr

    def __repr__(self) -> str:
        where = self._pos if isinstance(self._pos, int) else f"{len(self._pos)} samples"
        return f"TensorView({self.name!r}, {where})"


def _merge_shapes(shapes: list[tuple[int, ...]]) -> tuple[int | None, ...]:
    if not shapes:
        return ()
    first = shapes[0]
    out: list[int | None] = list(first)
    for s in shapes[1:]:
        if len(s) != len(out):
            return tuple(None for _ in out)
        for d, v in enumerate(s):
            if out[d] != v:
                out[d] = None
    return tuple(out)


class Tensor(_Readable):
    """A named column of a dataset: ``ds.images`` or ``ds["images"]``."""

    def __init__(self, ds: Dataset, name: str) -> None:
        self._ds = ds  # the handle, for what takes one (blocks())
        self._core = core_of(ds)
        self.name = name

    def _positions(self) -> Positions:
        return range(len(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Tensor, (self._ds, self.name))  # reopened with its dataset, like a view

    @property
    def info(self) -> TensorInfo:
        """The tensor's info, the caller's own copy; ``info.class_names`` for class_label tensors.

        ``info[key] = value``, ``info.update(...)`` and ``del info[key]`` commit like ``ds.info`` (or join
        the ``with`` block); class names change only this way (see `TensorInfo`).
        """
        return TensorInfo(self._core.state(self.name).info, self._update_info)

    def _update_info(self, changes: dict[str, Any], deleted: tuple[str, ...]) -> dict[str, Any]:
        core = self._core
        with core.write(f"update info of {self.name}"):
            state = core.state(self.name)
            merged = {k: v for k, v in state.info.items() if k not in deleted} | changes
            info = parse_tensor_info(state, merged, core.length(self.name))
            core.txn.head.set_info_of(self.name, info)
        return info

    # -- description -----------------------------------------------------------------------------

    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The numpy dtype (None for a generic tensor nothing has been written to; object for text/json)."""
        spec = self._core.state(self.name).spec
        if not spec.declaration.numeric:
            return np.dtype(object)
        if spec.dtype is None:
            state = self._core.state(self.name)
            kinds = {np.dtype(f.dtype) for f in state.fragments}
            return np.dtype(np.result_type(*kinds)) if kinds else None
        return np.dtype(spec.dtype)

    @property
    def meta(self) -> dict[str, Any]:
        state = self._core.state(self.name)
        return {**state.spec.to_json(), "ndim": state.ndim, "info": copy.deepcopy(state.info)}

    @property
    def shape(self) -> tuple[int | None, ...]:
        """(length, *sample shape), with None in dimensions where samples differ."""
        state = self._core.state(self.name)
        n = len(self)
        if not state.spec.declaration.numeric:
            return (n,)  # a str or a JSON value has no shape
        reader = self._reader()
        shapes: list[tuple[int, ...]] = []
        for f in reader.frags:
            if f.shape is not None:
                shapes.append(f.shape)
        uniform = all(f.shape is not None for f in reader.frags)
        if not uniform:
            shapes = reader.shapes(0, n)
        return (n, *_merge_shapes(shapes)) if shapes else (n,)

    @property
    def ndim(self) -> int | None:
        return self._core.state(self.name).ndim

    def __len__(self) -> int:
        return self._core.length(self.name)

    # -- reading -------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> TensorView:
        return TensorView(self._ds, self.name, parse_index(key, len(self), f"tensor {self.name!r}"))

    def __iter__(self) -> Iterator[TensorView]:
        for i in range(len(self)):
            yield TensorView(self._ds, self.name, i)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self.numpy())
        return arr.astype(dtype) if dtype is not None else arr

    # -- training (lakecompute.loaders) ----------------------------------------------------------
    def blocks(self, seq_len: int, next_token: bool = True) -> TokenBlocks:
        """Fixed windows of ``seq_len`` values over this tensor's samples read as one stream (seed 003).

        For a tensor of 1-D integer samples, one per document (token ids): the documents are read as
        one concatenated stream and cut into blocks of any length, without tokenizing again and
        without holding the stream in memory. Block ``i`` is ``x = stream[i * seq_len : (i + 1) *
        seq_len]``; with ``next_token`` its labels ``y`` are the same window one value later. ``len()``
        is the number of whole blocks, ``blocks[i]`` gives ``(x, y)`` (or ``x``) reading only the chunks
        that cover it, and ``.batches()`` / ``.pytorch()`` take the options of
        `lakecompute.Dataset.batches` and yield ``{"x": ..., "y": ...}`` batches.

        Args:
            seq_len: values per block.
            next_token: also give next-value labels ``y`` (each block then needs ``seq_len + 1`` values).

        Raises:
            InvalidTypeError: the samples are not 1-D integers.
            InvalidArgumentError: ``seq_len`` is less than 1, or uncommitted changes.

        Example:
            >>> import numpy as np
            >>> ds = lc.empty("mem://tensor-blocks-doc", overwrite=True)
            >>> _ = ds.create_tensor("tokens", dtype="int32")
            >>> ds.tokens.extend([np.array([1, 2, 3]), np.array([4, 5, 6, 7])])
            >>> x, y = ds.tokens.blocks(3)[1]
            >>> x.tolist(), y.tolist()
            ([4, 5, 6], [5, 6, 7])
        """
        from lakecompute.datasets._upward import blocks

        return blocks(self._ds, self.name, seq_len, next_token)

    # -- writing -------------------------------------------------------------------------------
    def append(self, value: Any) -> None:
        """Append one sample."""
        core, name = self._core, self.name
        with core.write(f"append {name}"):
            core.state(name)
            core.txn.write(name, core.txn.encode(name, value))

    def extend(self, values: Any) -> None:
        """Append many samples (a list, or an array stacked on its first axis)."""
        core, name = self._core, self.name
        with core.write(f"extend {name}"):
            core.state(name)
            core.txn.write(name, core.txn.encode_many(name, values))

    def __setitem__(self, key: Any, value: Any) -> None:
        core, name = self._core, self.name
        with core.write(f"update {name}"):
            core.state(name)
            core.txn.flush(name)
            state = core.state(name)  # states are frozen: the one with the flushed samples
            pos = parse_index(key, state.length, f"tensor {name!r}")
            if isinstance(pos, int):
                positions, values = [pos], [value]
            else:
                positions = [int(p) for p in pos]
                values = list(value)
                if len(values) != len(positions):
                    raise InvalidArgumentError(
                        f"Assigning {len(values)} values to {len(positions)} samples of {name!r}; "
                        "give one per sample."
                    )
            session, schema = core.txn.session, core.txn.head.schema(name)
            encoded = [core.txn.encode(name, v) for v in values]
            fragments = list(state.fragments)
            for p, enc in zip(positions, encoded, strict=True):
                session.add(schema, enc)
                (frag,) = session.flush(schema)
                fragments = _replace_sample(fragments, p, frag)
            core.txn.head.set_fragments(name, fragments)

    def __repr__(self) -> str:
        return f"Tensor(name={self.name!r}, htype={self.htype!r}, shape={self.shape}, dtype={self.dtype})"


def _replace_sample(fragments: list[Fragment], pos: int, frag: Fragment) -> list[Fragment]:
    out: list[Fragment] = []
    start = 0
    for f in fragments:
        end = start + f.n
        if start <= pos < end:
            local = pos - start
            if local:
                out.append(f.sub(0, local))
            out.append(frag)
            if f.n - local - 1:
                out.append(f.sub(local + 1, f.n - local - 1))
        else:
            out.append(f)
        start = end
    return out
