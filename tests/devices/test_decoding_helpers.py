"""Images decoded in helper processes (`lakecompute.compute._decoders`: the host decoder a worker placed
on a GPU gives its reads), so that its GIL is the model's: the same values as decoding here, a sample
that does not decode reported as itself, a helper that dies replaced by decoding here, nothing left in
shared memory."""

from __future__ import annotations

import glob
import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.compression import encode_image
from lakecompute.compute._decoders import decode_in_processes, decode_with_helpers, decoding_processes
from lakecompute.errors import DatasetCorruptError, InvalidArgumentError, LakeComputeWarning
from lakecompute.htypes import decode_many, decoding_on, parse_tensor_spec
from tests.helpers import wait_until
from tests.storage.test_integrity_paths import _undecodable_png

pytestmark = pytest.mark.timeout(120)

SPEC = parse_tensor_spec("images", htype="image", sample_compression="jpeg")


@pytest.fixture
def helpers() -> Iterator[None]:
    """Two decoding helpers for the test, none after it."""
    decode_in_processes(2)
    yield
    decode_in_processes(0)
    assert decoding_processes() == 0


def _images(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(24, 32, 3), (17, 9, 3), (40, 40, 1), (8, 8)]
    return [rng.integers(0, 256, shapes[k % len(shapes)], dtype=np.uint8) for k in range(n)]


def _blobs(images: list[np.ndarray], compression: str) -> list[tuple[bytes, tuple[int, ...]]]:
    return [(encode_image(a, compression), a.shape) for a in images]


def _leftovers() -> list[str]:
    return glob.glob(f"/dev/shm/lakecompute-decode-{os.getpid()}-*")


@pytest.mark.usefixtures("helpers")
@pytest.mark.parametrize("compression", ["jpeg", "png"])
def test_helpers_decode_what_this_process_would(compression: str) -> None:
    """Every value decoded in the helpers equals the value decoded here, shapes and dtypes included, and
    each is the caller's own writeable array (no file of them is left in shared memory)."""
    spec = parse_tensor_spec("images", htype="image", sample_compression=compression)
    blobs = _blobs(_images(40), compression)
    decode_in_processes(0)
    here = decode_many(spec, blobs)
    decode_in_processes(2)
    there = decode_with_helpers(spec, blobs)
    assert len(there) == len(here) == 40
    for a, b in zip(here, there, strict=True):
        assert a.shape == b.shape
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    big = max(there, key=lambda a: a.size)
    big[0] = 7  # writeable, and ours
    assert _leftovers() == []


@pytest.mark.usefixtures("helpers")
def test_blobs_as_array_views_and_shapes_of_numpy_integers_are_sent_as_given() -> None:
    """A request carries every kind of blob a read hands over (``bytes``, a uint8 array, a strided view of
    one) and shapes whose sizes are numpy integers, in one request (more than 16 blobs in several): each
    value decodes as it does here."""
    images = _images(40, seed=3)
    blobs: list[tuple[Any, tuple[Any, ...]]] = []
    for k, (blob, shape) in enumerate(_blobs(images, "png")):
        if k % 3 == 1:
            blobs.append((np.frombuffer(blob, dtype=np.uint8), tuple(np.int64(d) for d in shape)))
        elif k % 3 == 2:
            spaced = np.zeros(2 * len(blob), dtype=np.uint8)
            spaced[::2] = np.frombuffer(blob, dtype=np.uint8)
            blobs.append((spaced[::2], shape))
        else:
            blobs.append((blob, shape))
    there = decode_with_helpers(parse_tensor_spec("images", htype="image", sample_compression="png"), blobs)
    assert len(there) == 40
    for image, value in zip(images, there, strict=True):
        np.testing.assert_array_equal(value, image)


@pytest.mark.usefixtures("helpers")
def test_a_blob_that_does_not_decode_comes_back_as_its_error() -> None:
    """A damaged blob among good ones: its error in its place (as decoding here gives it), the others
    decoded."""
    blobs = _blobs(_images(12), "jpeg")
    blobs[5] = (b"\xff\xd8 not a jpeg", (24, 32, 3))
    values = decode_with_helpers(SPEC, blobs)
    assert isinstance(values[5], InvalidArgumentError)
    assert "Cannot" in str(values[5])
    assert all(isinstance(v, np.ndarray) for k, v in enumerate(values) if k != 5)


def test_a_damaged_sample_read_through_helpers_is_the_same_corrupt_dataset(tmp_path: Path) -> None:
    """A stored PNG whose chunk passes its checksum but which does not decode: read through the helpers
    (the host decoder of the reading thread, as a placed worker's reads), the same DatasetCorruptError
    (tensor, position, chunk) as decoding here."""
    damaged = _undecodable_png(tmp_path / "ds")
    errors = []
    for helpers in (0, 2):
        decode_in_processes(helpers)
        with pytest.raises(DatasetCorruptError) as info, decoding_on(None, decode_with_helpers):
            lc.load(str(damaged.path)).img[0:20].numpy()
        errors.append(str(info.value))
    decode_in_processes(0)
    assert "'img'" in errors[0]
    assert errors[1] == errors[0]


