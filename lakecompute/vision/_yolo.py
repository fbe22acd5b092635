"""YOLO in and out: the ``images/`` + ``labels/`` + ``data.yaml`` layout, one sample per image.

| tensor | htype | a sample |
| --- | --- | --- |
| ``images`` | image | the file, kept as it is when its format is the stored one |
| ``file_name`` | text | the image's path under ``images/`` (``train/0001.jpg``) |
| ``boxes`` | bbox (``cxcywh``, normalized, float64) | ``(k, 4)``, the label file's numbers |
| ``labels`` | class_label | ``(k,)``, names from ``data.yaml`` |
| ``polygons`` | polygon (normalized, float64) | per object its polygon, ``[]`` for a box line |
| ``keypoints`` | keypoints (float64, pixels) | ``(k, K, 3)``: x, y, visibility per keypoint |

(``polygons`` only for segmentation labels; ``keypoints`` only for poses, a ``data.yaml`` with
``kpt_shape``: `lakecompute.vision._yolo_pose`.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lakecompute.boxes import BoxLayout, canvas_tolerance
from lakecompute.compute import compute
from lakecompute.errors import InvalidArgumentError, InvalidSampleError
from lakecompute.ingest import (
    IMAGE_EXTENSIONS,
    IngestOptions,
    PathLike,
    load_for_ingest,
    plan_for_ingest,
    refuse_overlap,
    run_ingest,
    skip_advice,
    target_mode,
)
from lakecompute.localfiles import FolderExport, Watch, confine
from lakecompute.specs import htype_declaration
from lakecompute.vision._common import (
    image_bytes,
    image_size,
    polygon_points,
    require,
    sample_name,
)
from lakecompute.vision._yolo_layout import YoloLayout
from lakecompute.vision._yolo_pose import POSE_KEYS, PoseLayout

if TYPE_CHECKING:
    from typing import Unpack

    from lakecompute.datasets import Dataset, DatasetView
    from lakecompute.ingest import IngestKwargs

__all__ = ["YoloExport", "export_yolo", "ingest_yolo", "merge_parts", "yolo_image"]


def _label_path(labels_root: str, rel: str) -> str:
    return os.path.join(labels_root, os.path.splitext(rel)[0] + ".txt")


def _lines(path: str) -> list[list[str]]:
    """The label file's non-empty lines, split; none when there is no file (a background image)."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line.split() for line in f if line.strip()]
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise InvalidSampleError(
            "labels",
            f"{path}: the label file is not UTF-8 text ({exc.reason} at byte {exc.start}). {_FIX}",
            source=path,
        ) from exc
    except OSError as exc:
        raise InvalidSampleError(
            "labels", f"{path}: the label file cannot be read ({exc}). {_FIX}", source=path
        ) from exc


_FIX = skip_advice("Fix the file", "the images whose label files break a rule")


