"""Evaluating an expression over a dataset or view: read by column, in blocks of whole chunks.

The tensors an expression names are read through their column readers
(`lakecompute.datasets.ColumnReader.scan`): a run of rows of a tensor of numbers is one read per fragment
(whole chunks from the handle's cache, every chunk verified), text and json are decoded sample by sample,
and a tensor only counted (``len(polygons)``) is read from its index rows alone. No other tensor is read:
a filter on labels never touches an image chunk. A view's rows are evaluated in the order of the dataset
(each row once, however often the view repeats it) and the result put back in the view's order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from lakecompute.datasets import DatasetView, base_dataset, core_of
from lakecompute.errors import InvalidTypeError
from lakecompute.select._evaluate import Block, Values, concat, evaluate, take
from lakecompute.select._expr import Expr
from lakecompute.select._parse import parse_expression
from lakecompute.select._types import ColumnType, Typed, check, column_type

if TYPE_CHECKING:
    from lakecompute.datasets import ColumnReader, Dataset

__all__ = ["BLOCK_ROWS", "as_expr", "column_types", "positions_of", "scan", "typed_for"]

#: Rows evaluated at a time: a block's columns are read in one piece (a label column's block is 256 kB).
BLOCK_ROWS: Final = 65_536
#: A view's rows are read as the run of the dataset that covers them when they are at least this dense in
#: it, else run by run.
_DENSE: Final = 8


def as_expr(what: Expr | str) -> Expr:
    """An expression given as one or as its text (a tensor's name is the simplest text)."""
    if isinstance(what, Expr):
        return what
    if isinstance(what, str):
        return parse_expression(what)
    raise InvalidTypeError(
        f"Expected an expression (lc.col(...), lc.expr(...)) or its text. Got {type(what).__name__}."
    )


def positions_of(data: Dataset | DatasetView) -> range | np.ndarray:
    """The dataset positions of the rows of ``data``, in its order."""
    return data.positions if isinstance(data, DatasetView) else range(len(data))


def column_types(data: Dataset | DatasetView) -> dict[str, ColumnType]:
    """What each tensor of ``data`` (a column view's tensors only) is to expressions."""
    core = core_of(base_dataset(data))
    return {name: column_type(core.state(name)) for name in data.tensors}


def typed_for(data: Dataset | DatasetView, expr: Expr | str) -> Typed:
    """``expr`` checked against the tensors of ``data``.

    Raises:
        ExpressionError: see `lakecompute.select._types.check`.
    """
    return check(as_expr(expr), column_types(data))


def _pieces(positions: range | np.ndarray) -> Iterator[tuple[int, int, np.ndarray | None]]:
    """Runs ``lo..hi`` of the dataset to read, each with the rows of it wanted (None: all of them), that
    together hold the sorted distinct ``positions``."""
    if isinstance(positions, range) and positions.step == 1:
        for lo in range(positions.start, positions.stop, BLOCK_ROWS):
            yield lo, min(lo + BLOCK_ROWS, positions.stop), None
        return
    uniq = np.unique(np.asarray(positions, dtype=np.int64))
    for at in range(0, len(uniq), BLOCK_ROWS):
        block = uniq[at : at + BLOCK_ROWS]
        lo, hi = int(block[0]), int(block[-1]) + 1
        if hi - lo <= _DENSE * len(block):
            yield lo, hi, block - lo
            continue
        breaks = np.flatnonzero(np.diff(block) != 1) + 1
        for run in np.split(block, breaks):
            yield int(run[0]), int(run[-1]) + 1, None


def scan(data: Dataset | DatasetView, typed: Typed) -> Values:
    """The values of the checked expression ``typed`` for every row of ``data``, in its order (a
    ``filter_labels`` view's kept objects only).

    Raises:
        ExpressionError: values that do not fit at run time (see `lakecompute.select._evaluate.evaluate`).
        DatasetCorruptError: stored data of a tensor the expression reads is missing or damaged.
    """
    core = core_of(base_dataset(data))
    readers = {name: core.reader(name) for name in typed.columns}
    positions = positions_of(data)
    objects = data.kept_objects if isinstance(data, DatasetView) else None
    if objects is not None and not any(objects.group(name) for name in typed.columns):
        objects = None  # the expression reads no tensor whose objects the view filters
    in_order = isinstance(positions, range) and positions.step == 1 and objects is None
    order = None if in_order else np.asarray(positions, dtype=np.int64)
    uniq, first = (None, None) if order is None else np.unique(order, return_index=True)
    parts: list[Values] = []
    done = 0  # distinct positions evaluated so far
    for lo, hi, wanted in _pieces(positions if uniq is None else uniq):
        shapes, values = {}, {}
        for name, reader in readers.items():
            shapes[name], values[name] = reader.scan(lo, hi, values=name not in typed.shapes_only)
        count = hi - lo if wanted is None else len(wanted)
        if objects is not None and first is not None:
            if wanted is not None:
                shapes, values = _take_columns(shapes, values, wanted)
                wanted = None
            rows = first[done : done + count]  # the view's rows these positions are (the first of repeats)
            for name in typed.columns:
                shapes[name], values[name] = objects.flat(name, rows, shapes[name], values[name])
        done += count
        result = evaluate(
            typed, Block(len(next(iter(shapes.values()))) if shapes else hi - lo, shapes, values)
        )
        parts.append(result if wanted is None else take(result, wanted))
    if not parts:
        return evaluate(typed, Block(0, *_empty(typed, readers)))
    joined = concat(parts, typed)
    if uniq is None or order is None:
        return joined
    return take(joined, np.searchsorted(uniq, order))


def _take_columns(
    shapes: dict[str, np.ndarray], values: dict[str, np.ndarray | list[Any] | None], rows: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray | list[Any] | None]]:
    """Columns of rows ``rows`` of a block read column by column."""
    out_shapes: dict[str, np.ndarray] = {}
    out_values: dict[str, np.ndarray | list[Any] | None] = {}
    for name, shape in shapes.items():
        out_shapes[name] = shape[rows]
        value = values[name]
        if value is None or isinstance(value, list):
            out_values[name] = None if value is None else [value[i] for i in rows.tolist()]
            continue
        sizes = np.prod(shape, axis=1, dtype=np.int64) if shape.shape[1] else np.ones(len(shape), np.int64)
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        starts, counts = offsets[rows], sizes[rows]
        lead = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=lead[1:])
        items = np.repeat(starts - lead[:-1], counts) + np.arange(int(lead[-1]), dtype=np.int64)
        out_values[name] = value[items]
    return out_shapes, out_values


def _empty(
    typed: Typed, readers: dict[str, ColumnReader]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray | list[object] | None]]:
    """The columns of no rows (numbers in their tensor's dtype: class labels stay indices)."""
    shapes: dict[str, np.ndarray] = {}
    values: dict[str, np.ndarray | list[object] | None] = {}
    for name, column in typed.columns.items():
        ndim = column.ndim + (1 if column.many else 0)
        shapes[name] = np.zeros((0, ndim), dtype=np.int64)
        dtype = readers[name].dtype or np.float64
        values[name] = [] if column.kind in ("text", "json", "array") else np.zeros(0, dtype=dtype)
    return shapes, values
