"""lakecompute: parallel, safe and fast dataset transforms into zarr v3-backed datasets.

>>> import lakecompute as lc
>>> ds = lc.empty("mem://doc-example", overwrite=True)
>>> _ = ds.create_tensor("x", dtype="int16")
>>> ds.x.extend([1, 2, 3])
>>> ds.x.numpy().tolist()
[1, 2, 3]
"""

from lakecompute import errors
from lakecompute.compute import ComputeFunction, EvalResult, FailedSample, Pipeline, compose, compute
from lakecompute.datasets import (
    Dataset,
    DatasetView,
    Row,
    Tensor,
    TensorView,
    copy,
    dataset,
    delete,
    empty,
    exists,
    like,
    load,
)
from lakecompute.errors import *  # noqa: F403  # the errors, named once in errors.__all__
from lakecompute.ingest import (
    ImageFile,
    from_arrow,
    from_csv,
    from_numpy,
    from_pandas,
    from_parquet,
    ingest_classification,
    read,
)
from lakecompute.schedulers import worker_device
from lakecompute.select import Expr, col, expr
from lakecompute.tables import read_parquet
from lakecompute.versioned import TensorDiff, VersionDiff
from lakecompute.vision import ingest_coco, ingest_yolo

__version__ = "0.1.0"

__all__ = [
    "ComputeFunction",
    "Dataset",
    "DatasetView",
    "EvalResult",
    "Expr",
    "FailedSample",
    "ImageFile",
    "Pipeline",
    "Row",
    "Tensor",
    "TensorDiff",
    "TensorView",
    "VersionDiff",
    "__version__",
    "col",
    "compose",
    "compute",
    "copy",
    "dataset",
    "delete",
    "empty",
    "exists",
    "expr",
    "from_arrow",
    "from_csv",
    "from_numpy",
    "from_pandas",
    "from_parquet",
    "ingest_classification",
    "ingest_coco",
    "ingest_yolo",
    "like",
    "load",
    "read",
    "read_parquet",
    "worker_device",
]
# Every error is public: errors.__all__ is their one list (mypy reads the star import as their export).
__all__ += errors.__all__
__all__.sort()
