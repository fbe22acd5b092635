"""COCO in and out: an images folder and an instances JSON become one sample per image, and back.

One sample per image holds its annotations as ragged columns (one row per annotation):

| tensor | htype | a sample |
| --- | --- | --- |
| ``images`` | image | the file, kept as it is when its format is the stored one |
| ``image_id``, ``file_name`` | generic int64, text | the image's id and file name in the JSON |
| ``boxes`` | bbox (``xywh``, pixels, float64) | ``(k, 4)``, COCO's own numbers |
| ``categories`` | class_label | ``(k,)`` indices into the category names (sorted by category id) |
| ``annotation_ids``, ``iscrowd``, ``areas`` | generic | ``(k,)`` |
| ``polygons`` | polygon (float64) | one entry per annotation: its polygons, ``[]`` for an RLE one |
| ``rles`` | json | one entry per annotation: its RLE as in the file, or None |
| ``masks`` | binary_mask | ``H x W x k``, every annotation rasterised by pycocotools (``masks=True``) |
| ``keypoints`` | keypoints (float64) | ``(k, K, 3)``, when categories name keypoints |
| ``num_keypoints`` | generic int64 | ``(k,)``, likewise |

``masks`` is made only when the file has segmentations (a box-only file gets none); in a file that has
some, an annotation without one gets an empty channel, so that there is one channel per box.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lakecompute.boxes import BoxLayout
from lakecompute.errors import InvalidArgumentError
from lakecompute.ingest import (
    AS_STORED,
    IngestOptions,
    PathLike,
    ReadOptions,
    load_for_ingest,
    refuse_overlap,
    run_ingest,
)
from lakecompute.localfiles import FolderExport, write_atomic
from lakecompute.parsing import parse_flag
from lakecompute.progress import progress_bar
from lakecompute.specs import htype_declaration
from lakecompute.vision._coco_annotations import AnnotationRules, annotation_columns, check_canvas
from lakecompute.vision._coco_checks import CocoCategories, CocoDocument, parse_document
from lakecompute.vision._common import (
    ImageFiles,
    encode_mask,
    image_size,
    plain,
    polygon_points,
    require,
    sample_name,
)

if TYPE_CHECKING:
    from typing import Unpack

    from lakecompute.datasets import Dataset, DatasetView
    from lakecompute.ingest import IngestKwargs

__all__ = ["coco_image", "export_coco", "ingest_coco"]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            coco = json.load(f, parse_constant=_refuse_constant)
    except FileNotFoundError:
        raise InvalidArgumentError(f"No annotations file at {path!r}. Check the path.") from None
    except (OSError, ValueError, RecursionError) as exc:
        # ValueError: not UTF-8, not JSON, or NaN/Infinity; RecursionError: nested too deep to parse.
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidArgumentError(f"Cannot read {path!r} as JSON ({detail:.300}). Fix the file.") from exc
    if not isinstance(coco, dict):
        raise InvalidArgumentError(f"{path!r} is not a COCO annotations file: expected a JSON object.")
    return coco


def _items(document: CocoDocument) -> tuple[list[bytes], list[str]]:
    """One input per image, in the file's order: its path, image entry and annotations as one JSON text
    (bytes), which an eval fingerprints, and sends to workers with every task, far faster than the
    nested dicts and lists (one parse per image in the worker costs less than that copy); and the paths.
    """
    items, paths = [], []
    for image in document.images:
        items.append(json.dumps([image.path, image.entry, document.annotations[image.id]]).encode())
        paths.append(image.path)
    return items, paths


def _rle(mask_utils: Any, seg: Any, height: int, width: int) -> Any:
    """The RLE of one annotation's segmentation, as pycocotools' ``COCO.annToRLE`` makes it."""
    if isinstance(seg, list):
        return mask_utils.merge(mask_utils.frPyObjects(seg, height, width))
    if isinstance(seg["counts"], list):
        return mask_utils.frPyObjects(seg, height, width)
    return seg


def _masks(anns: Sequence[Any], height: int, width: int) -> np.ndarray:
    mask_utils = require("pycocotools.mask", "Reading COCO masks")
    # Filled as uint8 and viewed as bool: pycocotools decodes to 0/1 bytes (in Fortran order), and
    # copying those into every k-th byte is twice as fast as casting them to bool on the way.
    out = np.zeros((height, width, len(anns)), dtype=np.uint8)
    with warnings.catch_warnings():
        # pycocotools 2.0 builds its result through an __array__ without numpy 2's copy keyword; numpy
        # warns (DeprecationWarning) and falls back to a copy. Not ours to fix; the values are right.
        warnings.simplefilter("ignore", DeprecationWarning)
        for j, ann in enumerate(anns):
            seg = ann.get("segmentation")
            if seg:
                out[:, :, j] = mask_utils.decode(_rle(mask_utils, seg, height, width))
    return out.view(np.bool_)


def coco_image(
    sample_in: bytes,
    sample_out: Any,
    mode: str,
    compression: str | None,
    rules: AnnotationRules,
    masks: bool,
    reading: ReadOptions = AS_STORED,
) -> None:
    """The compute function of `ingest_coco`: one image with its annotations in (the JSON text of its
    path, image entry and annotations), one sample out. Every annotation is checked (`AnnotationRules`)
    and every size it declares is checked against the decoded image before its masks are allocated."""
    path, image, anns = json.loads(sample_in)
    checked = annotation_columns(anns, image, rules)
    pixels = load_for_ingest(path, mode, compression, reading)
    height, width = int(pixels.shape[0]), int(pixels.shape[1])
    check_canvas(checked, image, height, width)
    row: dict[str, Any] = {
        "images": pixels,
        "image_id": int(image["id"]),
        "file_name": str(image["file_name"]),
        **checked.columns,
    }
    if masks:
        row["masks"] = _masks(anns, height, width)
    sample_out.append(row)


def _create_tensors(ds: Dataset, cats: CocoCategories, compression: str | None, masks: bool) -> None:
    ds.create_tensor("images", htype="image", sample_compression=compression)
    ds.create_tensor("image_id", dtype="int64")
    ds.create_tensor("file_name", htype="text")
    ds.create_tensor("boxes", htype="bbox", dtype="float64", format="xywh", normalized=False)
    names = [str(c["name"]) for c in cats.entries]
    ds.create_tensor("categories", htype="class_label", class_names=names, coco_categories=cats.entries)
    ds.create_tensor("annotation_ids", dtype="int64")
    ds.create_tensor("iscrowd", dtype="uint8")
    ds.create_tensor("areas", dtype="float64")
    ds.create_tensor("polygons", htype="polygon", dtype="float64")
    ds.create_tensor("rles", htype="json")
    if masks:
        ds.create_tensor("masks", htype="binary_mask")
    if cats.keypoint_names:
        ds.create_tensor(
            "keypoints",
            htype="keypoints",
            dtype="float64",
            keypoint_names=cats.keypoint_names,
            skeleton=cats.skeleton,
        )
        ds.create_tensor("num_keypoints", dtype="int64")


def ingest_coco(
    images: PathLike,
    annotations: PathLike,
    dest: PathLike,
    *,
    image_compression: Literal["auto", "png", "jpeg", "webp"] | None = "auto",
    masks: bool = True,
    progressbar: bool = True,
    **options: Unpack[IngestKwargs],
) -> Dataset:
    """Turn a COCO images folder and its annotations JSON into a dataset, one sample per image.

    Boxes, categories, segmentations (polygons and RLE), keypoints, areas, crowd flags, the image and
    annotation ids, and the file's ``info`` and ``licenses`` (in ``ds.info``) are kept, so
    `export_coco` writes back a file that pycocotools reads as the same annotations. Image files keep
    their bytes when their format is the stored one (``"auto"``: the most common). Files are decoded,
    and masks rasterised, in parallel by an eval on the transform engine, with a progress bar.

    Args:
        images: the folder the ``file_name`` of each image is relative to.
        annotations: the COCO JSON (``instances_*.json``, ``person_keypoints_*.json``).
        dest: where to create the dataset.
        image_compression: as for `lakecompute.ingest_classification`.
        masks: also store every annotation rasterised as a ``binary_mask`` channel (``masks``; needs
            pycocotools), when the file has segmentations: a box-only file gets no ``masks`` tensor, and
            an annotation without a segmentation in a file that has some gets an empty channel (one
            channel per box, as augmentations need). False skips that work: polygons and RLE are kept
            either way.
        progressbar: show a progress bar.
        **options: the options every ingest takes (`lakecompute.ingest.IngestKwargs`), by keyword.

    Returns:
        The new dataset (tensors in the module docstring of `lakecompute.vision`).

    The annotations file is untrusted input, checked at one gate (``docs/detection.md``, "What is
    trusted"): the file as a whole before anything is written, each annotation (and every size it
    declares, against the decoded image) before anything is allocated for it.

    Raises:
        InvalidArgumentError: the JSON is not a COCO annotations file or breaks a rule of the file as a
            whole (ids that are not unique integers, a ``file_name`` resolving outside ``images``, two
            keypoint schemas, ...), pycocotools is missing (with ``masks=True``), or ``dest`` overlaps
            ``images`` or holds ``annotations``. Named: the file, the entry and the rule.
        InvalidSampleError: an image file cannot be read (on ``images``), or an annotation breaks a rule
            (on its own tensor, naming the file, the annotation, its image and the rule); with
            ``skip_errors=True`` such images are skipped instead, each listed with its reason.

    Example:
        >>> ds = lc.ingest_coco("val2017/", "instances_val2017.json", "./coco-val")  # doctest: +SKIP
        >>> ds.boxes[0].numpy()  # doctest: +SKIP
    """
    parsed = IngestOptions.parse("ingest_coco", options, image_compression, progressbar)
    images_dir, where = os.fspath(images), os.fspath(annotations)
    refuse_overlap(where, dest, what="annotations file")
    refuse_overlap(images_dir, dest)
    coco = _read_json(where)
    document = parse_document(coco, images_dir, where)
    # A box-only file has nothing to rasterise: a channel of zeros per box would be all it stored (a
    # 574-box aerial image read 3.26 GB of them).
    masks = parse_flag("masks", masks) and _has_segmentations(document)
    if masks:
        require("pycocotools.mask", "ingest_coco(masks=True)")
    cats = document.categories
    items, paths = _items(document)
    _check_files(paths, images_dir)

    def setup(ds: Dataset, compression: str | None) -> None:
        _create_tensors(ds, cats, compression, masks)
        kept = {f"coco_{key}": coco[key] for key in _DATASET_KEYS if key in coco}
        if kept:
            ds.info.update(kept)  # the file's info and licenses, for export_coco to write back

    rules = document.rules(where)
    return run_ingest(dest, setup, coco_image, items, paths, images_dir, parsed, rules=rules, masks=masks)


def _has_segmentations(document: CocoDocument) -> bool:
    """Whether any annotation of the file has a segmentation (polygons or RLE)."""
    return any(
        isinstance(ann, dict) and bool(ann.get("segmentation"))
        for anns in document.annotations.values()
        for ann in anns
    )


def _check_files(paths: Sequence[str], images_dir: str) -> None:
    from lakecompute.ingest import IMAGE_EXTENSIONS

    odd = [p for p in paths if os.path.splitext(p)[1].lower() not in IMAGE_EXTENSIONS]
    if odd:
        raise InvalidArgumentError(
            f"Image {odd[0]!r} is not a file name ending in one of {sorted(IMAGE_EXTENSIONS)}. "
            f"Check the file names in the annotations (relative to {images_dir!r})."
        )


# -- export ------------------------------------------------------------------------------------------

_COCO_BOXES = BoxLayout("xywh", normalized=False)


class _Columns:
    """The tensors of a dataset (or view) that export reads, each read once as a list."""

    def __init__(self, data: Dataset | DatasetView) -> None:
        self.data = data
        self.names = set(data.tensors)

    def get(self, name: str) -> Any:
        if name not in self.names:
            return None
        tensor = self.data.tensors[name]
        if name == "masks":
            return _OneAtATime(tensor)  # H x W x k bools per image: never all of them at once
        if not htype_declaration(tensor.htype).numeric:
            return list(tensor.data())  # text or json values
        return list(tensor.numpy(aslist=True))


class _OneAtATime:
    """A tensor's samples by index, read when asked for, the last one kept (an export asks for each
    sample's masks once per annotation)."""

    def __init__(self, tensor: Any) -> None:
        self._tensor = tensor
        self._last: tuple[int, Any] | None = None

    def __getitem__(self, i: int) -> Any:
        if self._last is None or self._last[0] != i:
            self._last = (i, self._tensor[i].numpy())
        return self._last[1]


