"""Adding a computed column (issue 9): in place, only the new column is written.

Seed 000's job — add a column of model outputs to a dataset — on W1's 60,000 28x28 images: a 64-float
embedding per image from a fixed random projection (a stand-in for a model), computed in batches of 256.

* **ours, in place**: ``ds.create_tensor("emb")`` then ``Embed().eval(ds, skip_ok=True)``. The new version
  names the images' and labels' existing stored data; only the column is written.
* **copy** (what users had to do before, and what examples/03 did): ``lc.like`` a new dataset with the
  extra tensor and eval every image, label and embedding into it.
* **floor**: the same embeddings in a plain numpy loop into a preallocated array, encoded as the dataset
  stores it (zstd chunks), from images decoded as stored.

The bytes rows measure what each approach added to disk (``du`` of the dataset folder before and after),
split into the column's own stored bytes and everything else, against the images' stored bytes.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

from bench import Row, scratch_dir, suite
from bench._data import mnist_like
from bench.transforms import Stored

N = 60_000
DIM = 64
BATCH = 256


def _folder_bytes(path: str, under: str = "") -> int:
    total = 0
    for root, _dirs, files in os.walk(os.path.join(path, under)):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def _projection() -> np.ndarray:
    return (np.random.default_rng(1).standard_normal((28 * 28, DIM)) / 28).astype(np.float32)


def _embed(images: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.tanh(images.reshape(len(images), -1).astype(np.float32) / 255 @ w)


def _floor(stored_images: Stored, w: np.ndarray) -> float:
    t0 = time.perf_counter()
    images = stored_images.array()
    out = np.empty((len(images), DIM), dtype=np.float32)
    for lo in range(0, len(images), BATCH):
        out[lo : lo + BATCH] = _embed(images[lo : lo + BATCH], w)
    Stored(out)
    return time.perf_counter() - t0


def _source(path: str, images: np.ndarray, labels: np.ndarray) -> Any:
    import lakecompute as lc

    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image")
        ds.create_tensor("labels", htype="class_label", class_names=[str(i) for i in range(10)])
        ds.images.extend(images)
        ds.labels.extend(labels)
    return ds


def _in_place(path: str, images: np.ndarray, labels: np.ndarray, w: np.ndarray) -> tuple[float, int, int]:
    """Seconds, bytes added, and the new column's own stored bytes (its segment) for the in-place eval."""
    import lakecompute as lc

    @lc.compute
    def embed(sample_in: Any, sample_out: Any, w: np.ndarray) -> None:
        sample_out.emb.extend(_embed(sample_in.images.numpy(), w))

    ds = _source(path, images, labels)
    ds.create_tensor("emb", htype="embedding", dtype="float32")
    before = _folder_bytes(path)
    segments_before = set(os.listdir(os.path.join(path, "segments")))
    t0 = time.perf_counter()
    embed(w=w).eval(ds, skip_ok=True, batch_size=BATCH, progressbar=False)
    seconds = time.perf_counter() - t0
    added = _folder_bytes(path) - before
    new = set(os.listdir(os.path.join(path, "segments"))) - segments_before
    column = sum(_folder_bytes(path, f"segments/{s}") for s in new)
    return seconds, added, column


def _copy(path: str, src: Any, w: np.ndarray) -> tuple[float, int]:
    """Seconds and bytes of the copy approach (a new dataset with every tensor plus the column)."""
    import lakecompute as lc

    @lc.compute
    def embed_copy(sample_in: Any, sample_out: Any, w: np.ndarray) -> None:
        images = sample_in.images.numpy()
        sample_out.extend({"images": images, "labels": sample_in.labels.numpy(), "emb": _embed(images, w)})

    out = lc.like(path, src, overwrite=True)
    out.create_tensor("emb", htype="embedding", dtype="float32")
    before = _folder_bytes(path)
    t0 = time.perf_counter()
    embed_copy(w=w).eval(src, out, batch_size=BATCH, progressbar=False)
    return time.perf_counter() - t0, _folder_bytes(path) - before


@suite("columns")
def columns(opts: Any) -> list[Row]:
    """Add a 64-float column to 60k images: in place (only the column is written) vs a copy and a floor."""
    quick = bool(getattr(opts, "quick", False))
    runs = max(1, int(getattr(opts, "runs", 3)))
    n = 10_000 if quick else N
    images, labels = mnist_like(n)
    w = _projection()
    stored = Stored(images)
    times: dict[str, list[float]] = {"ours": [], "copy": [], "floor": []}
    with scratch_dir("lc-bench-columns-") as tmp:
        image_bytes = _folder_bytes(_source(f"{tmp}/images-only", images, labels).path)
        for run in range(runs):
            seconds, added, column = _in_place(f"{tmp}/in-place-{run}", images, labels, w)
            times["ours"].append(seconds)
            copy_seconds, copy_added = _copy(f"{tmp}/copy-{run}", lc_load(f"{tmp}/images-only"), w)
            times["copy"].append(copy_seconds)
            times["floor"].append(_floor(stored, w))
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = added - column
    note = f"{n:,} images, {DIM} float32 each, batch {BATCH}, 0 workers; median of {runs}"
    return [
        Row("add column in place: bytes besides the column", extra / 1e6, image_bytes / 1e6, "MB",
            "< 10% of the images' bytes", extra < 0.1 * image_bytes, "images' stored bytes",
            f"the column itself: {column / 1e6:.1f} MB; in all {added / 1e6:.1f} MB written"),
        Row("add column by copy: bytes written", copy_added / 1e6, image_bytes / 1e6, "MB", "", None,
            "images' stored bytes", "what users did before: every image and label written again"),
        Row("add column in place: time", med["ours"] * 1e3, med["floor"] * 1e3, "ms", "", None,
            "numpy loop + zstd encode", note),
        Row("add column by copy: time", med["copy"] * 1e3, med["ours"] * 1e3, "ms", "", None,
            "in place", "the copy rewrites the images too"),
    ]  # fmt: skip


def lc_load(path: str) -> Any:
    import lakecompute as lc

    return lc.load(path)
