"""Devices per worker: ``eval(devices=...)`` and the schedulers' ``devices=``, checked on the CPU through what
each worker really sees (its ``CUDA_VISIBLE_DEVICES``, `lc.worker_device`), with the caller's GPUs declared
by ``CUDA_VISIBLE_DEVICES`` as CUDA itself reads them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.parsing import parse_devices
from lakecompute.schedulers import (
    ProcessedScheduler,
    Ray,
    SerialScheduler,
    ThreadedScheduler,
    place_workers,
    visible_devices,
    worker_id,
)
from tests.devices import device_probe


@lc.compute
class Where:
    """Writes, per input, what its worker sees: CUDA_VISIBLE_DEVICES when the class was built and when this
    module was imported in the worker, lc.worker_device() and the worker's id."""

    def __init__(self) -> None:
        self.built_with = os.environ.get("CUDA_VISIBLE_DEVICES", "-")

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        sample_out.append(
            {
                "built": self.built_with,
                "imported": device_probe.AT_IMPORT,
                "device": lc.worker_device(),
                "worker": np.int64(worker_id()),
            }
        )


def _out(tmp_path: Path) -> lc.Dataset:
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    for name in ("built", "imported", "device"):
        out.create_tensor(name, htype="text")
    out.create_tensor("worker", dtype="int64")
    return out


