"""Detection (issue 20): COCO ingest and the albumentations augmentation, next to the same work by hand.

* COCO ingest: ``lc.ingest_coco`` of a synthetic COCO folder (JPEG images of 320x240 with 1-3 objects,
  polygons and keypoints), with masks rasterised, on 0 and 2 workers — next to a plain loop doing what
  the ingest does (each file read and decoded in full by Pillow, its bytes kept; the annotations turned
  into the stored columns; every annotation rasterised by pycocotools' ``annToMask`` and the masks
  packed 8 pixels a byte, as ``binary_mask`` stores them), keeping the results in memory (no storage at
  all). The issue's target: >= 0.8x with 0 workers, faster than the loop with 2. Two workers on two
  shared cores cannot double anything, so the same loop also runs on 2 processes, and the row "2
  workers over 0" compares the ingest's gain from a second worker with the loop's from a second process.
  The four runs are interleaved per repetition; ratios are medians of each repetition's own ratio, and
  CPU seconds (workers included) are shown, as they depend far less on the machine's load.
* Augmentation: ``lc.vision.augment`` (flip, crop, resize, colour jitter) in an eval from the ingested
  dataset into a new one (images stored as PNG, as ``examples/07`` does) — next to a loop that reads and
  stores as the eval does (the stored JPEG decoded by Pillow, masks unpacked from their bits, the same
  pipeline, the new image encoded as PNG exactly as the eval's tensor stores it and the masks packed),
  and, as before, next to the pipeline over samples already decoded in memory (which does less).
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import warnings
from typing import Any

import numpy as np

from bench import Row, Timer, rate, scratch_dir, suite


def _coco_rows(images_dir: str, coco: Any, image_ids: list[int]) -> list[dict[str, Any]]:
    """What a hand-written COCO ingest keeps per image, in memory: the work of ``coco_image`` by hand.

    Each file is read and decoded in full (which verifies it, as the ingest does) and its bytes are kept
    (a JPEG is stored as it is); the annotations become the stored columns (boxes, categories, ids,
    crowd flags, areas, polygons, RLEs, keypoints) and every annotation is rasterised by pycocotools'
    ``annToMask`` into one ``H x W x k`` mask, packed 8 pixels a byte as ``binary_mask`` stores it; last,
    the columns are encoded with the chunk codecs the dataset stores them with (`_encode_as_stored`).
    """
    from PIL import Image

    index = {c: i for i, c in enumerate(sorted(coco.cats))}
    points = max((len(c.get("keypoints", [])) for c in coco.cats.values()), default=0)
    rows = []
    for img_id in image_ids:
        img = coco.imgs[img_id]
        with open(os.path.join(images_dir, img["file_name"]), "rb") as fh:
            data = fh.read()
        with Image.open(io.BytesIO(data)) as f:
            f.load()
            height, width, mode = f.height, f.width, f.mode
        anns = coco.imgToAnns[img_id]
        masks = np.zeros((height, width, len(anns)), dtype=bool)
        for j, a in enumerate(anns):
            masks[:, :, j] = coco.annToMask(a)
        segs = [a["segmentation"] for a in anns]
        zeros = [0.0] * (3 * points)
        rows.append(
            {
                "image": data,
                "mode": mode,
                "image_id": img_id,
                "file_name": img["file_name"],
                "boxes": np.array([a["bbox"] for a in anns], dtype=np.float64).reshape(-1, 4),
                "categories": np.array([index[a["category_id"]] for a in anns], dtype=np.uint32),
                "annotation_ids": np.array([a["id"] for a in anns], dtype=np.int64),
                "iscrowd": np.array([a.get("iscrowd", 0) for a in anns], dtype=np.uint8),
                "areas": np.array([a.get("area", 0.0) for a in anns], dtype=np.float64),
                "polygons": [s if isinstance(s, list) else [] for s in segs],
                "rles": [s if isinstance(s, dict) else None for s in segs],
                "keypoints": np.array([a.get("keypoints") or zeros for a in anns], dtype=np.float64).reshape(
                    -1, points, 3
                ),
                "num_keypoints": np.array([a.get("num_keypoints", 0) for a in anns], dtype=np.int64),
                "masks": np.packbits(masks, axis=None),
            }
        )
    _encode_as_stored(rows)
    return rows


# The chunk codec each column is stored with: zstd level 1 for numbers, polygons and masks (the default
# chunk compression), zstd's fast level -1 for the columns without one (kept JPEG bytes, text, JSON).
_FAST_COLUMNS = ("image", "file_name", "rles")
_STORED_CHUNK = 1 << 20


def _column_bytes(rows: list[dict[str, Any]], key: str) -> bytes:
    import json

    values = [r[key] for r in rows]
    if key == "image":
        return b"".join(values)
    if key == "file_name":
        return "".join(values).encode()
    if key == "rles":
        return json.dumps(values).encode()
    if key == "polygons":
        flat = [float(x) for image in values for obj in image for part in obj for x in part]
        return np.asarray(flat, dtype=np.float64).tobytes()
    return b"".join(np.asarray(v).tobytes() for v in values)


def _encode_as_stored(rows: list[dict[str, Any]]) -> list[bytes]:
    """The columns' bytes encoded as the dataset stores them (1 MiB chunks, each through its column's zstd
    level): the storage codec's work, which the ingest does and a floor doing "the same work" does too,
    as W1's and W3's floors do (kept in memory, like the rest)."""
    from numcodecs import Zstd

    fast, default = Zstd(level=-1), Zstd(level=1)
    chunks = []
    for key in rows[0] if rows else ():
        if key == "mode":
            continue
        raw = np.frombuffer(_column_bytes(rows, key), dtype=np.uint8)
        codec = fast if key in _FAST_COLUMNS else default
        chunks += [bytes(codec.encode(raw[i : i + _STORED_CHUNK])) for i in range(0, raw.size, _STORED_CHUNK)]
    return chunks


_FLOOR: dict[str, Any] = {}  # the parsed file, for the floor's forked processes


def _floor_part(image_ids: list[int]) -> int:
    return len(_coco_rows(_FLOOR["images_dir"], _FLOOR["coco"], image_ids))


class _Clock:
    """``with _Clock() as c: ...`` then ``c.seconds`` (wall) and ``c.cpu``: CPU seconds of this process and
    of the children it waited for (worker processes), which the machine's load changes far less."""

    @staticmethod
    def _cpu() -> float:
        import resource

        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def __enter__(self) -> _Clock:
        self._timer = Timer().__enter__()
        self._cpu0 = self._cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.__exit__()
        self.seconds, self.cpu = self._timer.seconds, self._cpu() - self._cpu0


