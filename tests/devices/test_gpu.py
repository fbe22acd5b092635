"""On a machine with CUDA GPUs (skipped elsewhere): each worker process uses its own GPU, and a real CUDA
out-of-memory error is a TransformError naming the batch. CUDA is only ever initialised in the workers:
this process counts GPUs through NVML or the driver, as the library does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.schedulers import cuda_initialised, visible_devices, worker_id

torch = pytest.importorskip("torch")

GPUS = len(visible_devices())
# Neither call initialises CUDA here (torch.cuda.is_available() would start the CUDA driver in this process).
pytestmark = pytest.mark.skipif(GPUS == 0 or not torch.backends.cuda.is_built(), reason="no CUDA GPU here")


@lc.compute
class OnDevice:
    """Built once per worker on lc.worker_device(); writes which physical GPU (its UUID) the worker computed
    on, how many GPUs CUDA shows it, and a sum computed there."""

    def __init__(self) -> None:
        self.device = torch.device(lc.worker_device())
        self.uuid = str(torch.cuda.get_device_properties(self.device).uuid)
        self.count = torch.cuda.device_count()

    def __call__(self, batch: Any, sample_out: Any) -> None:
        x = torch.from_numpy(np.asarray(batch, dtype=np.float32)).to(self.device)
        sums = (x * 2).cpu().numpy()
        for value in sums:
            sample_out.append({"x": np.float32(value), "uuid": self.uuid, "count": np.int64(self.count),
                               "worker": np.int64(worker_id())})  # fmt: skip


def _out(tmp_path: Path) -> lc.Dataset:
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("x", dtype="float32")
    out.create_tensor("uuid", htype="text")
    out.create_tensor("count", dtype="int64")
    out.create_tensor("worker", dtype="int64")
    return out


@pytest.mark.timeout(300)
def test_gpu_each_worker_process_computes_on_its_own_gpu(tmp_path: Path) -> None:
    """With devices='cuda' and two workers per GPU, CUDA shows each worker one GPU, workers k and k + #GPUs
    share one, different k get different GPUs, the values are right, and this process never initialised
    CUDA."""
    out = _out(tmp_path)
    OnDevice().eval(list(range(512)), out, num_workers=2 * GPUS, devices="cuda", batch_size=16,
                    progressbar=False)  # fmt: skip
    np.testing.assert_array_equal(out.x.numpy(), 2 * np.arange(512, dtype=np.float32))
    assert set(out.count.numpy().tolist()) == {1}
    by_worker = {int(w): str(u) for w, u in zip(out.worker.numpy(), out.uuid.numpy(aslist=True), strict=True)}
    for worker, uuid in by_worker.items():
        for other, theirs in by_worker.items():
            assert (uuid == theirs) == (worker % GPUS == other % GPUS), by_worker
    assert not cuda_initialised()


@lc.compute
def allocate_too_much(batch: Any, sample_out: Any, at: int) -> None:
    """Allocate 4 TiB on the worker's GPU for the batch holding input ``at`` (a real CUDA OOM)."""
    values = np.asarray(batch)
    if at in values.tolist():
        torch.empty(1 << 40, dtype=torch.float32, device=lc.worker_device())
    sample_out.x.extend(values.astype(np.float32))


@pytest.mark.timeout(300)
def test_gpu_out_of_memory_is_a_transform_error_naming_the_batch(tmp_path: Path) -> None:
    """torch's own CUDA out-of-memory error in a worker is a TransformError at the batch's first input,
    naming the batch and advising a smaller batch_size; nothing is written."""
    out = lc.empty(str(tmp_path / "oom"), overwrite=True)
    out.create_tensor("x", dtype="float32")
    with pytest.raises(lc.TransformError) as info:
        allocate_too_much(at=70).eval(list(range(128)), out, num_workers=GPUS, devices="cuda", batch_size=32,
                                      progressbar=False)  # fmt: skip
    assert info.value.index == 64
    assert "ran out of memory on the batch data_in[64:96] (batch_size=32)" in str(info.value)
    assert "OutOfMemoryError" in type(info.value.__cause__).__name__ + str(info.value.__cause__)
    assert len(lc.load(out.path).x) == 0
    assert not cuda_initialised()


def test_gpu_visible_devices_match_cuda() -> None:
    """The GPUs counted without CUDA (NVML or the driver) are the ones CUDA reports (asked in another
    process, so that this one never starts CUDA)."""
    count = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.strip()  # fmt: skip
    assert int(count) == GPUS


@lc.compute
class SumOnDevice:
    """Copies each batch of images to the worker's GPU without waiting (``non_blocking=True``), as a model
    column does, and sums each image there; records whether the batch came in page-locked memory."""

    def __init__(self) -> None:
        self.device = torch.device(lc.worker_device())
        torch.zeros(1, device=self.device)  # CUDA initialised by the user's code, as a model's build does

    def __call__(self, batch: Any, sample_out: Any) -> None:
        images = torch.from_numpy(batch.images.numpy())
        pinned = images.is_pinned()
        on_device = images.to(self.device, non_blocking=True)
        sums = on_device.reshape(len(on_device), -1).to(torch.int64).sum(dim=1).cpu().numpy()
        sample_out.sums.extend(sums)
        sample_out.pinned.extend(np.full(len(sums), pinned))


