"""YOLO in and out: the ``images/`` + ``labels/`` + ``data.yaml`` layout, one sample per image.

| tensor | htype | a sample |
| --- | --- | --- |
| ``images`` | image | the file, kept as it is when its format is the stored one |
| ``file_name`` | text | the image's path under ``images/`` (``train/0001.jpg``) |
| ``boxes`` | bbox (``cxcywh``, normalized, float64) | ``(k, 4)``, the label file's numbers |
| ``labels`` | class_label | ``(k,)``, names from ``data.yaml`` |
| ``polygons`` | polygon (normalized, float64) | per object its polygon, ``[]`` for a box line |

(``polygons`` only for segmentation labels.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError
from lakecompute.ingest import (
    IngestOptions,
    PathLike,
    load_for_ingest,
    plan_for_ingest,
    refuse_overlap,
    run_ingest,
    target_mode,
)
from lakecompute.localfiles import Folder, confine
from lakecompute.vision._common import convert_boxes, image_files, image_size, require, write_image

if TYPE_CHECKING:
    from typing import Unpack

    from lakecompute.datasets import Dataset, DatasetView
    from lakecompute.ingest import IngestKwargs

__all__ = ["export_yolo", "ingest_yolo", "yolo_image"]


def _read_config(root: str) -> Any:
    """``data.yaml`` parsed (safely: plain YAML, no Python tags), read only from inside ``root``."""
    yaml = require("yaml", "Reading data.yaml")
    path = confine(root, "data.yaml", what=f"data.yaml of {root!r}")
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except FileNotFoundError:
        raise InvalidArgumentError(
            f"No data.yaml in {root!r}. A YOLO dataset is a folder with data.yaml (names: [...]), "
            "images/ and labels/."
        ) from None
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:
        # ValueError: not UTF-8; YAMLError: not YAML, or a tag safe_load refuses; RecursionError: too deep.
        detail = " ".join(str(exc).split())  # yaml's messages span lines
        raise InvalidArgumentError(f"Cannot read {path!r} as YAML ({detail:.300}). Fix the file.") from exc


def _names(root: str) -> list[str]:
    """The class names of ``data.yaml`` (a list, or a dict index -> name): distinct strings, one or more."""
    config = _read_config(root)
    path = os.path.join(root, "data.yaml")
    names = config.get("names") if isinstance(config, dict) else None
    if (
        isinstance(names, dict)
        and {k.__class__ for k in names} <= {int}
        and sorted(names) == [*range(len(names))]
    ):
        names = [names[i] for i in range(len(names))]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidArgumentError(
            f"{path}: expected 'names' as a list of class names or a dict 0: name, 1: name, ... "
            f"Got {names!r:.120}."
        )
    if not names:
        raise InvalidArgumentError(f"{path}: expected at least one class name under 'names'. Got none.")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(
            f"{path}: class names must be distinct (a label is an index into them). Got {twice[0]!r} more "
            "than once. Fix the file."
        )
    return names


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
            "labels", f"{path}: the label file is not UTF-8 text ({exc.reason} at byte {exc.start}). {_FIX}"
        ) from exc
    except OSError as exc:
        raise InvalidSampleError("labels", f"{path}: the label file cannot be read ({exc}). {_FIX}") from exc


_FIX = "Fix the file, or pass skip_errors=True to skip the images whose label files break a rule."


def _parse_line(tokens: list[str], n_classes: int, where: str) -> tuple[int, np.ndarray, np.ndarray | None]:
    """``(class, cxcywh box, polygon or None)`` of one label line: a class index, then 4 numbers (a box)
    or 3 or more points (a polygon), every number finite and in 0..1."""
    try:
        cls, values = int(tokens[0]), np.array([float(t) for t in tokens[1:]], dtype=np.float64)
    except ValueError:
        cls, values = -1, np.empty(0)
    if not 0 <= cls < n_classes or (len(values) != 4 and (len(values) < 6 or len(values) % 2)):
        raise InvalidSampleError(
            "labels",
            f"{where}: expected 'class cx cy w h' or 'class x1 y1 x2 y2 x3 y3 ...' with class in "
            f"0..{n_classes - 1} (data.yaml names). Got {' '.join(tokens)!r:.120}. {_FIX}",
        )
    if not (np.isfinite(values).all() and values.min() >= 0 and values.max() <= 1):
        raise InvalidSampleError(
            "boxes" if len(values) == 4 else "polygons",
            f"{where}: expected coordinates as finite numbers in 0..1 (YOLO's are normalized by the "
            f"image's width and height). Got {' '.join(tokens)!r:.120}. {_FIX}",
        )
    if len(values) == 4:
        return cls, values, None
    points = values.reshape(-1, 2)
    lo, hi = points.min(axis=0), points.max(axis=0)
    return cls, np.concatenate([(lo + hi) / 2, hi - lo]), points


def yolo_image(
    sample_in: tuple[str, str, str],
    sample_out: Any,
    mode: str,
    compression: str | None,
    n_classes: int,
    polygons: bool,
) -> None:
    """The compute function of `ingest_yolo`: one image and its label file in, one sample out."""
    image_path, label_path, rel = sample_in
    parsed = [
        _parse_line(tokens, n_classes, f"{label_path} line {n}")
        for n, tokens in enumerate(_lines(label_path), start=1)
    ]
    row: dict[str, Any] = {
        "images": load_for_ingest(image_path, mode, compression),
        "file_name": rel,
        "boxes": np.array([b for _, b, _ in parsed], dtype=np.float64).reshape(-1, 4),
        "labels": np.array([c for c, _, _ in parsed], dtype=np.uint32),
    }
    if polygons:
        row["polygons"] = [[] if p is None else [p] for _, _, p in parsed]
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


def _items(root: str, sub: str) -> list[tuple[str, str, str]]:
    """``(image path, label path, path under images/)`` of every image, each path confined to ``root``
    (symbolic links followed): the images and labels folders, and every image and label file."""
    images_root = confine(root, os.path.join("images", sub), what=f"the images folder of split {sub!r}")
    labels_root = confine(root, os.path.join("labels", sub), what=f"the labels folder of split {sub!r}")
    files = image_files(images_root) if os.path.isdir(images_root) else []
    if not files:
        raise InvalidArgumentError(f"Found no images under {images_root!r}. Check the folder and split.")
    images, labels = Folder.of(images_root), Folder.of(labels_root)
    items = []
    for rel in files:
        label = os.path.splitext(rel)[0] + ".txt"
        image_path = images.confine(rel, what=f"image file {rel!r}")
        items.append((image_path, labels.confine(label, what=f"label file {label!r}"), rel))
    return items


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
      data.yaml                 names: [car, person]   (or names: {0: car, 1: person})
      images/train/0001.jpg     any depth; split= picks one sub-folder
      labels/train/0001.txt     one line per object: class cx cy w h (normalized), or a polygon
    ```

    Images without a label file have no objects. Label lines with a polygon (``class x1 y1 x2 y2 ...``,
    YOLO's segmentation format) also fill a ``polygons`` tensor, and their box is the polygon's bounds.
    Files are read in parallel by an eval, with a progress bar; image bytes are kept as for
    `lakecompute.ingest_classification`.

    Args:
        folder: the dataset folder.
        dest: where to create the dataset.
        split: a sub-folder of ``images/`` (``"train"``) to read alone; None reads every image.
        image_compression: as for `lakecompute.ingest_classification`.
        progressbar: show a progress bar.
        **options: the options every ingest takes (`lakecompute.ingest.IngestKwargs`), by keyword.

    Returns:
        The new dataset: ``images``, ``file_name``, ``boxes`` (cxcywh, normalized), ``labels``, and
        ``polygons`` for segmentation labels.

    ``data.yaml`` and the label files are untrusted input (``docs/detection.md``, "What is trusted"):
    every path is confined to ``folder`` (symbolic links followed), and every line checked.

    Raises:
        InvalidArgumentError: no data.yaml, one that is not YAML, or names that are not distinct
            strings; a path resolving outside ``folder``; no images; or pyyaml is not installed.
        InvalidSampleError: an unreadable image, or a label file that is not text or has a malformed
            line (file and line named); with ``skip_errors=True`` such images are skipped instead.
    """
    parsed = IngestOptions.parse("ingest_yolo", options, image_compression, progressbar)
    root = os.fspath(folder)
    refuse_overlap(root, dest)
    names = _names(root)
    items = _items(root, "" if split is None else str(split))
    paths = [p for p, _, _ in items]
    polygons = _has_polygons([lp for _, lp, _ in items])
    compression = plan_for_ingest(paths, parsed.image_compression).compression

    def setup(ds: Dataset) -> None:
        ds.create_tensor("images", htype="image", sample_compression=compression)
        ds.create_tensor("file_name", htype="text")
        ds.create_tensor("boxes", htype="bbox", dtype="float64", format="cxcywh", normalized=True)
        ds.create_tensor("labels", htype="class_label", class_names=names)
        if polygons:
            ds.create_tensor("polygons", htype="polygon", dtype="float64", normalized=True)

    import lakecompute as lc

    function = lc.compute(yolo_image)(
        mode=target_mode(paths), compression=compression, n_classes=len(names), polygons=polygons
    )
    return run_ingest(dest, setup, function, items, paths, root, parsed)


