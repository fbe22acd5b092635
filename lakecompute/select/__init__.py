"""Selecting by value: expressions over a dataset's tensors, evaluated column by column.

``lc.col("labels") == "cat"`` (or ``lc.expr("labels == 'cat'")``) builds an expression, a small immutable
tree (`Expr`) whose ``str`` is the text `parse_expression` reads back. ``ds.filter(expr)``,
``ds.filter_labels(expr)``, ``ds.count_values``, ``ds.distinct``, ``ds.bounds`` and ``ds.sort`` evaluate
expressions over the columns they name, read in whole chunks and never a chunk of any other tensor.

The functions here take a dataset or view and return plain data (dicts, lists, numpy arrays) or views, so
that other front ends (the command line, the viewer's JSON API) call them as they are.
"""

from lakecompute.select._expr import MAX_DEPTH, Expr, Logical, col
from lakecompute.select._keys import JsonValue, plain_value
from lakecompute.select._parse import MAX_TEXT, expr, parse_expression
from lakecompute.select._queries import bounds, count_values, distinct, filter_mask, sort_order
from lakecompute.select._scan import typed_for
from lakecompute.select._views import filter_labels_view, filter_view, shuffle_view, sort_view

__all__ = [
    "MAX_DEPTH",
    "MAX_TEXT",
    "Expr",
    "JsonValue",
    "Logical",
    "bounds",
    "col",
    "count_values",
    "distinct",
    "expr",
    "filter_labels_view",
    "filter_mask",
    "filter_view",
    "parse_expression",
    "plain_value",
    "shuffle_view",
    "sort_order",
    "sort_view",
    "typed_for",
]
