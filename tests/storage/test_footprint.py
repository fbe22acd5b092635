"""Footprint: a dataset takes about what its encoded samples take (at most 1.2x, plus a small fixed cost
per tensor), without compact(): no zero-padded chunk tails, whatever the number of writers."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from PIL import Image

import lakecompute as lc
from lakecompute.testing.internals import dataset_core

FIXED = 64 << 10  # bytes per tensor allowed on top of 1.2x: metadata, manifests, index rows


def _bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (what an object store bills; apparent size on disk)."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _photo(rng: np.random.Generator, size: int) -> np.ndarray:
    """Noise over a gradient: JPEG keeps it big and no generic codec can shrink the result."""
    ramp = np.linspace(0, 200, size, dtype=np.float32)
    base = ramp[None, :, None] + ramp[:, None, None] / 2
    return np.clip(base + rng.normal(0, 40, (size, size, 3)), 0, 255).astype(np.uint8)


def test_footprint_jpeg_folder_on_two_workers(tmp_path: Path) -> None:
    """120 JPEG photos ingested by 2 worker processes (many task slots) take <= 1.2x the files + fixed."""
    rng = np.random.default_rng(0)
    for i in range(120):
        folder = tmp_path / "photos" / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(_photo(rng, 96)).save(folder / f"{i:03d}.jpg", quality=90)
    files = _bytes(tmp_path / "photos")
    ds = lc.ingest_classification(tmp_path / "photos", tmp_path / "ds", progressbar=False, num_workers=2)
    assert ds.images.sample_compression == "jpeg"
    assert len(dataset_core(ds).txn.head.tensors["images"].fragments) > 2, "expected several writers' slots"
    stored = _bytes(tmp_path / "ds")
    assert stored <= 1.2 * files + 2 * FIXED, (stored, files)


def test_footprint_png_tensor_of_many_commits(tmp_path: Path) -> None:
    """A PNG tensor written by 40 separate extends (one slot, its tail rewritten each time) stays small."""
    rng = np.random.default_rng(1)
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("images", htype="image", sample_compression="png")
    encoded = 0
    for _ in range(40):
        batch = [_photo(rng, 48) for _ in range(5)]
        for img in batch:
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="PNG", compress_level=1)
            encoded += len(buf.getvalue())
        ds.images.extend(batch)
    ds.vacuum(grace_seconds=0, keep_versions=1)  # the version history is not sample data
    stored = _bytes(tmp_path / "ds")
    assert stored <= 1.2 * encoded + FIXED, (stored, encoded)


@lc.compute
def _copy(sample_in: Any, sample_out: Any) -> None:
    sample_out.append({"x": sample_in.x.numpy()})


def test_footprint_compressed_numeric_eval_output(tmp_path: Path) -> None:
    """An eval's zstd output written by 2 workers takes <= 1.2x what one plain zarr array of it takes."""
    rng = np.random.default_rng(2)
    values = (rng.random((20_000, 28, 28)) < 0.2).astype(np.uint8) * 255
    src = lc.empty(str(tmp_path / "src"))
    src.create_tensor("x", dtype="uint8")
    src.x.extend(values)
    out = lc.like(str(tmp_path / "out"), src)
    _copy().eval(src, out, num_workers=2, progressbar=False)
    plain = zarr.create_array(
        str(tmp_path / "zarr"), shape=values.shape, chunks=(1337, 28, 28), dtype="uint8",
        compressors=(zarr.codecs.ZstdCodec(level=1),),
    )  # fmt: skip
    plain[:] = values
    assert len(dataset_core(lc.load(str(tmp_path / "out"))).txn.head.tensors["x"].fragments) > 1
    for path in (tmp_path / "src", tmp_path / "out"):
        assert _bytes(path) <= 1.2 * _bytes(tmp_path / "zarr") + FIXED, path
