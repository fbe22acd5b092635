"""The dataset layer: datasets, tensors, views, and the write transaction under every commit.

Everything that reads or writes a dataset's committed versions lives here; the storage layer below
knows bytes, segments and manifests, and the compute layer above uses only what this package exports.
What one handle's tensors, views, readers and maintenance share (backend, chunk cache, write
transaction, column readers) is its `DatasetCore`, found with `core_of`. A dataset's lifecycle
(``empty``, ``load``, ``dataset``, ``like``, ``exists``, ``delete``, ``copy``) is here too: the layers
above import it from this package, and `lakecompute.api` re-exports it as ``lc.empty``, ``lc.load``, ...
"""

from lakecompute.datasets._columns import open_columns, pad_value, read_columns
from lakecompute.datasets._core import DatasetCore, core_of
from lakecompute.datasets._dataset import Dataset
from lakecompute.datasets._eval_write import (
    Decisions,
    EvalWrite,
    OutputSchema,
    SlotGrant,
    TaskWriter,
    written_in_place,
)
from lakecompute.datasets._evals import EvalPort, evals_of
from lakecompute.datasets._head import Checkout, checkout_of
from lakecompute.datasets._info import DatasetInfo, TensorInfo
from lakecompute.datasets._lifecycle import dataset, delete, empty, exists, like, load
from lakecompute.datasets._maintenance import compact, vacuum
from lakecompute.datasets._objects import ObjectGroup, ObjectSelection
from lakecompute.datasets._reader import ColumnReader, RowReader, StreamReader
from lakecompute.datasets._records import EvalProgress, EvalRecord, FailedSample
from lakecompute.datasets._save import copy
from lakecompute.datasets._schema import TensorSchema
from lakecompute.datasets._snapshot import Snapshot, snapshot
from lakecompute.datasets._tensor import Tensor, TensorView
from lakecompute.datasets._views import DatasetView, Row, base_dataset, column_list, view_rows

__all__ = [
    "Checkout",
    "ColumnReader",
    "Dataset",
    "DatasetCore",
    "DatasetInfo",
    "DatasetView",
    "Decisions",
    "EvalPort",
    "EvalProgress",
    "EvalRecord",
    "EvalWrite",
    "FailedSample",
    "ObjectGroup",
    "ObjectSelection",
    "OutputSchema",
    "Row",
    "RowReader",
    "SlotGrant",
    "Snapshot",
    "StreamReader",
    "TaskWriter",
    "Tensor",
    "TensorInfo",
    "TensorSchema",
    "TensorView",
    "base_dataset",
    "checkout_of",
    "column_list",
    "compact",
    "copy",
    "core_of",
    "dataset",
    "delete",
    "empty",
    "evals_of",
    "exists",
    "like",
    "load",
    "open_columns",
    "pad_value",
    "read_columns",
    "snapshot",
    "vacuum",
    "view_rows",
    "written_in_place",
]
