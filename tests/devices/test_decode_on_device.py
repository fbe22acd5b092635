"""``eval(decode_on_device=True)`` on the CPU: refused where no worker has a GPU or the input has no JPEG
images, decoded on the CPU with a warning where a worker cannot decode on its GPU (the same values as
without the option), the ``.torch()`` accessor, and the routing of stored bytes to the device or the host.
The device decode itself, against the CPU's, runs in tests/devices/test_gpu.py on a machine with a GPU."""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.compression import encode_image
from lakecompute.compute import EvalOptions
from lakecompute.compute._sizes import estimate_bytes
from lakecompute.htypes._device import (
    as_stored,
    decoding_device,
    decoding_on,
    is_tensor,
    jpeg_mode,
    stack_on_device,
)
from lakecompute.schedulers import visible_devices

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(180)

#: A machine with a real GPU decodes on it: the CPU fallbacks below are for machines without one.
no_real_gpu = pytest.mark.skipif(
    len(visible_devices()) > 0, reason="a GPU is here (see tests/devices/test_gpu.py)"
)


def _jpegs(path: Path, n: int = 40) -> tuple[lc.Dataset, np.ndarray]:
    """A dataset of ``n`` 24x32 JPEG images (a PNG tensor beside them); the images as the CPU decodes them."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="jpeg")
    ds.create_tensor("masks", htype="image", sample_compression="png")
    rng = np.random.default_rng(0)
    ds.images.extend(rng.integers(0, 256, (n, 24, 32, 3), dtype=np.uint8))
    ds.masks.extend(rng.integers(0, 2, (n, 24, 32), dtype=np.uint8))
    ds.create_tensor("sums", dtype="int64")
    ds.create_tensor("kind", htype="text")
    return ds, ds.images.numpy()


@lc.compute
class Sums:
    """Per image: the sum of its pixels as the function gets them, and the type of the batch's value."""

    def __call__(self, batch: Any, sample_out: Any) -> None:
        images = batch.images.numpy()
        sample_out.sums.extend(images.reshape(len(images), -1).astype(np.int64).sum(axis=1))
        sample_out.kind.extend([type(batch.images.data()).__name__] * len(images))


