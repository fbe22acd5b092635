"""The main job a newcomer runs (``make demo`` / ``lakecompute demo``).

Builds a small image dataset, runs the tutorial's flip → resize pipeline on 2 worker processes,
and writes before/after contact sheets.
"""

from __future__ import annotations

import os
import time

import numpy as np
from PIL import Image

import lakecompute as lc
from lakecompute.testing.data import make_shapes_dataset
from lakecompute.viz import contact_sheet

__all__ = ["flip_vertical", "resize", "run_demo"]


@lc.compute
def flip_vertical(sample_in: lc.Row, sample_out: object) -> None:
    """Flip each image upside down; keep its label."""
    sample_out.append(  # type: ignore[attr-defined]  # sample_out is a SampleOut at run time
        {"labels": sample_in.labels.numpy(), "images": np.flip(sample_in.images.numpy(), axis=0)}
    )


@lc.compute
def resize(sample_in: lc.Row, sample_out: object, new_size: tuple[int, int]) -> None:
    """Resize each image (bilinear); keep its label."""
    image = Image.fromarray(sample_in.images.numpy()).resize(new_size, Image.Resampling.BILINEAR)
    sample_out.labels.append(sample_in.labels.numpy())  # type: ignore[attr-defined]
    sample_out.images.append(np.asarray(image))  # type: ignore[attr-defined]


def run_demo(out_dir: str = "demo-output", n: int = 600, num_workers: int = 2, progressbar: bool = True) -> dict[str, str]:
    """Run the demo; returns the paths it wrote."""
    os.makedirs(out_dir, exist_ok=True)
    src_path = os.path.join(out_dir, "shapes")
    dst_path = os.path.join(out_dir, "shapes-flipped-64")
    print(f"1. Building {n} synthetic images (48x48, PNG) in {src_path} ...")
    src = make_shapes_dataset(src_path, n=n, size=(48, 48))
    assert isinstance(src, lc.Dataset)
    src.summary()
    print(f"\n2. Running compose([flip_vertical(), resize(new_size=(64, 64))]) with {num_workers} workers ...")
    out = lc.like(dst_path, src, overwrite=True)
    pipeline = lc.compose([flip_vertical(), resize(new_size=(64, 64))])
    t0 = time.perf_counter()
    result = pipeline.eval(src, out, num_workers=num_workers, progressbar=progressbar)
    print(f"   {result}  ({n / (time.perf_counter() - t0):.0f} samples/s)")
    out.summary()
    before = os.path.join(out_dir, "before.png")
    after = os.path.join(out_dir, "after.png")
    contact_sheet(src, cols=8, rows=3).save(before)
    contact_sheet(out, cols=8, rows=3).save(after)
    print("\n3. Wrote:")
    for label, path in [("input dataset", src_path), ("output dataset", dst_path), ("before", before), ("after", after)]:
        print(f"   {label:15s} {os.path.abspath(path)}")
    print(f"\nOpen the output with: lc.load({dst_path!r})  — or: lakecompute info {dst_path}")
    return {"input": src_path, "output": dst_path, "before": before, "after": after}
