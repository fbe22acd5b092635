"""Detection (issue 20): COCO ingest and the albumentations augmentation, next to the same work by hand.

* COCO ingest: ``lc.ingest_coco`` of a synthetic COCO folder (JPEG images of 320x240 with 1-3 objects,
  polygons and keypoints), with masks rasterised, on 0 and 2 workers — next to a plain loop that opens
  and decodes each image with Pillow and rasterises each annotation with pycocotools (``annToMask``),
  keeping the results in memory (no storage at all). The target of the issue: >= 0.8x with 0 workers,
  faster than the loop with 2.
* Augmentation: ``lc.vision.augment`` (flip, crop, resize, colour jitter) in an eval from the ingested
  dataset into a new one — next to the same albumentations pipeline applied in a loop to the images and
  targets already in memory (the floor: no reading, no writing).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from typing import Any

import numpy as np

from bench import Row, Timer, median_of, rate, scratch_dir, suite


def _coco_loop(images_dir: str, annotations: str) -> float:
    """Seconds for Pillow + pycocotools to decode every image and rasterise every annotation."""
    from PIL import Image
    from pycocotools.coco import COCO

    with Timer() as t:
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO(annotations)
        kept = []
        for img_id, img in coco.imgs.items():
            with Image.open(os.path.join(images_dir, img["file_name"])) as f:
                pixels = np.asarray(f.convert("RGB"))
            anns = coco.imgToAnns[img_id]
            boxes = np.array([a["bbox"] for a in anns], dtype=np.float64).reshape(-1, 4)
            masks = [coco.annToMask(a) for a in anns]
            kept.append((pixels, boxes, masks))
    return t.seconds


def _ingest(images_dir: str, annotations: str, dest: str, workers: int) -> float:
    import lakecompute as lc

    with Timer() as t:
        lc.ingest_coco(images_dir, annotations, dest, num_workers=workers, overwrite=True, progressbar=False)
    return t.seconds


def _pipeline() -> Any:
    import albumentations as A

    import lakecompute as lc

    return lc.vision.Albumentations(
        A.Compose(
            [
                A.HorizontalFlip(p=0.5),
                A.RandomCrop(200, 260),
                A.Resize(160, 208),
                A.ColorJitter(p=0.8),
            ],
            bbox_params=A.BboxParams(format="coco", min_visibility=0.3),
            keypoint_params=A.KeypointParams(format="xy"),
        )
    )


PIPELINE: Any = None


def augment_row(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    """The benchmarked augmentation (module level, for worker processes)."""
    import lakecompute as lc

    sample_out.append(
        lc.vision.augment(
            PIPELINE,
            sample_in,
            rng,
            boxes="boxes",
            masks="masks",
            keypoints="keypoints",
            objects=["categories"],
        )
    )


def _augment_eval(src: str, dest: str, workers: int) -> float:
    import lakecompute as lc

    ds = lc.load(src, read_only=True)
    out = lc.empty(dest, overwrite=True)
    with out:
        out.create_tensor("images", htype="image")  # raw pixels: the floor does not encode either
        for name in ("boxes", "categories", "masks", "keypoints"):
            out.create_tensor_like(name, ds[name])
    with Timer() as t:
        lc.compute(augment_row)().eval(ds, out, num_workers=workers, seed=0, progressbar=False)
    return t.seconds


def _augment_loop(src: str) -> tuple[float, int]:
    """Seconds for the same pipeline over the samples held in memory, and the sample count."""
    import lakecompute as lc

    ds = lc.load(src, read_only=True)
    rows = [
        (ds.images[i].numpy(), ds.boxes[i].numpy(), ds.masks[i].numpy(), ds.keypoints[i].numpy())
        for i in range(len(ds))
    ]
    transform = PIPELINE.transform
    rng = np.random.default_rng(0)
    with Timer() as t:
        for image, boxes, masks, kp in rows:
            transform.set_random_seed(int(rng.integers(2**32)))
            transform(
                image=image,
                bboxes=boxes,
                masks=[masks[:, :, j].astype(np.uint8) for j in range(masks.shape[2])],
                keypoints=kp.reshape(-1, 3)[:, :2],
            )
    return t.seconds, len(rows)


@suite("detection")
def detection(opts: Any) -> list[Row]:
    """COCO ingest (0 and 2 workers) vs Pillow + pycocotools; albumentations augmentation vs a loop."""
    global PIPELINE
    from lakecompute.testing.detection import write_coco_folder

    n = 60 if opts.quick else 1500
    runs = max(1, opts.runs)
    PIPELINE = _pipeline()
    rows: list[Row] = []
    with scratch_dir() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pycocotools' decode under numpy 2
        images_dir, annotations = write_coco_folder(os.path.join(tmp, "coco"), n=n, size=(240, 320))
        loop, _ = median_of(runs, lambda: _coco_loop(images_dir, annotations))
        dest = os.path.join(tmp, "ds")
        for workers, target in ((0, 0.8), (2, 1.0)):
            ours, values = median_of(runs, lambda w=workers: _ingest(images_dir, annotations, dest, w))
            r_ours, r_base = rate(n, ours), rate(n, loop)
            rows.append(
                Row(
                    f"ingest_coco, {workers} workers",
                    r_ours,
                    r_base,
                    "images/s",
                    f">= {target}x baseline",
                    ok=r_ours >= target * r_base,
                    baseline_name="Pillow decode + pycocotools annToMask loop, in memory",
                    note=f"{n} JPEG 320x240, masks rasterised; runs {[round(v, 2) for v in values]} s",
                )
            )
        for workers in (0, 2):
            aug, values = median_of(runs, lambda w=workers: _augment_eval(dest, os.path.join(tmp, "aug"), w))
            floor, count = _augment_loop(dest)
            rows.append(
                Row(
                    f"augment eval, {workers} workers",
                    rate(count, aug),
                    rate(count, floor),
                    "samples/s",
                    baseline_name="the same albumentations pipeline in a loop, samples in memory",
                    note=f"{count} samples: flip, crop, resize, colour jitter; boxes, masks, keypoints",
                )
            )
    return rows