def _parse_line(
    tokens: list[str], n_classes: int, where: str, pose: PoseLayout | None = None
) -> tuple[int, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(class, cxcywh box, polygon or None, keypoints or None)`` of one label line: a class index, then
    4 numbers (a box) or 3 or more points (a polygon) — or, in a pose dataset, a box and ``pose``'s
    keypoints — every number finite and in 0..1."""
    try:
        cls, values = int(tokens[0]), np.array([float(t) for t in tokens[1:]], dtype=np.float64)
    except ValueError:
        cls, values = -1, np.empty(0)
    if pose is not None:
        return _parse_pose_line(tokens, cls, values, n_classes, where, pose)
    if not 0 <= cls < n_classes or (len(values) != 4 and (len(values) < 6 or len(values) % 2)):
        raise InvalidSampleError(
            "labels",
            f"{where}: expected 'class cx cy w h' or 'class x1 y1 x2 y2 x3 y3 ...' with class in "
            f"0..{n_classes - 1} (data.yaml names). Got {' '.join(tokens)!r:.120}. {_FIX}",
            source=where,
        )
    _check_unit(values, tokens, where, "boxes" if len(values) == 4 else "polygons")
    if len(values) == 4:
        return cls, values, None, None
    points = values.reshape(-1, 2)
    lo, hi = points.min(axis=0), points.max(axis=0)
    return cls, np.concatenate([(lo + hi) / 2, hi - lo]), points, None


def _parse_pose_line(
    tokens: list[str], cls: int, values: np.ndarray, n_classes: int, where: str, pose: PoseLayout
) -> tuple[int, np.ndarray, None, np.ndarray]:
    """A pose row: a box, then ``pose.count`` keypoints of ``pose.dims`` numbers each."""
    if not 0 <= cls < n_classes or len(values) != 4 + pose.count * pose.dims:
        raise InvalidSampleError(
            "labels",
            f"{where}: expected {pose.rule()}, with class in 0..{n_classes - 1} (data.yaml names). Got "
            f"{max(len(tokens) - 1, 0)} numbers after the class: {' '.join(tokens)!r:.120}. {_FIX}",
            source=where,
        )
    _check_unit(values[:4], tokens, where, "boxes")
    return cls, values[:4], None, pose.parse(values[4:], where, _FIX)


def _check_unit(values: np.ndarray, tokens: list[str], where: str, tensor: str) -> None:
    if not (np.isfinite(values).all() and values.min() >= 0 and values.max() <= 1):
        raise InvalidSampleError(
            tensor,
            f"{where}: expected coordinates as finite numbers in 0..1 (YOLO's are normalized by the "
            f"image's width and height). Got {' '.join(tokens)!r:.120}. {_FIX}",
            source=where,
        )


def yolo_image(
    sample_in: tuple[str, str, str],
    sample_out: Any,
    mode: str,
    compression: str | None,
    n_classes: int,
    polygons: bool,
    pose: PoseLayout | None = None,
) -> None:
    """The compute function of `ingest_yolo`: one image and its label file in, one sample out."""
    image_path, label_path, rel = sample_in
    parsed = [
        _parse_line(tokens, n_classes, f"{label_path} line {n}", pose)
        for n, tokens in enumerate(_lines(label_path), start=1)
    ]
    image = load_for_ingest(image_path, mode, compression)
    row: dict[str, Any] = {
        "images": image,
        "file_name": rel,
        "boxes": np.array([b for _, b, _, _ in parsed], dtype=np.float64).reshape(-1, 4),
        "labels": np.array([c for c, _, _, _ in parsed], dtype=np.uint32),
    }
    if polygons:
        row["polygons"] = [[] if p is None else [p] for _, _, p, _ in parsed]
    if pose is not None:
        # The dataset holds keypoints in pixels, as every keypoints tensor does: scaled by the image's size.
        points = np.array([k for *_, k in parsed], dtype=np.float64).reshape(-1, pose.count, 3)
        points[..., :2] *= np.array([image.shape[1], image.shape[0]], dtype=np.float64)
        row["keypoints"] = points
    sample_out.append(row)


def _has_polygons(label_paths: Sequence[str]) -> bool:
    return any(len(tokens) > 5 for path in label_paths for tokens in _tolerant_lines(path))


def _tolerant_lines(path: str) -> list[list[str]]:
    """`_lines`, or none for a file that cannot be read: the worker reading it says why, by name (and
    ``skip_errors`` can skip that image)."""
    try:
        return _lines(path)
    except InvalidSampleError:
        return []


def ingest_yolo(
    folder: PathLike,
    dest: PathLike,
    *,
    split: str | None = None,
    image_compression: Literal["auto", "png", "jpeg", "webp"] | None = "auto",
    progressbar: bool = True,
    **options: Unpack[IngestKwargs],
) -> Dataset:
    """Turn a YOLO dataset folder into a dataset, one sample per image.

    ```text
    folder/
      data.yaml                 names: [car, person]; optionally path: ., train: images/train, val: ...
      images/train/0001.jpg     any depth; split= picks one split
      labels/train/0001.txt     one line per object: class cx cy w h (normalized), or a polygon
    ```

    ``data.yaml``'s ``path`` (relative to its folder), ``train``, ``val`` and ``test`` (a folder, a ``.txt``
    list of images, or a list of those) are read as ultralytics reads them, and an image's label file is
    its path with the last ``images`` folder turned into ``labels`` (``docs/detection.md``, "YOLO in and
    out"). Images without a label file have no objects. Label lines with a polygon (``class x1 y1 x2 y2 ...``,
    YOLO's segmentation format) also fill a ``polygons`` tensor, and their box is the polygon's bounds.
    A ``data.yaml`` with ``kpt_shape`` (ultralytics' pose format) makes every line a box followed by
    ``K`` keypoints, read into a ``keypoints`` tensor in pixels (the image's size times the line's
    numbers) with ``data.yaml``'s ``kpt_names`` and ``flip_idx`` in its info.
    Files are read in parallel by an eval, with a progress bar; image bytes are kept as for
    `lakecompute.ingest_classification`.

    Args:
        folder: the dataset folder.
        dest: where to create the dataset.
        split: the split to read alone: data.yaml's ``train``/``val``/``test`` entry, else the sub-folder
            ``images/<split>``; None reads every split data.yaml names (each image once), else every
            image under ``images/``.
        image_compression: as for `lakecompute.ingest_classification`.
        progressbar: show a progress bar.
        **options: the options every ingest takes (`lakecompute.ingest.IngestKwargs`), by keyword.

    Returns:
        The new dataset: ``images``, ``file_name`` (the path below the split's folder, or below the folder
        common to the splits read), ``boxes`` (cxcywh, normalized), ``labels``, and ``polygons`` for
        segmentation labels or ``keypoints`` for poses.

    ``data.yaml`` and the label files are untrusted input (``docs/detection.md``, "What is trusted"):
    every path is confined to ``folder`` (symbolic links followed), and every line checked.

    Raises:
        InvalidArgumentError: no data.yaml, one that is not YAML, names that are not distinct
            strings, or pose keys (``kpt_shape``, ``flip_idx``, ``kpt_names``) ultralytics does not take; a
            path (data.yaml's ``path`` or a split entry, a listed image, an image or label
            file) resolving outside ``folder``, or a split entry that names nothing usable (the key
            named); no images; two images sharing one label file; or pyyaml is not installed.
        InvalidSampleError: an unreadable image, or a label file that is not text or has a malformed
            line (a pose line: not ``4 + K x D`` numbers, a visibility other than 0/1/2; file and line
            named); with ``skip_errors=True`` such images are skipped instead.
    """
    parsed = IngestOptions.parse("ingest_yolo", options, image_compression, progressbar)
    root = os.fspath(folder)
    refuse_overlap(root, dest)
    layout = YoloLayout.read(root, None if split is None else str(split))
    names, items, pose = list(layout.names), list(layout.items), layout.pose
    paths = [p for p, _, _ in items]
    polygons = pose is None and _has_polygons([lp for _, lp, _ in items])
    compression = plan_for_ingest(paths, parsed.image_compression).compression

    def setup(ds: Dataset) -> None:
        ds.create_tensor("images", htype="image", sample_compression=compression)
        ds.create_tensor("file_name", htype="text")
        ds.create_tensor("boxes", htype="bbox", dtype="float64", format="cxcywh", normalized=True)
        ds.create_tensor("labels", htype="class_label", class_names=names)
        if polygons:
            ds.create_tensor("polygons", htype="polygon", dtype="float64", normalized=True)
        if pose is not None:
            ds.create_tensor("keypoints", htype="keypoints", dtype="float64", **pose.tensor_info())

    function = compute(yolo_image)(
        mode=target_mode(paths), compression=compression, n_classes=len(names), polygons=polygons, pose=pose
    )
    return run_ingest(dest, setup, function, items, paths, root, parsed)


# -- export ------------------------------------------------------------------------------------------

_YOLO_BOXES = BoxLayout("cxcywh", normalized=True)

# The endings ultralytics reads as images in a split's folder (its IMG_FORMATS), and ours.
_ULTRALYTICS_IMAGES = "avif bmp dng heic heif jp2 jpeg jpg mpo png tif tiff webp"
_READ_AS_IMAGES = IMAGE_EXTENSIONS | frozenset(f".{e}" for e in _ULTRALYTICS_IMAGES.split())


@dataclass(frozen=True, slots=True)
class YoloExport:
    """What `export_yolo` wrote, and what it left out.

    Example:
        >>> result = ds.export_yolo("./yolo")  # doctest: +SKIP
        >>> result.crowd_left_out  # doctest: +SKIP
        2
    """

    folder: str
    """The export folder (absolute)."""
    data_yaml: str
    """Its ``data.yaml``, which ultralytics' ``YOLO(...).train(data=...)`` takes."""
    images: int
    """Image files written (one label file each; an image without objects gets an empty one)."""
    objects: int
    """Label rows written."""
    segment_files: int
    """Label files written as polygons (every object of the image has one); the others hold boxes."""
    crowd_left_out: int
    """Crowd regions (``iscrowd`` 1) not written: YOLO has no way to say "ignore this region"."""
    outside_left_out: int
    """Objects not written because nothing of their box lies on the image."""
    clipped: int
    """Objects whose box (or polygon) reached past the image and was cut to it."""
    keypoints_outside: int = 0
    """With ``task="pose"``: labelled keypoints that lay off the image, written as ``0 0 0`` (not
    labelled), since a pose row holds coordinates in 0..1 only."""


def _label_tensor(data: Dataset | DatasetView) -> str:
    for name in ("labels", "categories"):
        if name in data.tensors and htype_declaration(data.tensors[name].htype).labels:
            return name
    raise InvalidArgumentError(
        f"export_yolo needs a class_label tensor 'labels' (or 'categories'), one per box; the dataset "
        f"has {sorted(data.tensors)!r}."
    )


def _number(v: float) -> str:
    return repr(float(v))  # the shortest text that reads back as the same float


def _closest(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """The positions of the closest pair of points, one of ``a`` and one of ``b``."""
    d = ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=-1)
    i, j = np.unravel_index(int(np.argmin(d)), d.shape)
    return int(i), int(j)


def merge_parts(parts: Sequence[np.ndarray]) -> np.ndarray:
    """One closed outline through every part of a multi-part polygon, as YOLO's one-polygon rows need.

    Each part is joined to the next at their closest points by a bridge walked there and back (no area):
    the outline starts on the first part, leaves it at the point closest to the second, goes round the
    second (and, from it, the rest) and comes back, then finishes the first. Filled, it covers the parts
    and nothing else; its bounds are the parts' bounds, so the box YOLO tools take from it is the
    object's (ultralytics' COCO converter joins parts the same way). One part is given back as it is.
    """
    pieces = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in parts]
    if len(pieces) == 1:
        return pieces[0]
    links = [_closest(pieces[k], pieces[k + 1]) for k in range(len(pieces) - 1)]
    entries = [0, *(j for _, j in links)]  # where the outline arrives on each part
    # Built from the last part back: the outline of parts k.. starts and ends at part k's entry.
    ring = np.roll(pieces[-1], -entries[-1], axis=0)
    outline = np.concatenate([ring, ring[:1]])
    for k in range(len(pieces) - 2, -1, -1):
        ring = np.roll(pieces[k], -entries[k], axis=0)
        leave = (links[k][0] - entries[k]) % len(ring)
        outline = np.concatenate([ring[: leave + 1], outline, ring[leave:], ring[:1]])
    return outline


@dataclass(frozen=True, slots=True)
class _Objects:
    """One image's objects as YOLO rows take them (crowd regions and objects off the image left out)."""

    classes: list[int]
    boxes: np.ndarray
    """``(k, 4)`` normalized cxcywh, on the image."""
    outlines: list[np.ndarray | None]
    """Per object its outline (normalized ``(m, 2)``, on the image), or None for a box-only object."""
    crowd: int
    outside: int
    clipped: int
    keypoints: np.ndarray | None = None
    """Pose rows: ``(k, K, 3)`` normalized keypoints (those off the image ``0 0 0``); None otherwise."""
    keypoints_outside: int = 0

    def polygons(self) -> bool:
        """Whether the rows are polygons: every object has an outline (one row type per file), and the
        export is not one of poses (whose rows are boxes with keypoints)."""
        return self.keypoints is None and bool(self.classes) and all(o is not None for o in self.outlines)

    def counts(self) -> list[int]:
        """``[1 image, objects, polygon files, crowd left out, outside left out, clipped, keypoints off
        the image]``."""
        return [
            1, len(self.classes), int(self.polygons()), self.crowd, self.outside, self.clipped,
            self.keypoints_outside,
        ]  # fmt: skip

    def lines(self) -> str:
        polygons = self.polygons()
        rows = []
        for j, c in enumerate(self.classes):
            outline = self.outlines[j]
            values = outline.reshape(-1) if polygons and outline is not None else self.boxes[j]
            tokens = [str(c), *(_number(v) for v in values)]
            if self.keypoints is not None:
                for x, y, v in self.keypoints[j].tolist():
                    tokens += [_number(x), _number(y), str(int(v))]
            rows.append(" ".join(tokens) + "\n")
        return "".join(rows)


class _Reader:
    """The tensors export_yolo reads, each read once, and what it makes of one sample."""

    def __init__(self, data: Dataset | DatasetView, pose: PoseLayout | None) -> None:
        tensors = data.tensors
        for needed in ("images", "boxes"):
            if needed not in tensors:
                raise InvalidArgumentError(
                    f"export_yolo needs a tensor {needed!r}; the dataset has {sorted(tensors)!r}. Rename "
                    "yours with ds.rename_tensor, or ingest with lc.ingest_yolo or lc.ingest_coco."
                )
        self.tensors = tensors
        self.pose = pose
        self.layout = BoxLayout.of(tensors["boxes"])
        self.label_name = _label_tensor(data)
        self.names = list(tensors[self.label_name].info.get("class_names") or [])
        self.file_names = list(tensors["file_name"].text()) if "file_name" in tensors else None
        polygons = "polygons" in tensors and pose is None
        self.polygons = list(tensors["polygons"].numpy(aslist=True)) if polygons else None
        self.polygon_info = dict(tensors["polygons"].info) if polygons else {}
        self.crowd = list(tensors["iscrowd"].numpy(aslist=True)) if "iscrowd" in tensors else None

    def objects(self, i: int, canvas: tuple[int, int]) -> _Objects:
        """Sample ``i``'s objects (its image of ``(height, width)``): crowd regions left out, boxes cut
        to the image, and those with nothing left on it left out."""
        classes = np.asarray(self.tensors[self.label_name][i].numpy()).reshape(-1)
        boxes = np.asarray(self.tensors["boxes"][i].numpy(), dtype=np.float64).reshape(-1, 4)
        crowd = np.zeros(len(boxes), bool)
        if self.crowd is not None:
            crowd = np.asarray(self.crowd[i]).reshape(-1) != 0
        corners = self.layout.convert(boxes, _CORNERS, canvas)
        on = _CORNERS.clip(corners, canvas)
        shown = (on[:, 2] > on[:, 0]) & (on[:, 3] > on[:, 1])
        keep = np.flatnonzero(~crowd & shown)
        cut = (np.abs(on - corners) > canvas_tolerance(canvas)).any(axis=1)
        outlines = [self._outline(i, int(j), canvas) for j in keep]
        cut_outline = [o is not None and bool(((o < 0) | (o > 1)).any()) for o in outlines]
        # A box on the image is written as the tensor holds it, converted once (exact for a YOLO ingest's).
        yolo = np.where(
            cut[:, None],
            _CORNERS.convert(on, _YOLO_BOXES, canvas),
            self.layout.convert(boxes, _YOLO_BOXES, canvas),
        )
        points, lost = self._keypoints(i, len(boxes), keep, canvas)
        return _Objects(
            classes=[int(c) for c in classes[keep]],
            boxes=np.clip(yolo[keep], 0.0, 1.0),
            outlines=[None if o is None else np.clip(o, 0.0, 1.0) for o in outlines],
            crowd=int(crowd.sum()),
            outside=int((~crowd & ~shown).sum()),
            clipped=int((cut[keep] | np.array(cut_outline, dtype=bool)).sum()),
            keypoints=points,
            keypoints_outside=lost,
        )

    def _outline(self, i: int, j: int, canvas: tuple[int, int]) -> np.ndarray | None:
        """Object ``j``'s polygon parts (normalized, merged into one outline), or None without any."""
        if self.polygons is None or not len(self.polygons[i][j]):
            return None
        parts = [polygon_points(p, self.polygon_info, True, canvas) for p in self.polygons[i][j]]
        return merge_parts(parts)

    def _keypoints(
        self, i: int, objects: int, keep: np.ndarray, canvas: tuple[int, int]
    ) -> tuple[np.ndarray | None, int]:
        """The kept objects' keypoints of sample ``i`` (normalized; None unless the export is of poses),
        and how many labelled ones lay off the image."""
        if self.pose is None:
            return None, 0
        raw = np.asarray(self.tensors["keypoints"][i].numpy(), dtype=np.float64)
        if raw.size != objects * self.pose.count * 3:
            raise InvalidArgumentError(
                f"export_yolo(task='pose'): sample {i} has {objects} boxes but keypoints of shape "
                f"{raw.shape}; expected ({objects}, {self.pose.count}, 3), one group of x, y, visibility per "
                "box. Fix the sample, or export without task='pose'."
            )
        return self.pose.normalized(raw.reshape(objects, self.pose.count, 3)[keep], canvas)


_CORNERS = BoxLayout("xyxy")


def _label_name(name: str) -> str:
    return os.path.splitext(name)[0] + ".txt"


def _config(
    root: str, sub: str, names: list[str], pose: dict[str, Any], earlier: list[str]
) -> dict[str, Any]:
    """data.yaml: ``path`` (the folder, absolute: ultralytics reads a relative one against its own
    datasets folder, not the file's), ``train`` and ``val`` (both needed by ultralytics: this split, or
    one exported before into the folder), any other split, the class names and the pose keys."""
    here = os.path.join("images", sub) if sub else "images"
    splits = {s: os.path.join("images", s) for s in earlier}
    splits[sub or "train"] = here
    config: dict[str, Any] = {"path": os.path.realpath(root)}
    config["train"] = splits.get("train", here)
    config["val"] = splits.get("val", splits.get("train", here))
    for split, folder in sorted(splits.items()):
        config.setdefault(split, folder)
    config["names"] = list(names)
    config.update(pose)
    return config


def _earlier_splits(out: FolderExport, sub: str, about: dict[str, Any]) -> list[str]:
    """The other splits earlier exports left in the folder (from its listing; in a folder exported into
    before listings, the folders under ``images/``), refused when exported with other class names or
    keypoints than ``about`` says."""
    if not sub:
        return []  # an export without a split replaces every split (its data.yaml reads all of images/)
    found: dict[str, dict[str, Any] | None]
    if out.listed:
        found = {s: a for s, a in out.earlier.items() if s}
    else:
        found = {s: _written_about(out.root) for s in _split_folders(out.root, sub)}
    other = sorted(s for s, a in found.items() if a != about)
    if other:
        raise InvalidArgumentError(
            f"{out.root!r} already holds the split(s) {other!r}, exported with other class names or "
            f"keypoints than this export's {about['names']!r:.200}"
            + (f" (kpt_shape {about['pose']['kpt_shape']!r})" if about["pose"] else "")
            + ". Export every split of one dataset with the same class names and keypoints, or into "
            "another folder."
        )
    return sorted(found)


def _split_folders(root: str, sub: str) -> list[str]:
    images = os.path.join(root, "images")
    return sorted(
        e for e in (os.listdir(images) if os.path.isdir(images) else [])
        if e != sub and not e.startswith(".") and os.path.isdir(os.path.join(images, e))
    )  # fmt: skip


def _about(names: list[str], pose: dict[str, Any]) -> dict[str, Any]:
    """What the listing records of a split: its class names and pose keys, as JSON holds them."""
    about: dict[str, Any] = json.loads(json.dumps({"names": list(names), "pose": pose or None}))
    return about


def _written_about(root: str) -> dict[str, Any] | None:
    """`_about` of the data.yaml an export from before listings wrote into ``root`` (None: unreadable)."""
    yaml = require("yaml", "Reading data.yaml")
    try:
        with open(os.path.join(root, "data.yaml"), encoding="utf-8") as f:
            config = yaml.safe_load(f)
        names = config.get("names") if isinstance(config, dict) else None
        if isinstance(names, dict):
            names = [names.get(k) for k in range(len(names))]
        if not isinstance(names, list):
            return None
        pose = {k: config[k] for k in POSE_KEYS if k in config}
        return _about([str(n) for n in names], pose)
    except (OSError, ValueError, TypeError, yaml.YAMLError):
        return None


def export_yolo(
    data: Dataset | DatasetView,
    folder: PathLike,
    split: str | None = None,
    *,
    task: Literal["pose"] | None = None,
    flip_idx: Sequence[int] | None = None,
) -> YoloExport:
    """Write ``data`` as a YOLO dataset folder: ``data.yaml``, ``images/[split/]``, ``labels/[split/]``.

    Needs ``images``, ``boxes`` and a class_label tensor ``labels`` (or ``categories``, as `ingest_coco`
    names it). What ultralytics (``YOLO(...).train(data=".../data.yaml")``) reads as written:

    * ``data.yaml`` names the folder as an absolute ``path``, ``train`` and ``val`` (this split, or one
      an earlier export wrote into the folder; with no split, both are ``images``) and the class names.
    * one label file per image (empty for an image without objects), named after its ``file_name``;
      a file holds polygon rows when every object of the image has a polygon (``polygons``; a
      multi-part polygon is joined into one outline, `merge_parts`), else box rows: one row type per
      file, since ultralytics drops a file that mixes them.
    * with ``task="pose"``, every row is a box followed by the object's keypoints (the ``keypoints``
      tensor, one group per box): ``x y v`` per keypoint, normalized, and ``data.yaml`` gets
      ``kpt_shape``, ``flip_idx`` and ``kpt_names`` (ultralytics' pose format). A labelled keypoint off
      the image is written ``0 0 0`` (`YoloExport.keypoints_outside`).
    * boxes are converted from the tensor's layout to normalized ``cxcywh`` and cut to the image;
      an object with nothing left on the image is left out.
    * crowd regions (``iscrowd`` 1) are left out: YOLO has no "ignore this region" row, and a crowd
      region trained as an object teaches the wrong thing (ultralytics' own COCO converter skips them).

    Files are written whole: every image and label file is staged in a hidden folder inside ``folder``,
    moved into place when all are written, and ``data.yaml`` is written last, so an export that fails
    half way (a full disk, a kill) leaves the previous export as it was. A ``file_name`` must stay inside
    the folder (no absolute path, no ``..`` or symbolic link out of it) and name a file (and label file)
    no other sample names, nor one differing only in letter case.

    A re-export into the folder holds exactly its own files: the previous export of the same split (and
    one without a split; without a split, of every split) is replaced, and its files that this one does
    not write are removed. Files it did not write are never removed; an image in the split's folder that
    it did not write is refused, naming it, since ultralytics would train on it (``docs/detection.md``,
    "Exporting again into a folder").

    Args:
        data: a dataset or view.
        folder: the export folder (created when missing).
        split: a sub-folder of ``images/`` and ``labels/`` (``"train"``, ``"val"``); export each split of
            a dataset into the same folder and ``data.yaml`` lists them all.
        task: None writes boxes (polygons where every object of an image has one); ``"pose"`` writes
            boxes with keypoints.
        flip_idx: with ``task="pose"``, the keypoint a horizontal flip turns each keypoint into (a
            permutation); by default the keypoints tensor's ``info.flip_idx`` (an `ingest_yolo`'s), else
            from the keypoint names (``left_*`` <-> ``right_*``), else each keypoint its own.

    Returns:
        What was written and what was left out (`YoloExport`).

    Raises:
        InvalidArgumentError: a tensor it needs is missing; a ``file_name`` leaves the folder, repeats
            another sample's (or differs from it only in case) or has no image file ending (the samples
            named); the folder holds other splits exported with other class names or keypoints, or an
            image in the split's folder that no export wrote; ``task`` or ``flip_idx`` is not one of the
            above.
        StorageError: a file cannot be written (the path named); the previous export is kept.
    """
    yaml = require("yaml", "Writing data.yaml")
    if task not in (None, "pose"):
        raise InvalidArgumentError(
            f"export_yolo's task must be None (boxes, or polygons where every object has one) or 'pose' "
            f"(boxes with keypoints). Got {task!r}."
        )
    if flip_idx is not None and task != "pose":
        raise InvalidArgumentError(
            "export_yolo's flip_idx says how keypoints flip: give it with task='pose'."
        )
    pose = PoseLayout.of(data, flip_idx) if task == "pose" else None
    reader = _Reader(data, pose)
    root, sub = os.path.abspath(os.fspath(folder)), "" if split is None else str(split)
    images, labels = (os.path.join(top, sub) if sub else top for top in ("images", "labels"))
    confine(root, images, what=f"split {split!r}")  # a split like '../x' would write outside the folder
    keys = pose.config(len(reader.names)) if pose is not None else {}
    about = _about(reader.names, keys)
    watch = Watch(
        images.replace(os.sep, "/"),
        _READ_AS_IMAGES,
        f"ultralytics would read as images of {'split ' + repr(sub) if sub else 'the dataset'}",
    )
    replaces: tuple[str, ...] | Literal["all"] = (sub, "") if sub else "all"
    with FolderExport(root, scope=sub, replaces=replaces, watch=watch, about=about) as out:
        config = _config(root, sub, reader.names, keys, _earlier_splits(out, sub, about))
        counts = _write_files(data, reader, out, images, labels)
        out.commit(os.path.join(root, "data.yaml"), yaml.safe_dump(config, sort_keys=False).encode())
    return YoloExport(root, os.path.join(root, "data.yaml"), *(int(c) for c in counts))


def _write_files(
    data: Dataset | DatasetView, reader: _Reader, out: FolderExport, images: str, labels: str
) -> np.ndarray:
    """Stage every image and its label file; the counts `YoloExport` reports."""
    compression = reader.tensors["images"].sample_compression
    counts = np.zeros(7, dtype=np.int64)
    for i in range(len(data)):
        image = reader.tensors["images"][i]
        name = reader.file_names[i] if reader.file_names is not None else f"{i:06d}.png"
        what = sample_name(i, name)
        pixels = image_bytes(image, compression, name, what)
        out.write(name, pixels, what=what, under=images)
        objects = reader.objects(i, image_size(image))
        text = objects.lines().encode()
        out.write(_label_name(name), text, what=f"the label file of {what}", under=labels)
        counts += objects.counts()
    return counts