def test_decode_on_device_without_a_gpu_for_the_workers_is_refused(tmp_path: Path) -> None:
    """Without devices= (and not on Ray with num_gpus) no worker has a GPU: refused before anything runs."""
    ds, _ = _jpegs(tmp_path / "ds")
    with pytest.raises(lc.InvalidArgumentError, match=re.escape("no worker is placed on one (devices=None)")):
        Sums().eval(ds, num_workers=1, batch_size=8, skip_ok=True, decode_on_device=True, progressbar=False)
    assert len(lc.load(ds.path).sums) == 0
    with pytest.raises(lc.InvalidTypeError, match="decode_on_device"):
        Sums().eval(ds, num_workers=1, batch_size=8, skip_ok=True, decode_on_device="yes", progressbar=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "said"),
    [
        ("png", "its image tensors are 'masks' (png)"),
        ("plain", "it has no image tensor"),
        ("list", "data_in is not a dataset"),
    ],
)
def test_decode_on_device_without_jpeg_images_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: str, said: str
) -> None:
    """Input with no JPEG image tensor would decode nothing on the device: refused, saying what it has."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    ds = lc.empty(str(tmp_path / "in"), overwrite=True)
    if make == "png":
        ds.create_tensor("masks", htype="image", sample_compression="png")
        ds.masks.extend(np.zeros((4, 8, 8), np.uint8))
    else:
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.arange(4))
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("y", dtype="int64")
    data_in: Any = [1, 2, 3] if make == "list" else ds
    with pytest.raises(lc.InvalidArgumentError, match=re.escape(said)):
        lc.compute(_copy)().eval(data_in, out, num_workers=1, devices="cuda", decode_on_device=True)


def _copy(sample_in: Any, sample_out: Any) -> None:
    sample_out.y.append(np.int64(0))


@no_real_gpu
@pytest.mark.timeout(300)
def test_a_worker_that_cannot_decode_on_its_gpu_decodes_on_the_cpu_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A worker placed on a GPU it cannot use (declared by CUDA_VISIBLE_DEVICES on this machine without one:
    no torchvision in the light lane, no CUDA driver in the full lane) warns once, on its stderr, and decodes
    on the CPU: every value is the CPU decode's, as numpy arrays, and the eval completes."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    ds, images = _jpegs(tmp_path / "ds", 96)
    result = Sums().eval(
        ds,
        num_workers=1,
        devices="cuda",
        batch_size=16,
        skip_ok=True,
        decode_on_device=True,
        progressbar=False,
    )
    assert result.outputs["sums"] == 96
    again = lc.load(ds.path)
    np.testing.assert_array_equal(again.sums.numpy(), images.reshape(96, -1).astype(np.int64).sum(axis=1))
    assert {str(k) for k in again.kind.numpy(aslist=True)} == {"StackedList"}
    err = capfd.readouterr().err
    assert err.count("decode_on_device=True, but this worker cannot decode on its GPU") == 1, err
    assert "decoded on the CPU and arrive as numpy arrays" in err


def test_decode_on_device_in_the_calling_process_warns_and_decodes_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """num_workers=0 (and the threaded scheduler) read in this process, whose readers do not know their GPU:
    a warning says the images are decoded on the CPU, and the values are the CPU decode's."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    ds, images = _jpegs(tmp_path / "ds", 24)
    for options in ({"num_workers": 0}, {"num_workers": 2, "scheduler": "threaded"}):
        with pytest.warns(lc.LakeComputeWarning, match="decoded on the CPU") as record:
            Sums().eval(ds, devices="cuda", batch_size=8, skip_ok=True, decode_on_device=True, rerun=True,
                        progressbar=False, **options)  # fmt: skip
        assert record[0].filename == __file__
        again = lc.load(ds.path)
        np.testing.assert_array_equal(again.sums.numpy(), images.reshape(24, -1).astype(np.int64).sum(axis=1))


def test_decode_on_device_is_part_of_the_evals_identity_only_when_set() -> None:
    """nvJPEG's pixels differ from the CPU decoder's: an eval that decodes on the device is another eval (so a
    resume does not mix the two); without the option the identity is what it always was."""
    plain = EvalOptions.parse({"devices": "cuda", "batch_size": 8}).identity()
    assert "decode_on_device" not in plain
    on = EvalOptions.parse({"devices": "cuda", "batch_size": 8, "decode_on_device": True}).identity()
    assert on == {**plain, "decode_on_device": True}
    ray = EvalOptions.parse({"scheduler": lc.schedulers.Ray(num_gpus=1), "decode_on_device": True})
    assert ray.decode_on_device


@lc.compute
class AsTorch:
    """Writes whether ``.torch()`` gave a CPU tensor sharing the batch's array, and its sums."""

    def __call__(self, batch: Any, sample_out: Any) -> None:
        x = batch.images.torch()
        shared = x.data_ptr() == batch.images.numpy().ctypes.data
        sample_out.sums.extend(x.reshape(len(x), -1).to(torch.int64).sum(dim=1).numpy())
        sample_out.kind.extend([f"{x.device.type} {x.dtype} {tuple(x.shape[1:])} {shared}"] * len(x))


def test_torch_gives_the_batch_on_the_workers_device(tmp_path: Path) -> None:
    """Without devices the worker's device is the CPU: ``.torch()`` is the stacked batch as a tensor, the same
    memory as ``numpy()``, uint8 BxHxWxC, with the values stored."""
    ds, images = _jpegs(tmp_path / "ds", 40)
    AsTorch().eval(ds, num_workers=1, batch_size=16, skip_ok=True, progressbar=False)
    again = lc.load(ds.path)
    np.testing.assert_array_equal(again.sums.numpy(), images.reshape(40, -1).astype(np.int64).sum(axis=1))
    assert {str(k) for k in again.kind.numpy(aslist=True)} == {"cpu torch.uint8 (24, 32, 3) True"}


