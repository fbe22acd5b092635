"""The views the selecting verbs make: filtered, sorted, shuffled, and with some objects of each row left out.

Each computes its rows (or objects) with one column scan (`lakecompute.select._queries`) and hands them
to `lakecompute.datasets.view_rows`, which makes a view of them showing what the dataset (or view) shows,
its ``selected_by`` followed by the step just taken (``filter(labels == 'cat')``), which a saved view records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from lakecompute.datasets import DatasetView, ObjectGroup, ObjectSelection, view_rows
from lakecompute.errors import InvalidArgumentError, InvalidTypeError, TensorDoesNotExistError
from lakecompute.parsing import parse_count, parse_flag
from lakecompute.select._evaluate import truth
from lakecompute.select._expr import Column, Expr, Function
from lakecompute.select._queries import filter_mask, sort_order
from lakecompute.select._scan import column_types, scan, typed_for
from lakecompute.select._types import ColumnType

if TYPE_CHECKING:
    from lakecompute.datasets import Dataset

__all__ = ["filter_labels_view", "filter_view", "shuffle_view", "sort_view"]


def filter_view(data: Dataset | DatasetView, expr: Expr | str) -> DatasetView:
    """The rows of ``data`` the condition ``expr`` keeps (see ``Dataset.filter``)."""
    mask, text = filter_mask(data, expr)
    return view_rows(data, np.flatnonzero(mask), f"filter({text})")


def sort_view(data: Dataset | DatasetView, key: Expr | str, descending: bool) -> DatasetView:
    """The rows of ``data`` ordered by ``key`` (see ``Dataset.sort``)."""
    descending = parse_flag("descending", descending)
    order, text = sort_order(data, key, descending)
    return view_rows(data, order, f"sort({text}{', descending=True' if descending else ''})")


def shuffle_view(data: Dataset | DatasetView, seed: int | None) -> DatasetView:
    """The rows of ``data`` in a random order drawn from ``seed`` (see ``Dataset.shuffle``)."""
    if seed is None:  # drawn, and recorded in the view's selected_by so that it can be made again
        seed = int(np.random.SeedSequence().generate_state(1, dtype=np.uint64)[0] >> 1)
    seed = parse_count("seed", seed)
    order = np.random.default_rng(seed).permutation(len(data))
    return view_rows(data, order, f"shuffle(seed={seed})")


def filter_labels_view(
    data: Dataset | DatasetView, expr: Expr | str, only_matches: bool, tensors: Sequence[str] | None
) -> DatasetView:
    """The rows of ``data`` holding only the objects the per-object condition ``expr`` keeps, filtered
    together with the other tensors of their group (see ``Dataset.filter_labels``)."""
    only_matches = parse_flag("only_matches", only_matches)
    typed = typed_for(data, expr)
    static = typed.type_of(typed.expr)
    if static.kind not in ("bool", "json") or not static.many:
        raise typed.error(
            typed.expr,
            "filter_labels keeps or drops objects, so it takes a condition on per-object values (a box's "
            "label, its score); this one gives one value per row: use ds.filter(...) to select rows",
        )
    values = scan(data, typed)
    keep, counts = truth(values.data, static), values.counts
    existing = data.kept_objects if isinstance(data, DatasetView) else None
    named = [name for name, column in typed.columns.items() if column.many]
    current = (
        next((g for g in (existing.group(n) for n in named) if g is not None), None) if existing else None
    )
    if current is not None:  # the view filters this group already: filter its kept objects further
        if tensors is not None and set(_names(tensors)) != set(current.names):
            raise InvalidArgumentError(
                f"The view filters the objects of {list(current.names)!r} together; tensors= names "
                f"{list(_names(tensors))!r}. Leave tensors= out, or name the same tensors."
            )
        group = current.then(keep, typed.text)
    else:
        members = _members(data, counts, tensors, named, existing)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        group = ObjectGroup(members, offsets, keep, typed.text)
    selection = (existing or ObjectSelection(())).with_group(group)
    rows = np.flatnonzero(group.kept_counts() > 0) if only_matches else np.arange(len(data), dtype=np.int64)
    step = f"filter_labels({typed.text}{'' if only_matches else ', only_matches=False'})"
    return view_rows(data, rows, step, selection.take(rows))


def _names(tensors: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(tensors, str):
        return (tensors,)
    if not isinstance(tensors, Sequence) or not all(isinstance(t, str) for t in tensors):
        raise InvalidTypeError(f"tensors= takes tensor names. Got {tensors!r:.120}.")
    return tuple(tensors)


def _per_object(column: ColumnType) -> bool:
    """Whether a tensor can list objects: its htype says where (a json value does as a list)."""
    return column.many or column.kind == "json"


def _members(
    data: Dataset | DatasetView,
    counts: np.ndarray,
    tensors: Sequence[str] | None,
    named: list[str],
    existing: ObjectSelection | None,
) -> tuple[tuple[str, int], ...]:
    """The tensors filtered together with the condition's objects: those named by ``tensors``, or else every
    tensor whose htype lists objects (`lakecompute.specs.ObjectAxis`; a json list counts) and whose rows
    list as many objects as the condition's in every row (read from the samples' shapes: no data of a
    tensor of numbers or arrays is read)."""
    types = column_types(data)
    if tensors is not None:
        candidates = list(_names(tensors))
        for name in candidates:
            if name not in types:
                raise TensorDoesNotExistError(name, list(types))
            if not _per_object(types[name]):
                raise InvalidArgumentError(
                    f"tensors= names {name!r}, a {types[name].htype} tensor that holds one value per row, "
                    "not one per object."
                )
    else:
        candidates = [
            n for n, c in types.items() if _per_object(c) and (existing is None or existing.group(n) is None)
        ]
    members = []
    for name in candidates:
        lengths = scan(data, typed_for(data, Function("len", Column(name)))).data
        same = len(lengths) == len(counts) and all(
            isinstance(a, (int, np.integer)) and a == b
            for a, b in zip(lengths.tolist(), counts.tolist(), strict=True)
        )
        if same:
            column = types[name]
            members.append((name, column.axis if column.axis is not None else 0))
        elif tensors is not None or name in named:
            held, wanted = lengths.tolist(), counts.tolist()
            row = next(i for i, (a, b) in enumerate(zip(held, wanted, strict=True)) if a != b)
            raise InvalidArgumentError(
                f"Tensor {name!r} does not list the condition's objects: row {row} of the view holds "
                f"{held[row]!r} of its values and {wanted[row]} objects. Name tensors of the same objects "
                "in tensors=."
            )
    return tuple(members)
