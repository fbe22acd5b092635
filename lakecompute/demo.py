"""The main job a newcomer runs (``make demo`` / ``lakecompute demo``), and the image folders it,
the examples and the tests ingest.

The demo writes a folder of synthetic image files (PNG, JPEG, WebP and BMP, in class sub-folders),
ingests it with `lakecompute.ingest_classification`, runs the tutorial's flip → resize pipeline
on worker processes with a progress bar, and writes before/after contact sheets.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import lakecompute as lc
from lakecompute.ingest import FORMAT_EXTENSIONS

__all__ = ["flip_vertical", "resize", "run_demo", "write_image_folder"]


def write_image_folder(
    root: str | os.PathLike[str],
    n: int = 60,
    size: tuple[int, int] = (48, 48),
    formats: Sequence[str] = ("png", "jpeg", "webp", "bmp"),
    seed: int = 0,
    vary_size: bool = False,
) -> dict[str, int]:
    """Write ``n`` synthetic images into ``root/<class>/`` (circle, square, triangle).

    Image ``i`` is saved in ``formats[i % len(formats)]`` as ``<class>/<i:05d>.<ext>``, so a sorted
    listing gives the images in the order they were made.

    Args:
        root: the folder to write (created if missing).
        n: how many images.
        size: height and width of each image.
        formats: file formats to cycle through (``png``, ``jpeg``, ``webp``, ``bmp``).
        seed: makes the pictures reproducible.
        vary_size: give every third image a different size (height and width plus 8).

    Returns:
        Images written per class name.
    """
    from PIL import Image

    from lakecompute.testing.data import CLASS_NAMES, make_images

    images, labels = make_images(n, size, rgb=True, seed=seed)
    counts = dict.fromkeys(CLASS_NAMES, 0)
    for i, (pixels, label) in enumerate(zip(images, labels, strict=True)):
        fmt = formats[i % len(formats)]
        name = CLASS_NAMES[int(label)]
        folder = os.path.join(os.fspath(root), name)
        os.makedirs(folder, exist_ok=True)
        image = Image.fromarray(pixels)
        if vary_size and i % 3 == 2:
            image = image.resize((size[1] + 8, size[0] + 8))
        options: dict[str, Any] = (
            {"quality": 95} if fmt == "jpeg" else {"lossless": True} if fmt == "webp" else {}
        )
        image.save(os.path.join(folder, f"{i:05d}{FORMAT_EXTENSIONS[fmt]}"), format=fmt.upper(), **options)
        counts[name] += 1
    return counts


def _clear_image_folder(root: str) -> None:
    """Remove an image folder an earlier demo wrote, and nothing else: a folder holding anything the demo
    does not write (another file name, another folder) is refused, never deleted."""
    import re
    import shutil

    from lakecompute.testing.data import CLASS_NAMES

    if not os.path.isdir(root):
        return
    ours = re.compile(r"\d{5}(" + "|".join(re.escape(e) for e in FORMAT_EXTENSIONS.values()) + ")")
    for entry in sorted(os.listdir(root)):
        folder = os.path.join(root, entry)
        names = os.listdir(folder) if entry in CLASS_NAMES and not os.path.islink(folder) else None
        odd = entry if names is None else next((n for n in names if not ours.fullmatch(n)), None)
        if odd is not None:
            raise lc.InvalidArgumentError(
                f"{root!r} holds {os.path.join(entry, odd) if names else odd!r}, which the demo did not "
                "write; the demo replaces only its own image folder. Choose another --output-dir, or move "
                "the folder away."
            )
    shutil.rmtree(root)


@lc.compute
def flip_vertical(sample_in: lc.Row, sample_out: Any) -> None:
    """Flip each image upside down; keep its label."""
    sample_out.append(
        {"labels": sample_in.labels.numpy(), "images": np.flip(sample_in.images.numpy(), axis=0)}
    )


@lc.compute
def resize(sample_in: lc.Row, sample_out: Any, new_size: tuple[int, int]) -> None:
    """Resize each image (bilinear); keep its label."""
    from PIL import Image

    image = Image.fromarray(sample_in.images.numpy()).resize(new_size, Image.Resampling.BILINEAR)
    sample_out.labels.append(sample_in.labels.numpy())
    sample_out.images.append(np.asarray(image))


def run_demo(
    out_dir: str = "demo-output", n: int = 600, num_workers: int = 2, progressbar: bool = True
) -> dict[str, str]:
    """Run the demo; returns the paths it wrote (``files``, ``input``, ``output``, ``before``, ``after``)."""
    from lakecompute.viz import contact_sheet, sample_indices

    os.makedirs(out_dir, exist_ok=True)
    files = os.path.join(out_dir, "shapes-files")
    src_path = os.path.join(out_dir, "shapes")
    dst_path = os.path.join(out_dir, "shapes-flipped-64")

    print(f"1. Writing {n} synthetic images (48x48; PNG, JPEG, WebP, BMP) into {files}/<class>/ ...")
    _clear_image_folder(files)
    counts = write_image_folder(files, n=n, size=(48, 48))
    print("   " + ", ".join(f"{name}: {count}" for name, count in counts.items()))

    print(f"\n2. Ingesting them with lc.ingest_classification({files!r}, {src_path!r}) ...")
    src = lc.ingest_classification(
        files,
        src_path,
        image_compression="png",
        num_workers=num_workers,
        progressbar=progressbar,
        overwrite=True,
    )
    src.summary()

    print(
        f"\n3. Running lc.compose([flip_vertical(), resize(new_size=(64, 64))]) on {num_workers} workers ..."
    )
    out = lc.like(dst_path, src, overwrite=True)
    pipeline = lc.compose([flip_vertical(), resize(new_size=(64, 64))])
    t0 = time.perf_counter()
    result = pipeline.eval(src, out, num_workers=num_workers, progressbar=progressbar)
    elapsed = time.perf_counter() - t0
    print(f"   {result}  ({n / elapsed:.0f} samples/s)")
    out.summary()

    before = os.path.join(out_dir, "before.png")
    after = os.path.join(out_dir, "after.png")
    # Ingest orders the samples by class, so the first 24 would be one class: take 8 of each, spread out.
    shown = sample_indices(src, 24)
    contact_sheet(src, indices=shown, cols=8, title="before: ingested 48x48 images").save(before)
    contact_sheet(out, indices=shown, cols=8, title="after: flip_vertical -> resize(64, 64)").save(after)

    print("\n4. Wrote:")
    paths = {"files": files, "input": src_path, "output": dst_path, "before": before, "after": after}
    labels = {
        "files": "image files",
        "input": "input dataset",
        "output": "output dataset",
        "before": "contact sheet",
        "after": "contact sheet",
    }
    for key, path in paths.items():
        print(f"   {labels[key]:15s} {os.path.abspath(path)}")
    print(
        f"\nLook inside:  lakecompute info {dst_path}\n"
        f"              lakecompute log {dst_path}\n"
        f"              lakecompute show {dst_path} --tensor images --rows 2 --cols 6 -o grid.png\n"
        f"              lakecompute view {dst_path}      (in the browser: samples, versions, diffs)\n"
        f"In Python:    lc.load({dst_path!r})"
    )
    return paths