def test_estimate_bytes_counts_a_tensors_bytes() -> None:
    """A batch decoded on a GPU sizes the blocks by what it holds there (not as an unknown object)."""
    assert estimate_bytes(torch.zeros((4, 8, 8, 3), dtype=torch.uint8)) == 768
    assert estimate_bytes({"images": torch.zeros((2, 10), dtype=torch.float32)}) == 80


def test_device_values_are_shaped_as_stored_and_stacked() -> None:
    """nvJPEG's CxHxW output is given as the host decode shapes it (HxWxC, HxW), a view; a size that is not
    the stored one goes to the host; a batch of one shape stacks, of several stays a list."""
    chw = torch.arange(2 * 3 * 4 * 3, dtype=torch.uint8).reshape(2, 3, 4, 3)[0].permute(2, 0, 1)  # 3x3x4
    hwc = as_stored(chw, (3, 4, 3))
    assert hwc is not None
    assert tuple(hwc.shape) == (3, 4, 3)
    assert hwc.data_ptr() == chw.data_ptr()
    np.testing.assert_array_equal(hwc.numpy(), chw.permute(1, 2, 0).numpy())
    gray = torch.zeros((1, 5, 6), dtype=torch.uint8)
    assert tuple(as_stored(gray, (5, 6)).shape) == (5, 6)
    assert tuple(as_stored(gray, (5, 6, 1)).shape) == (5, 6, 1)
    assert as_stored(gray, (6, 5)) is None
    stacked = stack_on_device([hwc, hwc + 1])
    assert is_tensor(stacked)
    assert tuple(stacked.shape) == (2, 3, 4, 3)
    ragged = stack_on_device([hwc, gray[0]])
    assert isinstance(ragged, list)
    assert len(ragged) == 2
    assert not is_tensor(np.zeros(3))
    assert not is_tensor([1])


def test_blobs_go_to_the_device_only_when_whole_jpegs_of_a_shape_it_gives() -> None:
    """RGB and greyscale JPEGs go to nvJPEG (mode 3 and 1); bytes that are not a whole JPEG (damaged: no
    start or end marker), or stored shapes it does not give, go to the host, whose decoder reports them."""
    rgb = encode_image(np.zeros((8, 8, 3), np.uint8), "jpeg")
    gray = encode_image(np.zeros((8, 8), np.uint8), "jpeg")
    assert jpeg_mode(rgb, (8, 8, 3)) == 3
    assert jpeg_mode(np.frombuffer(rgb, np.uint8), (8, 8, 3)) == 3
    assert jpeg_mode(memoryview(gray), (8, 8)) == 1
    assert jpeg_mode(gray, (8, 8, 1)) == 1
    assert jpeg_mode(rgb, (8, 8, 4)) is None
    assert jpeg_mode(rgb[:-40], (8, 8, 3)) is None  # truncated: no end-of-image marker
    assert jpeg_mode(b"\x00" + rgb[1:], (8, 8, 3)) is None
    assert jpeg_mode(encode_image(np.zeros((8, 8, 3), np.uint8), "png"), (8, 8, 3)) is None