def _settle() -> None:
    """Before a timed run: collect the last run's garbage and let the kernel write out (and free) the last
    run's files, so that neither lands in the next run's time, whichever it is."""
    import gc

    gc.collect()
    os.sync()


def _coco_loop(images_dir: str, annotations: str, processes: int = 1) -> _Clock:
    """Time a plain loop (Pillow + pycocotools) doing what the ingest does, results kept in memory; with
    ``processes`` > 1 the same loop over that many parts of the images, in a fork pool started inside
    the timing (as the ingest's workers are)."""
    import multiprocessing

    from pycocotools.coco import COCO

    _settle()
    with _Clock() as t:
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO(annotations)
        ids = list(coco.imgs)
        if processes <= 1:
            _coco_rows(images_dir, coco, ids)
        else:
            _FLOOR.update(images_dir=images_dir, coco=coco)
            step = -(-len(ids) // processes)
            with multiprocessing.get_context("fork").Pool(processes) as pool:
                pool.map(_floor_part, [ids[i : i + step] for i in range(0, len(ids), step)])
            _FLOOR.clear()
    return t


def _ingest(images_dir: str, annotations: str, dest: str, workers: int) -> _Clock:
    import lakecompute as lc

    lc.delete(dest, missing_ok=True)  # the previous run's output, deleted outside the timing
    _settle()
    with _Clock() as t:
        lc.ingest_coco(images_dir, annotations, dest, num_workers=workers, progressbar=False)
    return t


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
        out.create_tensor("images", htype="image", sample_compression="png")  # as examples/07 stores them
        for name in ("boxes", "categories", "masks", "keypoints"):
            out.create_tensor_like(name, ds[name])
    with Timer() as t:
        lc.compute(augment_row)().eval(ds, out, num_workers=workers, seed=0, progressbar=False)
    return t.seconds


def _augment_loop(src: str) -> tuple[float, int]:
    """Seconds for the same pipeline over the samples held in memory, and the sample count: the old
    floor, which neither reads (decodes) its inputs nor encodes its outputs."""
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


_Stored = tuple[bytes, np.ndarray, bytes, tuple[int, ...], np.ndarray, np.ndarray]


def _stored_samples(src: str) -> list[_Stored]:
    """Every sample of ``src`` in its stored form, as a hand-written loop would find it in files: the
    image file's bytes (JPEG), the boxes, the mask's packed bits and shape, keypoints and labels."""
    import lakecompute as lc

    ds = lc.load(src, read_only=True)
    out = []
    for i in range(len(ds)):
        masks = ds.masks[i].numpy()
        bits = np.packbits(masks, axis=None).tobytes()  # binary_mask's stored form: 8 pixels a byte
        out.append(
            (ds.images[i].tobytes(), ds.boxes[i].numpy(), bits, masks.shape, ds.keypoints[i].numpy(),
             ds.categories[i].numpy())
        )  # fmt: skip
    return out


def _png(image: np.ndarray) -> bytes:
    """PNG as ``lakecompute.compression`` writes it (Pillow, compression level 1)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def _augment_one(transform: Any, sample: _Stored, seed: int) -> tuple[Any, ...]:
    """One sample by hand: decode, augment with the objects kept in step, encode as stored."""
    from PIL import Image

    data, boxes, bits, shape, kp, labels = sample
    with Image.open(io.BytesIO(data)) as f:
        image = np.asarray(f.convert("RGB"))
    masks = np.unpackbits(np.frombuffer(bits, dtype=np.uint8), count=int(np.prod(shape))).reshape(shape)
    n = len(boxes)
    flat = kp.reshape(-1, 3)
    transform.set_random_seed(seed)
    out = transform(
        image=image,
        bboxes=np.column_stack([boxes, np.arange(n, dtype=np.float64)]),  # which objects survive
        masks=[masks[:, :, j] for j in range(n)],
        keypoints=np.column_stack([flat, np.arange(len(flat), dtype=np.float64)]),
    )
    kept = np.asarray(out["bboxes"], dtype=np.float64).reshape(-1, 5)
    keep = kept[:, 4].astype(np.int64)
    height, width = out["image"].shape[:2]
    channels = [np.asarray(c, dtype=bool) for c in out["masks"]]
    new_masks = np.stack(channels, axis=-1)[:, :, keep] if channels else np.zeros((height, width, 0), bool)
    moved = np.asarray(out["keypoints"], dtype=np.float64).reshape(-1, 4)
    points = np.zeros_like(flat)
    points[moved[:, 3].astype(np.int64)] = moved[:, :3]
    points[flat[:, 2] == 0] = 0
    return (
        _png(out["image"]),
        kept[:, :4],
        np.packbits(new_masks, axis=None).tobytes(),
        points.reshape(kp.shape)[keep],
        labels[keep],
    )


def _augment_stored_loop(samples: list[_Stored]) -> float:
    """Seconds for a plain loop that reads and stores as the eval does: each image decoded from its file
    bytes with Pillow and each mask unpacked from its bits, the same albumentations pipeline, the new
    image encoded as PNG (as the eval's output tensor stores it) and its masks packed; kept in memory."""
    transform = PIPELINE.transform
    rng = np.random.default_rng(0)
    kept: list[Any] = [None] * len(samples)
    with Timer() as t:
        for i, sample in enumerate(samples):
            kept[i] = _augment_one(transform, sample, int(rng.integers(2**32)))
    return t.seconds


def _augment_rows(runs: int, src: str, dest: str) -> list[Row]:
    """The augmentation eval (0 and 2 workers) next to both loops, interleaved per repetition."""
    from PIL import Image

    from lakecompute.compression import encode_image

    samples = _stored_samples(src)
    first = _augment_one(PIPELINE.transform, samples[0], 0)[0]
    with Image.open(io.BytesIO(first)) as f:
        decoded = np.asarray(f)
    assert encode_image(decoded, "png") == first, "the loop must encode PNG exactly as the eval does"
    times: dict[str, list[float]] = {"memory": [], "stored": [], "ours 0": [], "ours 2": []}
    load = [os.getloadavg()[0]]
    for _ in range(runs):
        times["memory"].append(_augment_loop(src)[0])
        times["stored"].append(_augment_stored_loop(samples))
        for workers in (0, 2):
            times[f"ours {workers}"].append(_augment_eval(src, dest, workers))
    load.append(os.getloadavg()[0])
    count = len(samples)
    what = f"{count} samples: flip, crop, resize, colour jitter; boxes, masks, keypoints"
    rows = []
    labels = {
        "stored": "a loop reading and storing as the eval does (JPEG in, masks unpacked; PNG, bits out)",
        "memory": "the same pipeline over samples decoded in memory, nothing encoded (less than the eval)",
    }
    for floor, label in labels.items():
        for workers in (0, 2):
            per_rep = [b / a for a, b in zip(times[f"ours {workers}"], times[floor], strict=True)]
            rows.append(
                Row(
                    f"augment eval, {workers} workers" + (" (vs in memory)" if floor == "memory" else ""),
                    rate(count, statistics.median(times[f"ours {workers}"])),
                    rate(count, statistics.median(times[floor])),
                    "samples/s",
                    baseline_name=label,
                    note=f"{what}; load {load[0]:.1f} -> {load[1]:.1f}; ratio per repetition "
                    f"{[round(r, 2) for r in per_rep]} (median {statistics.median(per_rep):.2f})",
                )
            )
    return rows


def _ingest_rows(n: int, runs: int, images_dir: str, annotations: str, dest: str) -> list[Row]:
    """The ingest (0 and 2 workers) and the plain loop (1 and 2 processes), interleaved: each repetition
    runs all four back to back, so a change in the machine's load hits them alike. Ratios are medians
    of the repetitions' own ratios."""
    runs_of: dict[str, list[_Clock]] = {"loop 1": [], "ours 0": [], "loop 2": [], "ours 2": []}
    load = [os.getloadavg()[0]]
    for _ in range(runs):
        runs_of["loop 1"].append(_coco_loop(images_dir, annotations))
        runs_of["ours 0"].append(_ingest(images_dir, annotations, dest, 0))
        runs_of["loop 2"].append(_coco_loop(images_dir, annotations, processes=2))
        runs_of["ours 2"].append(_ingest(images_dir, annotations, dest, 2))
    load.append(os.getloadavg()[0])
    wall = {k: [c.seconds for c in v] for k, v in runs_of.items()}
    cpu = {k: statistics.median(c.cpu for c in v) for k, v in runs_of.items()}

    def ratios(a: str, b: str) -> list[float]:  # how many times faster a is than b, per repetition
        return [y / x for x, y in zip(wall[a], wall[b], strict=True)]

    where = f"{n} JPEG 320x240, masks rasterised; load {load[0]:.1f} -> {load[1]:.1f}"
    cpus = ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
    rows = []
    for workers, target in ((0, 0.8), (2, 1.0)):
        per_rep = ratios(f"ours {workers}", "loop 1")
        rows.append(
            Row(
                f"ingest_coco, {workers} workers",
                rate(n, statistics.median(wall[f"ours {workers}"])),
                rate(n, statistics.median(wall["loop 1"])),
                "images/s",
                f">= {target}x baseline",
                ok=statistics.median(wall["loop 1"]) >= target * statistics.median(wall[f"ours {workers}"]),
                baseline_name="Pillow decode + pycocotools annToMask loop; columns, packed masks in memory",
                note=f"{where}; ratio per repetition {[round(r, 2) for r in per_rep]} "
                f"(median {statistics.median(per_rep):.2f})",
            )
        )
    # Two workers on two cores shared with everything else cannot double anything; the same loop
    # split over two processes shows what this machine gives, and the ingest should gain as much.
    ours_gain, loop_gain = ratios("ours 2", "ours 0"), ratios("loop 2", "loop 1")
    rows.append(
        Row(
            "ingest_coco, 2 workers over 0",
            statistics.median(ours_gain),
            statistics.median(loop_gain),
            "x",
            ">= 1.0x baseline",
            ok=statistics.median(ours_gain) >= statistics.median(loop_gain),
            baseline_name="the loop on 2 processes over 1 (fork pool, half of the images each)",
            note=f"speedups per repetition: ours {[round(g, 2) for g in ours_gain]}, loop "
            f"{[round(g, 2) for g in loop_gain]}; 2 workers over the loop on 2 processes "
            f"{statistics.median(ratios('ours 2', 'loop 2')):.2f}x; CPU s (median, workers included): {cpus}",
        )
    )
    return rows


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
        dest = os.path.join(tmp, "ds")
        rows.extend(_ingest_rows(n, runs, images_dir, annotations, dest))
        rows.extend(_augment_rows(runs, dest, os.path.join(tmp, "aug")))
    return rows