def _rows(out: lc.Dataset) -> list[tuple[str, str, str, int]]:
    columns = [[str(v) for v in out[name].numpy(aslist=True)] for name in ("built", "imported", "device")]
    workers = out.worker.numpy().tolist()
    return list(zip(*columns, workers, strict=True))


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process is shown two GPUs, 3 and 5 of the machine (CUDA's own variable)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("two_gpus")
def test_eval_devices_each_worker_process_sees_its_own_gpu(tmp_path: Path) -> None:
    """With devices='cuda', worker k's CUDA_VISIBLE_DEVICES is the caller's k-th GPU from before user code is
    imported there, and lc.worker_device() is 'cuda:0' in every worker process."""
    out = _out(tmp_path)
    Where().eval(list(range(64)), out, num_workers=2, devices="cuda", progressbar=False)
    rows = _rows(out)
    assert len(rows) == 64
    for built, imported, device, worker in rows:
        expected = ("3", "5")[worker]
        assert (built, imported, device) == (expected, expected, "cuda:0")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3,5"  # the caller's own is untouched
    assert lc.worker_device() == "cpu"


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("two_gpus")
@pytest.mark.parametrize(
    ("devices", "expected"), [([1], ("5", "5")), ([0, 0], ("3", "3")), ([1, 0], ("5", "3"))]
)
def test_eval_devices_list_counts_in_the_callers_numbering(
    tmp_path: Path, devices: list[int], expected: tuple[str, str]
) -> None:
    """GPU indices count in the caller's numbering (after its CUDA_VISIBLE_DEVICES); a repeated index puts
    several workers on one GPU."""
    out = _out(tmp_path)
    Where().eval(list(range(32)), out, num_workers=2, devices=devices, progressbar=False)
    assert {(built, worker) for built, _, _, worker in _rows(out)} <= {(expected[0], 0), (expected[1], 1)}
    assert {built for built, *_ in _rows(out)} <= set(expected)


@pytest.mark.usefixtures("two_gpus")
def test_eval_devices_threads_share_the_callers_cuda(tmp_path: Path) -> None:
    """Worker threads keep the caller's CUDA_VISIBLE_DEVICES and are told their GPU in its numbering."""
    out = _out(tmp_path)
    Where().eval(list(range(64)), out, num_workers=2, scheduler="threaded", devices="cuda", progressbar=False)
    for built, _, device, worker in _rows(out):
        assert (built, device) == ("3,5", f"cuda:{worker}")
    assert lc.worker_device() == "cpu"  # this thread was never a worker


@pytest.mark.usefixtures("two_gpus")
def test_eval_devices_without_workers_names_the_first(tmp_path: Path) -> None:
    """With num_workers=0 the functions run here and are told the first device; afterwards this thread is
    'cpu' again."""
    out = _out(tmp_path)
    Where().eval(list(range(8)), out, num_workers=0, devices=[1], progressbar=False)
    assert {device for _, _, device, _ in _rows(out)} == {"cuda:1"}
    assert lc.worker_device() == "cpu"


@pytest.mark.parametrize("declared", ["", "-1", "-1,0"])
def test_eval_devices_refused_when_no_gpu_is_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, declared: str
) -> None:
    """devices= on a process that sees no GPU is an InvalidArgumentError saying so; nothing is written."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", declared)
    out = _out(tmp_path)
    with pytest.raises(lc.InvalidArgumentError, match=r"devices='cuda' places each worker on a GPU, but this "
                       r"process sees none \(CUDA_VISIBLE_DEVICES=") as info:  # fmt: skip
        Where().eval(list(range(4)), out, num_workers=2, devices="cuda", progressbar=False)
    assert "devices=None to run on the CPU" in str(info.value)
    assert lc.load(out.path).version == out.version
    assert len(lc.load(out.path).device) == 0


@pytest.mark.usefixtures("two_gpus")
def test_eval_devices_refuses_an_index_not_visible(tmp_path: Path) -> None:
    """An index past the GPUs this process sees is refused, naming it and what is visible."""
    with pytest.raises(lc.InvalidArgumentError) as info:
        Where().eval(list(range(4)), _out(tmp_path), num_workers=2, devices=[0, 2], progressbar=False)
    assert str(info.value).startswith(
        "devices=[0, 2] names GPU 2, but this process sees 2 (cuda:0 .. cuda:1;"
    )


@pytest.mark.usefixtures("two_gpus")
def test_eval_devices_on_ray_points_to_num_gpus(tmp_path: Path) -> None:
    """Ray places tasks on GPUs itself: devices= with the Ray scheduler is refused, naming Ray(num_gpus=1)."""
    pytest.importorskip("ray")
    with pytest.raises(lc.InvalidArgumentError, match=r"lc\.schedulers\.Ray\(num_gpus=1\)"):
        Where().eval(list(range(4)), _out(tmp_path), num_workers=2, scheduler=Ray(), devices="cuda",
                     progressbar=False)  # fmt: skip


@pytest.mark.usefixtures("two_gpus")
def test_processed_devices_never_fork() -> None:
    """Workers placed on devices start from the fork server by default, and start_method='fork' is refused."""
    assert ProcessedScheduler(2, devices="cuda").start_method == "forkserver"
    assert ProcessedScheduler(2, devices="cuda", start_method="spawn").start_method == "spawn"
    assert ProcessedScheduler(2).with_devices(place_workers("cuda")).start_method == "forkserver"  # type: ignore[arg-type]
    with pytest.raises(lc.InvalidArgumentError, match="start_method='fork' cannot be used with devices"):
        ProcessedScheduler(2, devices=[0], start_method="fork")
    assert "devices=['3', '5']" in repr(ProcessedScheduler(2, devices="cuda"))


@pytest.mark.usefixtures("two_gpus")
def test_processed_devices_preload_torch_in_the_fork_server() -> None:
    """Workers placed on devices start from a fork server that has imported torch (which does not
    initialise CUDA), unless the caller chose what it preloads."""
    pytest.importorskip("torch")
    assert ProcessedScheduler(2, devices="cuda").preload == ("lakecompute", "torch")
    assert ProcessedScheduler(2).preload == ("lakecompute",)
    assert ProcessedScheduler(2, devices="cuda", preload=["lakecompute"]).preload == ("lakecompute",)


@pytest.mark.usefixtures("two_gpus")
def test_scheduler_devices_resolve_once() -> None:
    """A scheduler's devices are resolved when it is made, against the GPUs visible then."""
    placement = ThreadedScheduler(2, devices=[1]).placement
    assert placement is not None
    assert (placement.entries, placement.local) == (("5",), (1,))
    assert SerialScheduler(devices=None).placement is None


