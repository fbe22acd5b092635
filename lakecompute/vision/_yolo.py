"""YOLO in: the ``images/`` + ``labels/`` + ``data.yaml`` layout read into a dataset, one sample per image.

| tensor | htype | a sample |
| --- | --- | --- |
| ``images`` | image | the file, kept as it is when its format is the stored one |
| ``file_name`` | text | the image's path under ``images/`` (``train/0001.jpg``) |
| ``boxes`` | bbox (``cxcywh``, normalized, float64) | ``(k, 4)``, the label file's numbers |
| ``labels`` | class_label | ``(k,)``, names from ``data.yaml`` |
| ``polygons`` | polygon (normalized, float64) | per object its polygon, ``[]`` for a box line |
| ``keypoints`` | keypoints (float64, pixels) | ``(k, K, 3)``: x, y, visibility per keypoint |

(``polygons`` only for segmentation labels; ``keypoints`` only for poses, a ``data.yaml`` with
``kpt_shape``: `lakecompute.vision._yolo_pose`.) Writing the layout is `lakecompute.vision._yolo_export`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.ingest import (
    AS_STORED,
    IngestOptions,
    PathLike,
    ReadOptions,
    load_for_ingest,
    refuse_overlap,
    run_ingest,
    skip_advice,
)
from lakecompute.vision._yolo_layout import YoloLayout
from lakecompute.vision._yolo_pose import PoseLayout

if TYPE_CHECKING:
    from typing import Unpack

    from lakecompute.datasets import Dataset
    from lakecompute.ingest import IngestKwargs

__all__ = ["ingest_yolo", "yolo_image"]


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
    reading: ReadOptions = AS_STORED,
) -> None:
    """The compute function of `ingest_yolo`: one image and its label file in, one sample out."""
    image_path, label_path, rel = sample_in
    parsed = [
        _parse_line(tokens, n_classes, f"{label_path} line {n}", pose)
        for n, tokens in enumerate(_lines(label_path), start=1)
    ]
    image = load_for_ingest(image_path, mode, compression, reading)
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

    def setup(ds: Dataset, compression: str | None) -> None:
        ds.create_tensor("images", htype="image", sample_compression=compression)
        ds.create_tensor("file_name", htype="text")
        ds.create_tensor("boxes", htype="bbox", dtype="float64", format="cxcywh", normalized=True)
        ds.create_tensor("labels", htype="class_label", class_names=names)
        if polygons:
            ds.create_tensor("polygons", htype="polygon", dtype="float64", normalized=True)
        if pose is not None:
            ds.create_tensor("keypoints", htype="keypoints", dtype="float64", **pose.tensor_info())

    return run_ingest(
        dest,
        setup,
        yolo_image,
        items,
        paths,
        root,
        parsed,
        n_classes=len(names),
        polygons=polygons,
        pose=pose,
    )
