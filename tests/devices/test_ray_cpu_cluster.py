"""A GPU request on a Ray cluster without GPUs is refused clearly, fractions included; never a silent wait."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.schedulers import Ray
from tests.s3.ray_session import ray_session

pytest.importorskip("ray")

__all__ = ["ray_session"]  # the module's local Ray (two CPUs, no GPU), imported so that pytest finds it


@lc.compute
def double(x: Any, sample_out: Any) -> None:
    """Write 2x."""
    sample_out.x.append(np.int64(2 * x))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_gpus", [0.5, 0.01, 1])
def test_ray_gpu_request_on_a_cpu_cluster_is_refused(
    ray_session: Any, tmp_path: Path, num_gpus: float
) -> None:
    """Ray(num_gpus=...) on a cluster without GPUs is an InvalidArgumentError naming the request and what the
    nodes have, before any task runs; nothing is written."""
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("x", dtype="int64")
    with pytest.raises(lc.InvalidArgumentError) as info:
        double().eval(list(range(4)), out, num_workers=2, scheduler=Ray(num_gpus=num_gpus), progressbar=False)
    message = str(info.value)
    assert f"'GPU': {float(num_gpus)!r}" in message
    assert "which no node of the cluster has" in message
    assert "'CPU': 2.0" in message
    assert len(lc.load(out.path).x) == 0