@pytest.mark.parametrize(
    ("declared", "visible"),
    [("0,1", ("0", "1")), (" 2 , 3", ("2", "3")), ("GPU-aa,GPU-bb", ("GPU-aa", "GPU-bb")), ("1,,2", ("1",)),
     ("1,-1,2", ("1",)), ("", ())],
)  # fmt: skip
def test_visible_devices_follow_cudas_rule(
    monkeypatch: pytest.MonkeyPatch, declared: str, visible: tuple[str, ...]
) -> None:
    """CUDA_VISIBLE_DEVICES is read as CUDA reads it: entries up to the first empty or negative one."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", declared)
    assert visible_devices() == visible


# -- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "parsed"),
    [(None, None), ("cpu", None), ("cuda", "cuda"), ([0, 1], (0, 1)), ((2,), (2,)),
     (np.array([1, 0]), (1, 0)), (range(2), (0, 1)), ([np.int64(3), 3], (3, 3))],
)  # fmt: skip
def test_parse_devices_accepts(value: object, parsed: object) -> None:
    """'cuda', None, 'cpu' and sequences of GPU indices (numpy ints too, repeats allowed) are devices."""
    result = parse_devices("devices", value)
    assert result == parsed
    if isinstance(result, tuple):
        assert all(type(i) is int for i in result)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [("cuda:1", lc.InvalidArgumentError, "Got 'cuda:1'. For one GPU, pass devices=[1]."),
     ("gpu", lc.InvalidArgumentError, "Got 'gpu'."),
     (0, lc.InvalidTypeError, "Got int: 0. For one GPU, pass devices=[0]."),
     (True, lc.InvalidTypeError, "Got bool: True."),
     ([], lc.InvalidArgumentError, "Got an empty list. Use None for no devices."),
     ([True], lc.InvalidTypeError, "Expected each of devices to be an int. Got bool: True."),
     ([-1], lc.InvalidArgumentError, "Expected each of devices >= 0. Got -1."),
     ([0.5], lc.InvalidTypeError, "Expected each of devices to be an int. Got float: 0.5."),
     ({0, 1}, lc.InvalidTypeError, "Got set: {0, 1}."),
     (np.zeros((2, 2), dtype=int), lc.InvalidTypeError, "Got an array of shape (2, 2).")],
)  # fmt: skip
def test_parse_devices_refuses(value: object, error: type[Exception], message: str) -> None:
    """Anything else is a library error that says what devices= takes and what was given."""
    with pytest.raises(error) as info:
        parse_devices("devices", value)
    assert str(info.value).endswith(message)


def test_eval_refuses_bad_devices_before_running(tmp_path: Path) -> None:
    """eval checks devices= with the other options, before anything runs or is written."""
    out = _out(tmp_path)
    with pytest.raises(lc.InvalidTypeError, match="For one GPU, pass devices=\\[0\\]"):
        Where().eval([1, 2], out, devices=0)  # type: ignore[typeddict-item]
    assert len(lc.load(out.path).worker) == 0


_near_devices = st.one_of(
    st.none(),
    st.sampled_from(["cuda", "cpu", "CUDA", "cuda:0", "", "cuda:x", "0", "-1"]),
    st.integers(-3, 3),
    st.floats(allow_nan=True),
    st.booleans(),
    st.lists(st.one_of(st.integers(-2, 9), st.booleans(), st.floats(-1, 2), st.text(max_size=2)), max_size=6),
    st.tuples(st.integers(0, 9), st.integers(-1, 9)),
    st.dictionaries(st.integers(0, 3), st.integers(0, 3), max_size=2),
    st.binary(max_size=3),
)


@given(_near_devices)
def test_parse_devices_property_result_or_library_error(value: object) -> None:
    """Any near-valid devices= value parses to None, 'cuda' or ints >= 0, or is a LakeComputeError."""
    try:
        parsed = parse_devices("devices", value)
    except lc.LakeComputeError:
        return
    assert (
        parsed is None
        or parsed == "cuda"
        or (isinstance(parsed, tuple) and parsed and all(type(i) is int and i >= 0 for i in parsed))
    )


@given(st.text(alphabet="0123456789,- GPU-abcdefMIG/", max_size=24))
def test_visible_devices_property_never_raises(declared: str) -> None:
    """Any CUDA_VISIBLE_DEVICES value reads as a tuple of non-empty entries (CUDA's rule), never an error."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDA_VISIBLE_DEVICES", declared)
        visible = visible_devices()
    assert isinstance(visible, tuple)
    assert all(entry and entry == entry.strip() and not entry.startswith("-") for entry in visible)