# -- export ------------------------------------------------------------------------------------------


def _label_tensor(data: Dataset | DatasetView) -> str:
    for name in ("labels", "categories"):
        if name in data.tensors and data.tensors[name].htype == "class_label":
            return name
    raise InvalidArgumentError(
        f"export_yolo needs a class_label tensor 'labels' (or 'categories'), one per box; the dataset "
        f"has {sorted(data.tensors)!r}."
    )


def _number(v: float) -> str:
    return repr(float(v))  # the shortest text that reads back as the same float


def _label_lines(
    classes: np.ndarray, boxes: np.ndarray, polys: list[Any] | None, scale: np.ndarray | None
) -> list[str]:
    lines = []
    for j, c in enumerate(np.asarray(classes).reshape(-1).tolist()):
        if polys is not None and len(polys[j]):
            points = np.asarray(polys[j][0], dtype=np.float64)
            values = (points / scale if scale is not None else points).reshape(-1)
        else:
            values = boxes[j]
        lines.append(" ".join([str(int(c)), *(_number(v) for v in values)]))
    return lines


def export_yolo(data: Dataset | DatasetView, folder: PathLike, split: str | None = None) -> None:
    """Write ``data`` as a YOLO dataset folder: ``data.yaml``, ``images/[split/]``, ``labels/[split/]``.

    Needs ``images``, ``boxes`` and a class_label tensor ``labels`` (or ``categories``, as `ingest_coco`
    names it). Boxes in another format are converted to normalized ``cxcywh``; ``polygons`` (when
    present) are written as segmentation lines, normalized by the image size unless the tensor's info
    says ``normalized``. Files are named by ``file_name`` when there is one.
    """
    yaml = require("yaml", "Writing data.yaml")
    label_name = _label_tensor(data)
    root, sub = os.fspath(folder), "" if split is None else str(split)
    tensors = data.tensors
    info = tensors["boxes"].info
    layout = (info.get("format", "xyxy"), bool(info.get("normalized", False)))
    names = list(tensors[label_name].info.get("class_names") or [])
    file_names = list(tensors["file_name"].text()) if "file_name" in tensors else None
    polys = list(tensors["polygons"].numpy(aslist=True)) if "polygons" in tensors else None
    polys_normalized = bool(tensors["polygons"].info.get("normalized")) if polys is not None else True
    compression = tensors["images"].sample_compression
    for i in range(len(data)):
        image = tensors["images"][i]
        height, width = image_size(image)
        name = file_names[i] if file_names is not None else f"{i:06d}.png"
        boxes = convert_boxes(tensors["boxes"][i].numpy(), layout, ("cxcywh", True), width, height)
        scale = None if polys_normalized else np.array([width, height], dtype=np.float64)
        lines = _label_lines(tensors[label_name][i].numpy(), boxes, _at(polys, i), scale)
        write_image(image, compression, os.path.join(root, "images", sub, name))
        label_path = _label_path(os.path.join(root, "labels", sub), name)
        os.makedirs(os.path.dirname(label_path), exist_ok=True)
        with open(label_path, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    config = {"path": ".", "train": os.path.join("images", sub) if sub else "images", "names": names}
    with open(os.path.join(root, "data.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, sort_keys=False)


def _at(column: list[Any] | None, i: int) -> Any:
    return None if column is None else column[i]
