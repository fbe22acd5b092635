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


#: The columns of `_jpeg_dataset`: how each is written, and the largest mean absolute difference per image
#: allowed between the device's decode and the host's. 2 levels is torchvision's own test of nvJPEG, for
#: what nvJPEG decodes another way than libjpeg-turbo: chroma upsampling (measured on an H200: 0.5-1.4 on
#: 224x224 4:2:0 and 4:2:2 images) and progressive frames (0.02-0.04); 0 where nothing differs.
_JPEG_COLUMNS = {
    "smooth": 2.0,  # ours, 4:2:0, 224x224 photo-like
    "exact": 0.0,  # Pillow, 4:4:4, sharp 40x56: no chroma upsampling to differ in
    "gray": 0.0,  # ours, greyscale with sampling factors 1x1
    "gray22": 0.0,  # Pillow, greyscale with 2x2 sampling factors: nvJPEG misdecodes it, the host decodes it
    "progressive": 2.0,  # Pillow, progressive 4:4:4, sharp 40x56
}


def _jpeg_dataset(path: Path, n: int) -> lc.Dataset:
    """``n`` JPEGs in each column of `_JPEG_COLUMNS`, with ``<column>_px`` columns for the pixels the
    workers get and a column for where the batches were."""
    from PIL import Image

    ds = lc.empty(str(path / "ds"), overwrite=True)
    for name in _JPEG_COLUMNS:
        ds.create_tensor(name, htype="image", sample_compression="jpeg")
        ds.create_tensor(f"{name}_px", dtype="uint8")
    ds.create_tensor("where", htype="text")
    rng = np.random.default_rng(1)
    for k in range(n):
        small = Image.fromarray(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8))
        blobs = Image.fromarray(rng.integers(0, 256, (3, 3, 3), dtype=np.uint8))
        ds.smooth.append(np.asarray(blobs.resize((224, 224), Image.BILINEAR)))
        ds.gray.append(np.asarray(small.convert("L").resize((20, 24), Image.BICUBIC)))
        files = [
            ("exact", small.resize((56, 40), Image.BICUBIC), {"subsampling": 0}),
            ("gray22", small.convert("L").resize((20, 24)), {"subsampling": 2}),
            ("progressive", small.resize((56, 40)), {"subsampling": 0, "progressive": True}),
        ]
        for name, image, options in files:
            image.save(path / f"{name}-{k}.jpg", quality=90, **options)
            ds[name].append(lc.read(path / f"{name}-{k}.jpg"))
    return ds


@lc.compute
class DecodedWhere:
    """Writes back the pixels the function got (copied to the host) and where the batch was."""

    def __call__(self, batch: Any, sample_out: Any) -> None:
        for name in _JPEG_COLUMNS:
            sample_out[f"{name}_px"].extend(batch[name].data().cpu().numpy())
        images = batch.exact.data()
        same = batch.exact.torch() is images  # no copy: it is on the worker's device already
        where = f"{type(images).__name__} {images.device} {tuple(images.shape[1:])} {images.dtype} {same}"
        sample_out.where.extend([where] * len(images))


@pytest.mark.timeout(300)
def test_gpu_decode_on_device_matches_the_cpu_decode(tmp_path: Path) -> None:
    """With decode_on_device=True, JPEG batches arrive as uint8 tensors on the worker's GPU, BxHxWxC (HxW for
    greyscale) as numpy() gives them, with the host's values where nvJPEG has no chroma to upsample and
    within its documented tolerance where it has (the mean absolute difference per image under 2 levels,
    torchvision's own test of decode_jpeg on CUDA); greyscale frames nvJPEG misdecodes go to the host."""
    ds = _jpeg_dataset(tmp_path, 300)
    DecodedWhere().eval(ds, num_workers=GPUS, devices="cuda", batch_size=32, skip_ok=True,
                        decode_on_device=True, progressbar=False)  # fmt: skip
    again = lc.load(ds.path)
    assert {str(w) for w in again.where.numpy(aslist=True)} == {"Tensor cuda:0 (40, 56, 3) torch.uint8 True"}
    for name in _JPEG_COLUMNS:
        cpu = again[name].numpy().astype(np.float32)
        gpu = again[f"{name}_px"].numpy().astype(np.float32)
        assert gpu.shape == cpu.shape
        per_image = np.abs(gpu - cpu).reshape(len(cpu), -1).mean(axis=1)
        limit = _JPEG_COLUMNS[name]
        assert per_image.max() < limit if limit else per_image.max() == 0, (name, per_image.max())
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
