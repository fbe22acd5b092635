"""YOLO out: a dataset written as the ``images/`` + ``labels/`` + ``data.yaml`` layout ultralytics reads.

The tensors are those `lakecompute.vision.ingest_yolo` makes (`lakecompute.vision._yolo`); the files are
written through one `lakecompute.localfiles.FolderExport`, ``data.yaml`` last.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lakecompute.boxes import BoxLayout, canvas_tolerance
from lakecompute.errors import InvalidArgumentError
from lakecompute.ingest import (
    IMAGE_EXTENSIONS,
    PathLike,
)
from lakecompute.localfiles import FolderExport, Watch, confine
from lakecompute.progress import progress_bar
from lakecompute.specs import htype_declaration
from lakecompute.vision._common import (
    ImageFiles,
    image_size,
    polygon_points,
    require,
    sample_name,
)
from lakecompute.vision._yolo_pose import POSE_KEYS, PoseLayout

if TYPE_CHECKING:
    from lakecompute.datasets import Dataset, DatasetView

__all__ = ["YoloExport", "export_yolo", "merge_parts"]


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
    renamed: tuple[tuple[str, str], ...] = ()
    """``(file_name, written as)`` of each image written under a name with another ending: stored in
    another format than its name said (written as its stored bytes), or encoded as ``image_format``."""
    reencoded: int = 0
    """Images encoded as JPEG (``image_format="jpeg"``) from pixels stored otherwise: lossy."""


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
    image_format: str | None = None,
    progressbar: bool = True,
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

    Images keep their stored bytes, as `lakecompute.vision.export_coco` writes them: one stored in another
    format than its name says is written as its stored bytes under the name with that format's ending
    (`YoloExport.renamed`; its label file keeps the name's stem), and nothing is encoded again unless
    ``image_format`` asks for it (a JPEG encoding is warned about: lossy).

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
        image_format: None (each image in the format it is stored in), or ``"png"``, ``"jpeg"``,
            ``"webp"`` or ``"bmp"``: every image in that format, encoded when stored otherwise.
        progressbar: show a progress bar of the images written.

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
    files = ImageFiles("export_yolo", reader.tensors["images"].sample_compression, image_format)
    bar = progress_bar(len(data), "export_yolo", unit="image", enabled=progressbar)
    with bar, FolderExport(root, scope=sub, replaces=replaces, watch=watch, about=about) as out:
        config = _config(root, sub, reader.names, keys, _earlier_splits(out, sub, about))
        counts = _write_files(data, reader, out, (images, labels), files, bar)
        out.commit(os.path.join(root, "data.yaml"), yaml.safe_dump(config, sort_keys=False).encode())
    files.warn()
    images_n, objects, segments, crowd, outside, clipped, lost = (int(c) for c in counts)
    return YoloExport(
        root, os.path.join(root, "data.yaml"), images_n, objects, segments, crowd, outside, clipped,
        keypoints_outside=lost, renamed=tuple(files.renamed), reencoded=len(files.reencoded),
    )  # fmt: skip


def _write_files(
    data: Dataset | DatasetView,
    reader: _Reader,
    out: FolderExport,
    folders: tuple[str, str],
    files: ImageFiles,
    bar: Any,
) -> np.ndarray:
    """Stage every image (in ``folders[0]``) and its label file (in ``folders[1]``); the counts
    `YoloExport` reports."""
    images, labels = folders
    counts = np.zeros(7, dtype=np.int64)
    for i in range(len(data)):
        image = reader.tensors["images"][i]
        name = reader.file_names[i] if reader.file_names is not None else files.default_name(f"{i:06d}")
        what = sample_name(i, name)
        name, blob = files.file(image, name, what)
        out.write(name, blob, what=what, under=images)
        objects = reader.objects(i, image_size(image))
        text = objects.lines().encode()
        out.write(_label_name(name), text, what=f"the label file of {what}", under=labels)
        counts += objects.counts()
        bar.update(1)
    return counts
