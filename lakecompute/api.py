"""Creating, opening, copying and deleting datasets: the public names of the dataset lifecycle.

The functions live in the dataset layer (`lakecompute.datasets`), where ingest, the vision ingests and
``view.save`` import them directly; this module is where the public surface (``lc.empty``, ``lc.load``,
...) takes them from.
"""

from lakecompute.datasets import copy, dataset, delete, empty, exists, like, load

__all__ = ["copy", "dataset", "delete", "empty", "exists", "like", "load"]