def _categories(data: Dataset | DatasetView, points: tuple[list[str], list[Any]] | None) -> list[Any]:
    info = data.tensors["categories"].info
    kept = info.get("coco_categories")
    if kept:
        return list(kept)
    cats = [{"id": i + 1, "name": n} for i, n in enumerate(info.get("class_names") or [])]
    if points is not None:
        for c in cats:
            c["keypoints"], c["skeleton"] = points
    return cats


def _segmentation(j: int, row: _ImageRow, cols: dict[str, Any]) -> Any:
    """Annotation ``j``'s segmentation: its RLE, its polygons, or its mask when not empty; None for an
    annotation with none (a box-only one, whose mask channel, if any, is empty): the export then writes no
    ``segmentation`` for it, as the file it came from had none."""
    i = row.index
    rles, polygons = _at(cols["rles"], i), _at(cols["polygons"], i)
    if rles is not None and rles[j] is not None:
        return rles[j]
    if polygons is not None and len(polygons[j]):
        info = cols["polygon_info"]
        return [plain(polygon_points(part, info, False, row.canvas)) for part in polygons[j]]
    masks = _at(cols["masks"], i)
    if masks is not None and masks[:, :, j].any():
        return encode_mask(masks[:, :, j])
    return None


@dataclass(frozen=True, slots=True)
class _ImageRow:
    """What one sample contributes to the COCO file."""

    index: int
    image_id: int
    canvas: tuple[int, int]
    """The image's ``(height, width)``."""


