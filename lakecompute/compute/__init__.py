"""Transforms: ``@lc.compute``, ``lc.compose`` and ``eval``; `SampleRunner` for code that applies a
transform on the fly (the loaders)."""

from lakecompute.compute._decoders import decode_in_processes, decoding_processes
from lakecompute.compute._decorator import ComputeFunction, Pipeline, Transform, as_pipeline, compose, compute
from lakecompute.compute._engine import EvalResult, FailedSample
from lakecompute.compute._fingerprint import describe_for_fingerprints
from lakecompute.compute._mask import filter_mask
from lakecompute.compute._options import EvalKwargs, EvalOptions
from lakecompute.compute._runner import SampleRunner
from lakecompute.compute._samples import RowMeta, TensorMeta, tensor_meta

__all__ = [
    "ComputeFunction",
    "EvalKwargs",
    "EvalOptions",
    "EvalResult",
    "FailedSample",
    "Pipeline",
    "RowMeta",
    "SampleRunner",
    "TensorMeta",
    "Transform",
    "as_pipeline",
    "compose",
    "compute",
    "decode_in_processes",
    "decoding_processes",
    "describe_for_fingerprints",
    "filter_mask",
    "tensor_meta",
]
