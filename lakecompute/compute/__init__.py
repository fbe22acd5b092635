"""Transforms: ``@lc.compute``, ``lc.compose`` and ``eval``."""

from lakecompute.compute._decorator import ComputeFunction, Pipeline, compose, compute
from lakecompute.compute._engine import EvalResult, FailedSample

__all__ = ["ComputeFunction", "EvalResult", "FailedSample", "Pipeline", "compose", "compute"]
