"""Detection (issue 20): the torchvision ``transforms.v2`` augmentation, next to the same pipeline by hand.

``lc.vision.augment`` with a `lc.vision.TorchVision` pipeline (flip, crop, resize, colour jitter, sanitize)
in an eval from an ingested COCO dataset into a new one, on 0 and 2 workers — next to the same torchvision
pipeline applied in a loop to ``tv_tensors`` built from the samples already in memory (the floor: no
reading, no writing, no conversion). Kept apart from ``bench/detection.py`` (the albumentations rows).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from bench import Row, Timer, median_of, rate, scratch_dir, suite


def _transform() -> Any:
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.RandomHorizontalFlip(p=0.5),
            v2.RandomCrop((200, 260)),
            v2.Resize((160, 208)),
            v2.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05),
            v2.SanitizeBoundingBoxes(),
        ]
    )


PIPELINE: Any = None


def tv_augment_row(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    """The benchmarked augmentation (module level, for worker processes)."""
    import lakecompute as lc

    targets = {"boxes": "boxes", "masks": "masks", "keypoints": "keypoints"}
    sample_out.append(lc.vision.augment(PIPELINE, sample_in, rng, **targets, objects=["categories"]))


def _eval(src: str, dest: str, workers: int) -> float:
    import lakecompute as lc

    ds = lc.load(src, read_only=True)
    out = lc.empty(dest, overwrite=True)
    with out:
        out.create_tensor("images", htype="image")  # raw pixels: the floor does not encode either
        for name in ("boxes", "categories", "masks", "keypoints"):
            out.create_tensor_like(name, ds[name])
    with Timer() as t:
        lc.compute(tv_augment_row)().eval(ds, out, num_workers=workers, seed=0, progressbar=False)
    return t.seconds


def _loop(src: str) -> tuple[float, int]:
    """Seconds for the same pipeline over tv_tensors built beforehand from the samples, and the count."""
    import torch
    from torchvision import tv_tensors

    import lakecompute as lc

    ds = lc.load(src, read_only=True)
    samples = []
    for i in range(len(ds)):
        image, boxes = ds.images[i].numpy(), ds.boxes[i].numpy()
        size = image.shape[:2]
        samples.append(
            {
                "image": tv_tensors.Image(torch.from_numpy(image).permute(2, 0, 1)),
                # float32, as torchvision's datasets give boxes and as augment hands them over
                "boxes": tv_tensors.BoundingBoxes(
                    torch.from_numpy(boxes.astype(np.float32)), format="XYWH", canvas_size=size
                ),
                "masks": tv_tensors.Mask(torch.from_numpy(ds.masks[i].numpy().transpose(2, 0, 1).copy())),
                "keypoints": tv_tensors.KeyPoints(
                    torch.from_numpy(ds.keypoints[i].numpy()[..., :2].copy()), canvas_size=size
                ),
                "labels": torch.arange(len(boxes)),
            }
        )
    transform = PIPELINE.transform
    rng = np.random.default_rng(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as augment runs it
    try:
        with Timer() as t:
            for sample in samples:
                torch.manual_seed(int(rng.integers(2**32)))
                transform(sample)
    finally:
        torch.set_num_threads(threads)
    return t.seconds, len(samples)


@suite("torchvision")
def torchvision_augment(opts: Any) -> list[Row]:
    """torchvision transforms.v2 augmentation in an eval (0 and 2 workers) vs the same pipeline in a loop."""
    global PIPELINE
    import lakecompute as lc
    from lakecompute.testing.detection import write_coco_folder

    n = 60 if opts.quick else 600
    runs = max(1, opts.runs)
    PIPELINE = lc.vision.TorchVision(_transform())  # the boxes' layout is read from their tensor
    rows: list[Row] = []
    with scratch_dir() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pycocotools' decode under numpy 2
        images_dir, annotations = write_coco_folder(os.path.join(tmp, "coco"), n=n, size=(240, 320))
        src = os.path.join(tmp, "ds")
        lc.ingest_coco(images_dir, annotations, src, overwrite=True, progressbar=False)
        floor, count = _loop(src)
        for workers in (0, 2):
            ours, values = median_of(runs, lambda w=workers: _eval(src, os.path.join(tmp, "aug"), w))
            rows.append(
                Row(
                    f"augment eval (torchvision), {workers} workers",
                    rate(count, ours),
                    rate(count, floor),
                    "samples/s",
                    baseline_name="the same transforms.v2 pipeline in a loop, tv_tensors in memory",
                    note=f"{count} samples 320x240: flip, crop, resize, colour jitter, sanitize; "
                    f"runs {[round(v, 2) for v in values]} s",
                )
            )
    return rows
