"""Footprint (issue 12): how many bytes a dataset takes next to its source, without ``compact()``.

* the demo folder: 600 synthetic 48x48 images in PNG, JPEG, WebP and BMP files, ingested as the demo
  does (``image_compression="png"``, 2 workers);
* a JPEG folder: 300 photo-like JPEG files of 200-320 px (quality 90), ingested with the defaults
  (kept as JPEG);
* W1: 60,000 28x28 images + labels, the input written by one ``extend`` and the output of the
  flip eval on 2 workers (many writers, each with its own slot).

"ours" is the dataset's bytes (the sum of its files' sizes: what an object store bills; ``du``'s
allocated blocks are in the note), the baseline is the source's bytes. The target is the one of
issue 12: at most 1.2x the encoded sample bytes plus a small fixed cost (64 KiB) per tensor, where the
encoded bytes are the stored samples' own bytes for images (PNG/JPEG blobs) and, for zstd-compressed
numbers, what one plain zarr array of them takes with the same codec and chunk size.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import numpy as np

from bench import Row, scratch_dir, suite

FIXED_PER_TENSOR = 64 << 10
MB = 1e6


def folder_bytes(path: str) -> int:
    """The sum of the sizes of the files under ``path``."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def allocated_bytes(path: str) -> int | None:
    """What ``du`` says the folder occupies (whole file-system blocks), or None without ``du``."""
    try:
        out = subprocess.run(["du", "-sk", path], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return int(out.split()[0]) * 1024


def sample_bytes(ds: Any) -> int:
    """The bytes the samples of every tensor take as stored (encoded blobs, or raw numbers)."""
    from lakecompute.testing.internals import dataset_core

    states = dataset_core(ds).txn.head.tensors.values()
    return sum(f.nbytes for state in states for f in state.fragments)


def _row(name: str, ds_path: str, source: int, encoded: int, tensors: int, what: str, note: str) -> Row:
    stored = folder_bytes(ds_path)
    du = allocated_bytes(ds_path)
    limit = 1.2 * encoded + FIXED_PER_TENSOR * tensors
    r = Row(
        name,
        stored / MB,
        source / MB,
        "MB",
        "<= 1.2x encoded + 64 KiB/tensor",
        ok=stored <= limit,
        baseline_name=what,
        note=(
            f"{stored / encoded:.2f}x the encoded samples ({encoded / MB:.2f} MB); "
            + (f"du {du / MB:.2f} MB; " if du is not None else "")
            + note
        ),
    )
    return r


def _plain_zarr_bytes(root: str, arrays: dict[str, np.ndarray]) -> int:
    """What the arrays take as plain zarr arrays, zstd level 1 in chunks of about 1 MiB (our codec)."""
    import zarr

    for name, values in arrays.items():
        sample = max(1, values[0].nbytes)
        rows = max(1, (1 << 20) // sample)
        z = zarr.create_array(
            f"{root}/{name}",
            shape=values.shape,
            chunks=(rows, *values.shape[1:]),
            dtype=values.dtype,
            compressors=(zarr.codecs.ZstdCodec(level=1),),
        )
        z[:] = values
    return folder_bytes(root)


@suite("footprint")
def footprint(opts: Any) -> list[Row]:
    """Dataset bytes / source bytes: the demo folder, a JPEG folder and W1 (60k 28x28), no compact()."""
    quick = bool(opts.quick)
    with scratch_dir("lc-bench-footprint-") as tmp:
        return [_demo_row(tmp, quick), _jpeg_row(tmp, quick), *_w1_rows(tmp, quick)]


def _demo_row(tmp: str, quick: bool) -> Row:
    """The demo folder (4 formats) ingested as PNG."""
    import lakecompute as lc
    from lakecompute.demo import write_image_folder

    n = 120 if quick else 600
    write_image_folder(f"{tmp}/demo-files", n=n, size=(48, 48))
    ds = lc.ingest_classification(
        f"{tmp}/demo-files", f"{tmp}/demo", image_compression="png", num_workers=2, progressbar=False
    )
    return _row(
        f"demo folder ({n} files, 4 formats) -> dataset",
        f"{tmp}/demo",
        folder_bytes(f"{tmp}/demo-files"),
        sample_bytes(ds),
        2,
        "the image files",
        "stored as PNG, 2 workers",
    )


def _jpeg_row(tmp: str, quick: bool) -> Row:
    """A folder of JPEG photos ingested with the defaults (kept as JPEG)."""
    from PIL import Image

    import lakecompute as lc
    from bench.transforms import photos

    n = 60 if quick else 300
    pictures, _ = photos(n, seed=4)
    for i, picture in enumerate(pictures):
        folder = f"{tmp}/jpeg-files/{'ab'[i % 2]}"
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(picture).save(f"{folder}/{i:04d}.jpg", quality=90)
    del pictures
    ds = lc.ingest_classification(f"{tmp}/jpeg-files", f"{tmp}/jpeg", num_workers=2, progressbar=False)
    assert ds.images.sample_compression == "jpeg"
    return _row(
        f"JPEG folder ({n} photos) -> dataset",
        f"{tmp}/jpeg",
        folder_bytes(f"{tmp}/jpeg-files"),
        sample_bytes(ds),
        2,
        "the JPEG files",
        "defaults: kept as JPEG, 2 workers",
    )


def _w1_rows(tmp: str, quick: bool) -> list[Row]:
    """W1: compressed numbers, written by one writer and by an eval's workers."""
    import lakecompute as lc
    from bench._data import mnist_like
    from lakecompute.testing.internals import dataset_core

    n = 10_000 if quick else 60_000
    images, labels = mnist_like(n, seed=0)
    encoded = _plain_zarr_bytes(f"{tmp}/w1-zarr", {"images": images, "labels": labels})
    src = lc.empty(f"{tmp}/w1", overwrite=True)
    with src:
        src.create_tensor("images", htype="image")
        src.create_tensor("labels", htype="class_label")
        src.extend({"images": images, "labels": labels})
    raw = images.nbytes + labels.nbytes

    @lc.compute
    def flip(sample_in: Any, sample_out: Any) -> None:
        sample_out.append(
            {"labels": sample_in.labels.numpy(), "images": np.flip(sample_in.images.numpy(), axis=0)}
        )

    out = lc.like(f"{tmp}/w1-out", src, overwrite=True)
    flip().eval(src, out, num_workers=2, progressbar=False)
    writers = len(dataset_core(lc.load(f"{tmp}/w1-out")).txn.head.state("images").fragments)
    what = f"the raw arrays ({raw / MB:.1f} MB as numpy)"
    return [
        _row(name, path, raw, encoded, 2, what, note + "; encoded = plain zarr, same codec")
        for name, path, note in (
            (f"W1 ({n:,} 28x28) written by one extend", f"{tmp}/w1", "zstd, 1 writer"),
            (f"W1 ({n:,} 28x28) eval output, 2 workers", f"{tmp}/w1-out", f"zstd, {writers} task slots"),
        )
    ]
