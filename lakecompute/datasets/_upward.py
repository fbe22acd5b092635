"""The one door from the user's handle up to the layers built on it.

A dataset handle has verbs whose work lives in layers above the dataset layer: ``ds.filter`` runs its
function in tasks as an eval does (`lakecompute.compute`) or evaluates an expression
(`lakecompute.select`, as ``count_values``, ``sort`` and ``filter_labels`` do); ``ds.batches``,
``ds.pytorch``, ``ds.to_ray`` and ``tensor.blocks`` hand over to the training loaders
(`lakecompute.loaders`); ``view.export_coco`` / ``export_yolo`` to the exports (`lakecompute.vision`);
``ds.to_arrow``, ``to_pandas``, ``to_parquet`` and ``to_hf`` to the tables (`lakecompute.tables`); the
notebook view to `lakecompute.viz`; ``ds.view()`` to the viewer (`lakecompute.viewer`).

They all go through this module, and only this one: the layers contract in ``pyproject.toml`` ignores
exactly its imports, and the rest of the dataset layer imports it only inside the function that needs
it (or for type checking), so that ``import lakecompute.datasets`` never loads a layer above.
``tests/test_import_direction.py`` checks both, and that without this module no import loop joins more
than two modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakecompute.compute import filter_mask
from lakecompute.loaders import (
    Batches,
    LoaderKwargs,
    LoaderOptions,
    TokenBlocks,
    TorchLoaderKwargs,
    batches,
    blocks,
    pytorch,
    to_ray,
)
from lakecompute.select import (
    Expr,
    bounds,
    count_values,
    distinct,
    filter_labels_view,
    filter_view,
    shuffle_view,
    sort_view,
)
from lakecompute.tables import to_arrow, to_arrow_reader, to_hf, to_pandas, to_parquet
from lakecompute.viewer import Viewer, serve
from lakecompute.vision import export_coco, export_yolo
from lakecompute.viz import dataset_html

if TYPE_CHECKING:
    from lakecompute.loaders import LakeDataLoader

__all__ = [
    "Batches",
    "Expr",
    "LakeDataLoader",
    "LoaderKwargs",
    "LoaderOptions",
    "TokenBlocks",
    "TorchLoaderKwargs",
    "Viewer",
    "batches",
    "blocks",
    "bounds",
    "count_values",
    "dataset_html",
    "distinct",
    "export_coco",
    "export_yolo",
    "filter_labels_view",
    "filter_mask",
    "filter_view",
    "pytorch",
    "serve",
    "shuffle_view",
    "sort_view",
    "to_arrow",
    "to_arrow_reader",
    "to_hf",
    "to_pandas",
    "to_parquet",
    "to_ray",
]


def __getattr__(name: str) -> object:
    """``LakeDataLoader``, imported on first use: it imports torch, which took the first ``ds.batches()``,
    ``ds.filter()`` or ``ds.to_pandas()`` of a process 1.1 s when this module imported it."""
    if name == "LakeDataLoader":
        from lakecompute.loaders import LakeDataLoader

        return LakeDataLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