def _annotations(row: _ImageRow, cols: dict[str, Any], ids: list[int], next_id: int) -> list[Any]:
    i = row.index
    boxes = cols["box_layout"].convert(cols["boxes"][i], _COCO_BOXES, row.canvas)
    out = []
    for j in range(len(boxes)):
        ann: dict[str, Any] = {"id": next_id + j, "image_id": row.image_id}
        if cols["annotation_ids"] is not None:
            ann["id"] = int(cols["annotation_ids"][i][j])
        ann["category_id"] = ids[int(cols["categories"][i][j])]
        ann["bbox"] = plain(boxes[j])
        ann["area"] = _area(cols, i, j, boxes[j])
        ann["iscrowd"] = int(cols["iscrowd"][i][j]) if cols["iscrowd"] is not None else 0
        segmentation = _segmentation(j, row, cols)
        if segmentation is not None:
            ann["segmentation"] = segmentation
        if cols["keypoints"] is not None and int(cols["categories"][i][j]) in cols["point_classes"]:
            ann["keypoints"] = plain(cols["keypoints"][i][j])
            visible = int((np.asarray(cols["keypoints"][i][j])[:, 2] > 0).sum())
            ann["num_keypoints"] = int(cols["num_keypoints"][i][j]) if cols["num_keypoints"] else visible
        out.append(ann)
    return out


