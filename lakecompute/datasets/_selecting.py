"""The selecting verbs of datasets and views: counts, distinct values, bounds, sort, shuffle, and label
filters. Each hands over to `lakecompute.select` (imported when called), which evaluates expressions
column by column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.datasets._upward import Expr
    from lakecompute.datasets._views import DatasetView

__all__ = ["Selecting"]


class Selecting:
    """Counting and selecting by value, shared by datasets and views (see docs/selecting.md)."""

    def count_values(self, what: Expr | str) -> dict[Any, int]:
        """How often each value of a tensor (or expression) occurs, most frequent first.

        Per-object values count every object: the categories of a COCO dataset give the boxes per class.
        Class labels count by name, every class name included (with 0 where none has it); numbers and
        text by value; json values as JSON has them (1 and True, a list and its text, are different
        values): bools, lists and dicts are keyed as `lakecompute.select.JsonValue`, equal to the value
        (``counts[True]``). One scan of the tensors named: nothing else is read.

        Args:
            what: a tensor name, an expression, or an expression's text (``"len(boxes)"``).

        Raises:
            ExpressionError: an unknown tensor (naming the nearest), or values that are arrays.

        Example:
            >>> ds = lc.empty("mem://count-doc", overwrite=True)
            >>> _ = ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog", "emu"])
            >>> ds.labels.extend(["dog", "cat", "dog"])
            >>> ds.count_values("labels")
            {'dog': 2, 'cat': 1, 'emu': 0}
        """
        from lakecompute.datasets._upward import count_values

        return count_values(self._data(), what)

    def distinct(self, what: Expr | str) -> list[Any]:
        """The distinct values of a tensor (or expression), sorted: class labels by name, numbers by value.

        Example:
            >>> ds = lc.from_numpy("mem://distinct-doc", {"x": [3, 1, 3, 2]}, overwrite=True)
            >>> ds.distinct("x")
            [1, 2, 3]
        """
        from lakecompute.datasets._upward import distinct

        return distinct(self._data(), what)

    def bounds(self, what: Expr | str) -> tuple[Any, Any]:
        """The smallest and the largest value of a tensor (or expression) of numbers or text, NaN and None
        left out: ``(None, None)`` when there is none.

        Example:
            >>> ds = lc.from_numpy("mem://bounds-doc", {"score": [0.5, 0.25, 0.75]}, overwrite=True)
            >>> ds.bounds("score")
            (0.25, 0.75)
        """
        from lakecompute.datasets._upward import bounds

        return bounds(self._data(), what)

    def sort(self, key: Expr | str, descending: bool = False) -> DatasetView:
        """The rows ordered by a tensor (or expression) of one value per row, as a view.

        The sort is stable (equal keys keep their order), and NaN and None come last either way. Class
        labels sort by name, text by its characters.

        Example:
            >>> ds = lc.from_numpy("mem://sort-doc", {"score": [0.5, 0.25, 0.75]}, overwrite=True)
            >>> ds.sort("score", descending=True).score.numpy().tolist()
            [0.75, 0.5, 0.25]
        """
        from lakecompute.datasets._upward import sort_view

        return sort_view(self._data(), key, descending)

    def shuffle(self, seed: int | None = None) -> DatasetView:
        """The rows in a random order, as a view: the same ``seed`` gives the same order (None draws one,
        which the view's ``selected_by`` records).

        Example:
            >>> ds = lc.from_numpy("mem://shuffle-doc", {"x": [0, 1, 2, 3]}, overwrite=True)
            >>> sorted(ds.shuffle(seed=0).x.numpy().tolist())
            [0, 1, 2, 3]
        """
        from lakecompute.datasets._upward import shuffle_view

        return shuffle_view(self._data(), seed)

    def filter_labels(
        self, expr: Expr | str, only_matches: bool = True, *, tensors: Sequence[str] | None = None
    ) -> DatasetView:
        """Keep, in every row, only the objects a per-object condition holds for: a view.

        An object is listed across several tensors (its box, class label, score, a mask's channel,
        keypoints, polygons), each with one entry per object along the axis its htype declares. They are
        filtered together, aligned by object: the condition's tensors and every tensor whose htype lists
        objects and whose rows list the same number of them in every row (a json list of one entry per
        object counts too); ``tensors=`` names the group instead (a dataset with ground truth and
        predictions has two). The view's values, ``export_coco``, ``export_yolo``, loaders and
        ``view.save`` see only the kept objects.

        Args:
            expr: a condition on per-object values: ``lc.col("categories") == "car"``,
                ``"scores > 0.5"``.
            only_matches: leave out the rows that keep no object.
            tensors: the per-object tensors to filter together (default: found as above).

        Raises:
            ExpressionError: the condition is not one on per-object values, or does not fit the tensors.
            InvalidArgumentError: a tensor of ``tensors`` does not list the condition's objects.

        Example:
            >>> import numpy as np
            >>> ds = lc.empty("mem://filter-labels-doc", overwrite=True)
            >>> _ = ds.create_tensor("boxes", htype="bbox")
            >>> _ = ds.create_tensor("categories", htype="class_label", class_names=["car", "bus"])
            >>> boxes = np.array([[0, 0, 2, 2], [1, 1, 3, 3]], "f4")
            >>> ds.append({"boxes": boxes, "categories": ["bus", "car"]})
            >>> view = ds.filter_labels(lc.col("categories") == "car")
            >>> view.boxes[0].numpy().tolist(), view.categories[0].numpy().tolist()
            ([[1.0, 1.0, 3.0, 3.0]], [0])
        """
        from lakecompute.datasets._upward import filter_labels_view

        return filter_labels_view(self._data(), expr, only_matches, tensors)

    def _data(self) -> Dataset | DatasetView:
        return cast("Dataset | DatasetView", self)