@pytest.mark.timeout(300)
def test_gpu_batches_arrive_pinned_and_whole(tmp_path: Path) -> None:
    """In a worker placed on a GPU whose code initialised CUDA, a batch of images is stacked in page-locked
    memory (its copy to the device is queued, not waited for): every batch after the first few is pinned,
    and every image summed on the device equals its stored pixels (no buffer reused under a copy)."""
    ds = lc.empty(str(tmp_path / "images"), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (600, 64, 48, 3), dtype=np.uint8)
    ds.images.extend(images)
    ds.create_tensor("sums", dtype="int64")
    ds.create_tensor("pinned", dtype="bool")
    SumOnDevice().eval(ds, num_workers=GPUS, devices="cuda", batch_size=32, skip_ok=True, progressbar=False)
    again = lc.load(ds.path)
    np.testing.assert_array_equal(again.sums.numpy(), images.reshape(600, -1).astype(np.int64).sum(axis=1))
    pinned = again.pinned.numpy()
    assert pinned[-128:].all(), pinned.tolist()
    assert not cuda_initialised()


def _jpeg_dataset(path: Path, n: int) -> lc.Dataset:
    """``n`` photo-like 40x56 RGB JPEGs and as many greyscale 24x20 JPEGs, with columns for what the workers
    write back."""
    from PIL import Image

    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="jpeg")
    ds.create_tensor("gray", htype="image", sample_compression="jpeg")
    rng = np.random.default_rng(1)
    for _ in range(n):
        small = Image.fromarray(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8))
        ds.images.append(np.asarray(small.resize((56, 40), Image.BICUBIC)))
        ds.gray.append(np.asarray(small.convert("L").resize((20, 24), Image.BICUBIC)))
    ds.create_tensor("pixels", dtype="uint8")
    ds.create_tensor("gray_pixels", dtype="uint8")
    ds.create_tensor("where", htype="text")
    return ds


@lc.compute
class DecodedWhere:
    """Writes back the pixels the function got (copied to the host) and where the batch was."""

    def __call__(self, batch: Any, sample_out: Any) -> None:
        images, gray = batch.images.data(), batch.gray.data()
        same = batch.images.torch() is images  # no copy: it is on the worker's device already
        sample_out.pixels.extend(images.cpu().numpy())
        sample_out.gray_pixels.extend(gray.cpu().numpy())
        where = f"{type(images).__name__} {images.device} {tuple(images.shape[1:])} {images.dtype} {same}"
        sample_out.where.extend([where] * len(images))


@pytest.mark.timeout(300)
def test_gpu_decode_on_device_matches_the_cpu_decode(tmp_path: Path) -> None:
    """With decode_on_device=True, JPEG batches arrive as uint8 tensors on the worker's GPU, BxHxWxC (HxW for
    greyscale) as numpy() gives them, and within nvJPEG's documented tolerance of the CPU decode (the mean
    absolute difference per image under 2 levels, torchvision's own test of decode_jpeg on CUDA)."""
    ds = _jpeg_dataset(tmp_path / "jpegs", 300)
    DecodedWhere().eval(ds, num_workers=GPUS, devices="cuda", batch_size=32, skip_ok=True,
                        decode_on_device=True, progressbar=False)  # fmt: skip
    again = lc.load(ds.path)
    assert {str(w) for w in again.where.numpy(aslist=True)} == {"Tensor cuda:0 (40, 56, 3) torch.uint8 True"}
    for stored, decoded in (("images", "pixels"), ("gray", "gray_pixels")):
        cpu = again[stored].numpy().astype(np.float32)
        gpu = again[decoded].numpy().astype(np.float32)
        assert gpu.shape == cpu.shape
        per_image = np.abs(gpu - cpu).reshape(len(cpu), -1).mean(axis=1)
        assert per_image.max() < 2, (stored, per_image.max())
    assert not cuda_initialised()


@lc.compute
class Mean:
    def __call__(self, batch: Any, sample_out: Any) -> None:
        sample_out.means.extend(batch.img.torch().float().mean(dim=(1, 2, 3)).cpu().numpy())


@pytest.mark.timeout(300)
def test_gpu_a_damaged_jpeg_decoded_on_device_is_the_same_corrupt_dataset(tmp_path: Path) -> None:
    """A stored JPEG whose chunk passes its checksum but which does not decode: with decode_on_device=True the
    same DatasetCorruptError (tensor, samples, chunk) as decoding on the CPU."""
    from tests.storage.test_integrity_paths import _undecodable_png

    damaged = _undecodable_png(tmp_path / "ds", compression="jpeg")
    ds = lc.load(str(damaged.path))
    errors = []
    for on_device in (False, True):
        out = lc.empty(str(tmp_path / f"out-{on_device}"), overwrite=True)
        out.create_tensor("means", dtype="float32")
        with pytest.raises(lc.DatasetCorruptError) as info:
            Mean().eval(ds, out, num_workers=GPUS, devices="cuda", batch_size=8, decode_on_device=on_device,
                        progressbar=False)  # fmt: skip
        errors.append(str(info.value))
    assert "'img'" in errors[0]
    assert errors[1] == errors[0]