def _at(column: list[Any] | None, i: int) -> Any:
    return None if column is None else column[i]


def _area(cols: dict[str, Any], i: int, j: int, box: np.ndarray) -> Any:
    if cols["areas"] is not None:
        return plain([cols["areas"][i][j]])[0]
    if cols["masks"] is not None:
        return int(cols["masks"][i][:, :, j].sum())
    return plain([box[2] * box[3]])[0]


def export_coco(
    data: Dataset | DatasetView,
    annotations: PathLike,
    images: PathLike | None = None,
    *,
    image_format: str | None = None,
    progressbar: bool = True,
) -> dict[str, Any]:
    """Write ``data`` as a COCO annotations JSON (and its images into a folder).

    Reads the tensors `ingest_coco` makes: ``images``, ``boxes`` and ``categories`` are needed; the others
    are used when present (ids, file names, areas, crowd flags, polygons, RLE, masks, keypoints), else
    made up (ids counting from 1, ``<image_id>.png``, areas from masks or boxes). Boxes are converted
    from the tensor's layout (its info's ``format`` and ``normalized``) to COCO's ``xywh`` pixels, and
    normalized polygons (a YOLO segmentation ingest's) to pixels. The file's ``info`` and ``licenses``
    come from ``ds.info`` (``coco_info``, ``coco_licenses``, where `ingest_coco` keeps them).

    Every file is written whole: the images go to a hidden staging folder inside ``images`` first, are
    moved into place when all are written, and the annotations file is written last (a temporary file
    renamed over it). An export that fails half way (a full disk, a kill) leaves the previous export as
    it was. An image's ``file_name`` must stay inside ``images`` (no absolute path, no ``..`` or
    symbolic link out of it) and name a file no other sample names, nor one differing only in letter
    case.

    Exporting again with the same ``annotations`` file leaves ``images`` holding that export's images:
    those the previous export with it wrote and this one does not are removed (unchanged ones only).
    Other files in ``images`` — another annotations file's images, your own — are left alone
    (``docs/detection.md``, "Exporting again into a folder").

    Images keep their stored bytes: a file stored in the format its name says is written byte for byte,
    one stored in another format (a JPEG converted to PNG at ingest) is written as its stored bytes under
    the name with that format's ending (``a.jpg`` -> ``a.png``, in the written ``file_name`` too, and said
    in one `LakeComputeWarning`); nothing is encoded again unless ``image_format`` asks for it, and an
    encoding that loses detail (JPEG) is warned about (`lakecompute.vision._common.ImageFiles`).

    Args:
        data: a dataset or view.
        annotations: the JSON file to write.
        images: a folder to write the image files to (by ``file_name``); None writes none.
        image_format: None (each image in the format it is stored in), or ``"png"``, ``"jpeg"``,
            ``"webp"`` or ``"bmp"``: every image in that format, encoded when stored otherwise.
        progressbar: show a progress bar of the images written.

    Returns:
        The COCO dict that was written.

    Raises:
        InvalidArgumentError: a tensor export needs is missing, or a ``file_name`` leaves ``images``,
            repeats another sample's, or has no image file ending (the sample named); an image the
            ``image_format`` cannot hold (RGBA as JPEG).
        StorageError: a file cannot be written (the path named); the previous export is kept.
    """
    cols = _Columns(data)
    for needed in ("images", "boxes", "categories"):
        if needed not in cols.names:
            raise InvalidArgumentError(
                f"export_coco needs a tensor {needed!r}; the dataset has {sorted(cols.names)!r}. "
                "Rename yours with ds.rename_tensor, or ingest with lc.ingest_coco."
            )
    read: dict[str, Any] = {n: cols.get(n) for n in _READ}
    read["box_layout"] = BoxLayout.of(data.tensors["boxes"])
    read["polygon_info"] = dict(data.tensors["polygons"].info) if "polygons" in cols.names else {}
    points = None
    if "keypoints" in cols.names:
        kinfo = data.tensors["keypoints"].info
        points = (list(kinfo.get("keypoint_names") or []), list(kinfo.get("skeleton") or []))
    categories = _categories(data, points)
    read["point_classes"] = {k for k, c in enumerate(categories) if c.get("keypoints")}
    files = ImageFiles("export_coco", data.tensors["images"].sample_compression, image_format)
    with progress_bar(len(data), "export_coco", unit="image", enabled=progressbar) as bar:
        if images is None:
            return _write(data, read, categories, _Out(None, files, bar), os.fspath(annotations))
        # The files of one annotations file are one export: another annotations file may share the folder.
        scope = os.path.relpath(os.path.realpath(annotations), os.path.realpath(images)).replace(os.sep, "/")
        with FolderExport(os.fspath(images), scope=scope) as out:
            return _write(data, read, categories, _Out(out, files, bar), os.fspath(annotations))


