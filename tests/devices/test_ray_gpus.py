"""Ray with GPUs per task (``lc.schedulers.Ray(num_gpus=...)``, the multi-node form of ``devices=``), on a
local Ray that declares two GPUs (Ray then schedules GPU requests and sets ``CUDA_VISIBLE_DEVICES`` per task
exactly as on a GPU node; nothing here touches CUDA)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.schedulers import Ray
from tests.s3.ray_session import RAY_INIT_OPTIONS

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def ray_with_gpus() -> Iterator[Any]:
    """A local Ray of this module's own, with two CPUs and two declared GPUs."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_gpus=2, **RAY_INIT_OPTIONS)
    yield ray
    ray.shutdown()


@lc.compute
class Embed:
    """Records (a file per build, named by process) when it is built; writes, per input, the process, its
    CUDA_VISIBLE_DEVICES and lc.worker_device()."""

    def __init__(self, folder: str) -> None:
        self.pid = os.getpid()
        with open(os.path.join(folder, f"{self.pid}-{os.urandom(4).hex()}"), "w"):
            pass

    def __call__(self, x: Any, sample_out: Any) -> None:
        sample_out.append(
            {
                "x": np.int64(x),
                "pid": np.int64(self.pid),
                "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "-"),
                "device": lc.worker_device(),
            }
        )


def _out(tmp_path: Path) -> lc.Dataset:
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("x", dtype="int64")
    out.create_tensor("pid", dtype="int64")
    out.create_tensor("visible", htype="text")
    out.create_tensor("device", htype="text")
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_gpus", [1, 0.5])
def test_ray_class_compute_built_once_per_worker_process_with_gpus(tmp_path: Path, num_gpus: float) -> None:
    """With Ray(num_gpus=...), every task sees the GPU Ray gave it (CUDA_VISIBLE_DEVICES, 'cuda:0'), and a
    class compute is built once in each Ray worker process that runs tasks, however many tasks it runs."""
    builds = tmp_path / "builds"
    builds.mkdir()
    out = _out(tmp_path)
    Embed(folder=str(builds)).eval(list(range(64)), out, num_workers=2, scheduler=Ray(num_gpus=num_gpus),
                                   progressbar=False)  # fmt: skip
    assert out.x.numpy().tolist() == list(range(64))
    assert {str(d) for d in out.device.numpy(aslist=True)} == {"cuda:0"}
    assert {str(v) for v in out.visible.numpy(aslist=True)} <= {"0", "1"}
    built = [int(name.split("-")[0]) for name in os.listdir(builds)]
    assert len(built) == len(set(built))  # one build per process
    assert set(out.pid.numpy().tolist()) <= set(built)  # and every process that ran tasks built it


def test_ray_more_gpus_than_any_node_is_refused(tmp_path: Path) -> None:
    """A request for more GPUs than a node has is refused at once, naming the request and the nodes."""
    with pytest.raises(lc.InvalidArgumentError, match=r"\{'CPU': 1\.0, 'GPU': 4\.0\}, which no node"):
        Embed(folder=str(tmp_path)).eval(list(range(4)), _out(tmp_path), num_workers=2,
                                         scheduler=Ray(num_gpus=4), progressbar=False)  # fmt: skip


def test_ray_gpu_fractions_above_one_are_refused() -> None:
    """Ray takes fractions of one GPU or whole GPUs: 1.5 is refused when the options are made, not by Ray
    at submission with a raw ValueError."""
    with pytest.raises(lc.InvalidArgumentError, match=r"Got 1\.5\. Use 1 or 2, or a fraction such as 0\.5\."):
        Ray(num_gpus=1.5)
    assert Ray(num_gpus=2.0).task_options()["num_gpus"] == 2.0
