"""Imported by worker processes when a test's function is unpickled there: records what CUDA would see at
the moment user code is first imported in the worker (before any function runs). Imports no torch, so a
script can use its functions without importing torch."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import lakecompute as lc

#: ``CUDA_VISIBLE_DEVICES`` when this module was imported in this process ("-" when unset).
AT_IMPORT = os.environ.get("CUDA_VISIBLE_DEVICES", "-")


@lc.compute
def parent_of(x: Any, sample_out: Any) -> None:
    """Write the worker's parent process id."""
    sample_out.x.append(np.int64(os.getppid()))