def _pillow_jpeg(mode: str, **options: Any) -> bytes:
    """A 16x16 JPEG of Pillow's ``mode`` (L, RGB, CMYK), written by Pillow with ``options``."""
    from PIL import Image

    pixels = np.random.default_rng(3).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, "JPEG", **options)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("mode", "options", "shape", "expected"),
    [
        ("RGB", {"subsampling": 0}, (16, 16, 3), 3),  # 4:4:4
        ("RGB", {"subsampling": 1}, (16, 16, 3), 3),  # 4:2:2
        ("RGB", {"subsampling": 2}, (16, 16, 3), 3),  # 4:2:0
        ("RGB", {"progressive": True}, (16, 16, 3), 3),
        ("L", {}, (16, 16), 1),  # Pillow's default for greyscale: sampling factors 1x1
        ("L", {"subsampling": 2}, (16, 16), None),  # 2x2 factors on one component: nvJPEG misdecodes it
        ("L", {"subsampling": 1}, (16, 16, 1), None),  # 2x1
        ("L", {}, (16, 16, 3), None),  # a greyscale frame stored as colour
        ("RGB", {}, (16, 16), None),  # a colour frame stored as greyscale
        ("CMYK", {}, (16, 16, 3), None),  # four components (and Adobe's transform)
    ],
)
def test_only_frames_nvjpeg_decodes_as_the_host_does_go_to_the_device(
    mode: str, options: dict[str, Any], shape: tuple[int, ...], expected: int | None
) -> None:
    """The frame header decides: the subsamplings, codings and colour models checked against the host's
    decode on a GPU go to it; the rest, a greyscale frame with sampling factors other than 1x1 among them,
    to the host."""
    assert jpeg_mode(_pillow_jpeg(mode, **options), shape) == expected


def test_arithmetic_coded_lossless_and_rgb_coded_frames_go_to_the_host() -> None:
    """Frames Pillow does not write, made by editing a baseline one's header: arithmetic-coded (SOF9) and
    lossless (SOF3) frames, RGB-coded colour (component ids R, G, B, or an Adobe segment saying no
    transform), and 4:1:1 luma go to the host."""
    rgb = bytearray(_pillow_jpeg("RGB", subsampling=2))
    sof = rgb.index(b"\xff\xc0")
    assert jpeg_mode(bytes(rgb), (16, 16, 3)) == 3
    for marker in (0xC9, 0xC3):
        edited = bytearray(rgb)
        edited[sof + 1] = marker
        assert jpeg_mode(bytes(edited), (16, 16, 3)) is None
    named = bytearray(rgb)
    for k, name in enumerate(b"RGB"):
        named[sof + 10 + 3 * k] = name
    assert jpeg_mode(bytes(named), (16, 16, 3)) is None
    wide = bytearray(rgb)
    wide[sof + 11] = 0x41  # luma 4x1
    assert jpeg_mode(bytes(wide), (16, 16, 3)) is None
    adobe = b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00"
    assert jpeg_mode(bytes(rgb[:2]) + adobe + b"\x00" + bytes(rgb[2:]), (16, 16, 3)) is None
    assert jpeg_mode(bytes(rgb[:2]) + adobe + b"\x01" + bytes(rgb[2:]), (16, 16, 3)) == 3


@given(st.binary(max_size=64), st.lists(st.integers(0, 5), max_size=4).map(tuple))
def test_mode_property_any_bytes_and_shape_give_a_mode_or_none(blob: bytes, shape: tuple[int, ...]) -> None:
    """Whatever the stored bytes and shape, the routing answers 3, 1 or None (the host), never raises."""
    jpeg_like = b"\xff\xd8" + blob + b"\xff\xd9"
    for data in (blob, jpeg_like):
        assert jpeg_mode(data, shape) in (None, 1, 3)


def test_decoding_on_is_per_thread_and_restored() -> None:
    """The device is this thread's, for the block only: a read outside it, or on another thread, decodes on
    the host (nothing is decoded on a device here: no CUDA is touched)."""
    seen: list[Any] = []
    with decoding_on("cuda:0"):
        seen.append(decoding_device())
        with decoding_on(None):
            seen.append(decoding_device())
        seen.append(decoding_device())
        other = threading.Thread(target=lambda: seen.append(decoding_device()))
        other.start()
        other.join()
    seen.append(decoding_device())
    assert seen == ["cuda:0", None, "cuda:0", None, None]