@dataclass(frozen=True, slots=True)
class _Out:
    """Where an export's images go: the folder (None: no image files), how each is written, the bar."""

    folder: FolderExport | None
    files: ImageFiles
    bar: Any


def _write(
    data: Dataset | DatasetView, cols: dict[str, Any], categories: list[Any], out: _Out, annotations: str
) -> dict[str, Any]:
    """Build the COCO document (staging each image in the folder), then write it last."""
    coco = _document(data, cols, [int(c["id"]) for c in categories], out)
    coco["categories"] = categories
    for key in _DATASET_KEYS:
        if f"coco_{key}" in data.info:
            coco[key] = data.info[f"coco_{key}"]
    text = json.dumps(coco).encode("utf-8")
    if out.folder is None:
        write_atomic(annotations, text)
    else:
        out.folder.commit(annotations, text)
        out.files.warn()
    return coco


_DATASET_KEYS = ("info", "licenses")

_READ = (
    "boxes",
    "categories",
    "image_id",
    "file_name",
    "annotation_ids",
    "iscrowd",
    "areas",
    "polygons",
    "rles",
    "masks",
    "keypoints",
    "num_keypoints",
)


def _document(data: Dataset | DatasetView, cols: dict[str, Any], ids: list[int], out: _Out) -> dict[str, Any]:
    out_images: list[Any] = []
    out_anns: list[Any] = []
    for i in range(len(data)):
        image = data.tensors["images"][i]
        canvas = image_size(image)
        image_id = int(cols["image_id"][i]) if cols["image_id"] is not None else i + 1
        given = cols["file_name"]
        name = str(given[i]) if given is not None else out.files.default_name(str(image_id))
        if out.folder is not None:
            what = sample_name(i, name)
            name, blob = out.files.file(image, name, what)
            out.folder.write(name, blob, what=what)
        out_images.append({"id": image_id, "file_name": name, "height": canvas[0], "width": canvas[1]})
        row = _ImageRow(i, image_id, canvas)
        out_anns.extend(_annotations(row, cols, ids, len(out_anns) + 1))
        out.bar.update(1)
    return {"images": out_images, "annotations": out_anns}
