"""A ``ray.data.Dataset`` as an eval's ``data_in``: recognised without importing Ray, read as a stream of
rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["RAY_WAYS_OUT", "is_ray_dataset", "ray_rows"]


def is_ray_dataset(data: Any) -> bool:
    # Checked by name: importing Ray (seconds) to answer it would slow every eval down.
    return type(data).__module__.startswith("ray.data") and type(data).__name__ in (
        "Dataset",
        "MaterializedDataset",
    )


def ray_rows(data: Any, batch_rows: int = 256) -> Iterator[dict[str, Any]]:
    """The rows of a ``ray.data.Dataset`` in its order, as dicts of column name to value.

    Read block by block as the eval takes them (streamed: nothing beyond a few blocks is held).
    Ray Data may reorder blocks for speed; the iteration asks it to keep their order (in the
    dataset's own context, which Ray Data reads when the iteration starts, restored after).
    """
    options = data.context.execution_options
    kept = options.preserve_order
    options.preserve_order = True
    try:
        for batch in data.iter_batches(batch_size=batch_rows, batch_format="numpy"):
            columns = list(batch)
            count = len(batch[columns[0]]) if columns else 0
            for i in range(count):
                yield {name: batch[name][i] for name in columns}
    finally:
        options.preserve_order = kept


#: What to do instead, for the error when an eval over a Ray dataset must be recorded.
RAY_WAYS_OUT = (
    "Write it into a lakecompute dataset first (an eval without checkpoint_interval), then run the "
    "checkpointed eval over that dataset; or pass list(ray_ds.iter_rows()) when it fits in memory; or run "
    "without checkpoint_interval."
)
