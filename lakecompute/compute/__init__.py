"""Transforms: ``@lc.compute``, ``lc.compose`` and ``eval``; `SampleRunner` for code that applies a
transform on the fly (the loaders)."""

from lakecompute.compute._decorator import ComputeFunction, Pipeline, as_pipeline, compose, compute
from lakecompute.compute._engine import EvalResult, FailedSample
from lakecompute.compute._options import EvalOptions
from lakecompute.compute._runner import SampleRunner

__all__ = [
    "ComputeFunction",
    "EvalOptions",
    "EvalResult",
    "FailedSample",
    "Pipeline",
    "SampleRunner",
    "as_pipeline",
    "compose",
    "compute",
]