@pytest.mark.usefixtures("helpers")
def test_a_helper_that_dies_is_replaced_by_decoding_here() -> None:
    """SIGKILL every helper: the next read warns once, decodes here, and gives the right values; this
    process then has no helpers."""
    blobs = _blobs(_images(16), "png")
    decode_with_helpers(SPEC, blobs)  # the helpers are up and have worked
    helpers = _helper_pids()
    assert len(helpers) == 2
    for pid in helpers:
        os.kill(pid, signal.SIGKILL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = decode_with_helpers(SPEC, blobs)
    png = parse_tensor_spec("images", htype="image", sample_compression="png")
    decode_in_processes(0)
    for a, b in zip(values, decode_many(png, blobs), strict=True):
        np.testing.assert_array_equal(a, b)
    assert [w.category for w in caught] == [LakeComputeWarning]
    assert "decodes them itself" in str(caught[0].message)
    assert decoding_processes() == 0
    assert _leftovers() == []


@pytest.mark.usefixtures("helpers")
def test_this_processs_own_reads_go_through_its_helpers() -> None:
    """With helpers started (`lakecompute.compute.decode_in_processes`, as docs/model-columns.md says), the
    caller's own reads (`decode_many`, outside any worker) are decoded by them: with the helpers killed,
    its next read warns that it decodes itself, and gives the right values."""
    blobs = _blobs(_images(16), "png")
    png = parse_tensor_spec("images", htype="image", sample_compression="png")
    expected = decode_many(png, blobs)  # through the helpers: they are up and have worked
    helpers = _helper_pids()
    assert len(helpers) == 2
    for pid in helpers:
        os.kill(pid, signal.SIGKILL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = decode_many(png, blobs)
    assert [w.category for w in caught] == [LakeComputeWarning]
    for a, b in zip(values, expected, strict=True):
        np.testing.assert_array_equal(a, b)
    decode_in_processes(0)
    assert decode_many(png, blobs)[0].shape == expected[0].shape  # here, once they are stopped


def test_stopping_the_helpers_ends_their_processes() -> None:
    """decode_in_processes(0) (also what this process's exit does) ends every helper and leaves no file
    in shared memory."""
    decode_in_processes(2)
    decode_with_helpers(SPEC, _blobs(_images(16), "jpeg"))
    helpers = _helper_pids()
    assert len(helpers) == 2
    decode_in_processes(0)
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in helpers), what="the helpers to end")
    assert decoding_processes() == 0
    assert _leftovers() == []


@pytest.mark.usefixtures("helpers")
def test_a_forked_child_decodes_itself_not_through_its_parents_helpers() -> None:
    """A process forked from one with helpers (a loader's worker, say) has none of its own: it decodes
    here, and gets the same values, instead of waiting on an executor whose threads stayed behind."""
    blobs = _blobs(_images(16), "png")
    png = parse_tensor_spec("images", htype="image", sample_compression="png")
    expected = decode_many(png, blobs)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit hooks
        ok = decoding_processes() == 0 and all(
            np.array_equal(a, b) for a, b in zip(decode_with_helpers(png, blobs), expected, strict=True)
        )
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    assert decoding_processes() == 2


def _helper_pids() -> list[int]:
    """The helpers: the children of this process's fork server (a child of this process)."""
    children = _children(os.getpid())
    return [pid for child in children for pid in _children(child)]


def _children(pid: int) -> list[int]:
    out = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        out += [int(p) for p in Path(task).read_text().split()]
    return out


@lc.compute
class Embed:
    """A stand-in model column: waits until its process decodes with helpers, then records what it got."""

    def __call__(self, batch: Any, sample_out: Any) -> None:
        wait_until(lambda: decoding_processes() > 0, what="the decoding helpers")
        images = batch.images.numpy()
        sample_out.extend({"mean": list(images.reshape(len(images), -1).mean(axis=1)),
                           "helpers": [np.int64(decoding_processes())] * len(images)})  # fmt: skip


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a worker needs two CPUs to get a helper")
def test_a_worker_on_a_device_decodes_in_helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An eval with devices= (one GPU declared, so one worker) decodes its images in its share of the CPUs
    less one helper process, and writes what decoding here gives."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="jpeg")
    ds.images.extend(list(np.random.default_rng(1).integers(0, 256, (96, 16, 16, 3), dtype=np.uint8)))
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("mean", dtype="float64")
    out.create_tensor("helpers", dtype="int64")
    Embed().eval(ds, out, num_workers=1, devices="cuda", batch_size=16, progressbar=False)
    expected = ds.images.numpy().reshape(96, -1).mean(axis=1)
    np.testing.assert_array_equal(out.mean.numpy(), expected)
    assert set(out.helpers.numpy().tolist()) == {len(os.sched_getaffinity(0)) - 1}
    assert decoding_processes() == 0  # the caller's own reads are decoded here
