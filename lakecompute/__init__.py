"""lakecompute: parallel, safe and fast dataset transforms into zarr v3-backed datasets.

>>> import lakecompute as lc
>>> ds = lc.empty("mem://doc-example", overwrite=True)
>>> _ = ds.create_tensor("x", dtype="int16")
>>> ds.x.extend([1, 2, 3])
>>> ds.x.numpy().tolist()
[1, 2, 3]
"""

from lakecompute.api import copy, dataset, delete, empty, exists, like, load
from lakecompute.compute import ComputeFunction, EvalResult, FailedSample, Pipeline, compose, compute
from lakecompute.datasets import Dataset, DatasetView, Row, Tensor, TensorDiff, TensorView, VersionDiff
from lakecompute.errors import (
    CommitConflictError,
    DatasetCorruptError,
    DatasetExistsError,
    DatasetNotFoundError,
    EvalConflictError,
    FingerprintError,
    ForkInTaskError,
    InvalidArgumentError,
    InvalidSampleError,
    InvalidTypeError,
    LakeComputeError,
    LakeComputeWarning,
    LeaseExpiredError,
    MergeConflictError,
    RaggedShapeError,
    ReadOnlyError,
    RefExistsError,
    RefNotFoundError,
    RemoteError,
    SampleIndexError,
    StorageError,
    TensorDoesNotExistError,
    TensorExistsError,
    TransformError,
    UnpicklableTaskError,
    WorkerDiedError,
)
from lakecompute.ingest import ImageFile, from_numpy, ingest_classification, read
from lakecompute.schedulers import worker_device
from lakecompute.vision import ingest_coco, ingest_yolo

__version__ = "0.1.0"

__all__ = [
    "CommitConflictError",
    "ComputeFunction",
    "Dataset",
    "DatasetCorruptError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "DatasetView",
    "EvalConflictError",
    "EvalResult",
    "FailedSample",
    "FingerprintError",
    "ForkInTaskError",
    "ImageFile",
    "InvalidArgumentError",
    "InvalidSampleError",
    "InvalidTypeError",
    "LakeComputeError",
    "LakeComputeWarning",
    "LeaseExpiredError",
    "MergeConflictError",
    "Pipeline",
    "RaggedShapeError",
    "ReadOnlyError",
    "RefExistsError",
    "RefNotFoundError",
    "RemoteError",
    "Row",
    "SampleIndexError",
    "StorageError",
    "Tensor",
    "TensorDiff",
    "TensorDoesNotExistError",
    "TensorExistsError",
    "TensorView",
    "TransformError",
    "UnpicklableTaskError",
    "VersionDiff",
    "WorkerDiedError",
    "__version__",
    "compose",
    "compute",
    "copy",
    "dataset",
    "delete",
    "empty",
    "exists",
    "from_numpy",
    "ingest_classification",
    "ingest_coco",
    "ingest_yolo",
    "like",
    "load",
    "read",
    "worker_device",
]
