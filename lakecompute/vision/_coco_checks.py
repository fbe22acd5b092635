"""The one gate of `ingest_coco`: nothing read from an annotations file is believed until it is checked.

Two levels, each with its own error:

* **The document** (`parse_document`, in the calling process, before a dataset is created): the top-level
  lists; categories, images and annotations as JSON objects with integer ids (in int64's range, never a
  string, float or bool), each id once; category names distinct; one keypoint schema (names and skeleton)
  for every category that names keypoints; each image's ``file_name`` confined to the images folder
  (`lakecompute.localfiles.confine`: ``..``, absolute paths and symbolic links out of it are refused) and
  no two images reading one file; ``height`` and ``width`` positive integers when given; each
  annotation's ``image_id`` one of the images. A problem here is an `InvalidArgumentError` naming the file,
  the entry and the rule; nothing is written, and ``skip_errors`` does not skip it (the file as a whole
  is wrong).
* **Each annotation** (`annotation_columns` then `check_canvas`, in the worker that reads its image): the
  fields' types and shapes, then every declared size against the decoded image, before anything is
  allocated for it. A problem here is an `InvalidSampleError` on the annotation's tensor (``boxes``,
  ``categories``, ``polygons``, ``rles``, ``keypoints``, ...) naming the file, the annotation, its image
  and the rule; ``skip_errors=True`` skips that image (and says why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError
from lakecompute.localfiles import confine

__all__ = [
    "AnnotationRules",
    "CocoCategories",
    "CocoDocument",
    "CocoImage",
    "annotation_columns",
    "check_canvas",
    "parse_document",
    "rle_counts",
]

_INT64: Final = 2**63
#: Integers float64 holds exactly: the largest a coordinate, area or count may be.
_EXACT: Final = 2**53
_NUMBER_TYPES: Final = frozenset({int, float})
_FIX_FILE: Final = "Fix the file."
_SKIP: Final = (
    "Fix the annotation, or pass skip_errors=True to skip the images whose annotations break a rule."
)


def is_id(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an id as COCO writes them: a JSON integer (not a bool) in int64's range."""
    return isinstance(value, int) and value.__class__ is int and -_INT64 <= value < _INT64


def _got(value: object) -> str:
    return f"{type(value).__name__}: {value!r:.80}"


def _document_error(where: str, what: str, rule: str, value: object) -> InvalidArgumentError:
    return InvalidArgumentError(f"{where}: {what}: {rule} Got {_got(value)}. {_FIX_FILE}")


def _id(value: object, what: str, where: str) -> int:
    if not is_id(value):
        raise _document_error(
            where, f"{what} is not an integer", "expected an integer in int64's range.", value
        )
    return value


def _unique(ids: Sequence[int], noun: str, plural: str, where: str) -> None:
    seen: dict[int, int] = {}
    for n, i in enumerate(ids):
        if i in seen:
            raise InvalidArgumentError(
                f"{where}: {noun} id {i} appears twice ({plural} #{seen[i]} and #{n}); each id must be "
                f"unique. {_FIX_FILE}"
            )
        seen[i] = n


def _objects(coco: Mapping[str, Any], key: str, noun: str, where: str) -> list[dict[str, Any]]:
    value = coco.get(key)
    if not isinstance(value, list):
        raise InvalidArgumentError(
            f"{where} is not a COCO annotations file: expected a list under {key!r}. "
            f"Got {type(value).__name__}. Pass an instances or person_keypoints JSON."
        )
    for n, entry in enumerate(value):
        if entry.__class__ is not dict:
            raise _document_error(where, f"{noun} #{n} is not an object", "expected a JSON object.", entry)
    return value


# -- categories ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CocoCategories:
    """The categories of a COCO file, checked, in the order of their ids."""

    entries: list[dict[str, Any]]
    """The category objects as in the file (sorted by id)."""
    index: dict[int, int]
    """category id -> class index."""
    keypoint_names: list[str]
    """The keypoint names every category with keypoints shares (empty: no keypoints)."""
    skeleton: list[list[int]]
    """Their skeleton (1-based pairs, as in COCO)."""
    with_points: frozenset[int]
    """The ids of the categories that name keypoints."""


def _schema(category: Mapping[str, Any], cat_id: int, where: str) -> tuple[list[str], list[list[int]]]:
    """``(keypoint names, skeleton)`` of one category, checked (empty names: none)."""
    names = category.get("keypoints")
    if names is None or names == []:
        return [], []
    if names.__class__ is not list or not all(n.__class__ is str for n in names):
        raise _document_error(
            where,
            f"keypoints of category {cat_id} are not names",
            "expected a list of names (strings).",
            names,
        )
    skeleton = category.get("skeleton", [])
    pairs_ok = skeleton.__class__ is list and all(
        p.__class__ is list and len(p) == 2 and all(is_id(e) and 1 <= e <= len(names) for e in p)
        for p in skeleton
    )
    if not pairs_ok:
        raise _document_error(
            where,
            f"skeleton of category {cat_id} is not valid",
            f"expected pairs of keypoint numbers in 1..{len(names)}.",
            skeleton,
        )
    return list(names), [list(p) for p in skeleton]


def _one_schema(
    schemas: list[tuple[int, tuple[list[str], list[list[int]]]]], where: str
) -> tuple[list[str], list[list[int]]]:
    """The keypoint schema every category with keypoints has; different ones are refused: the keypoints
    tensor has one (``info.keypoint_names``)."""
    if not schemas:
        return [], []
    first_id, first = schemas[0]
    for cat_id, schema in schemas[1:]:
        if schema != first:
            raise InvalidArgumentError(
                f"{where}: categories {first_id} and {cat_id} name different keypoints or skeletons "
                f"({first[0]!r}, skeleton {first[1]!r} and {schema[0]!r}, skeleton {schema[1]!r}); a dataset "
                "holds one keypoint schema. Split the file by category, or give them the same keypoints."
            )
    return first


def parse_categories(coco: Mapping[str, Any], where: str) -> CocoCategories:
    """The checked categories of ``coco`` (see the module docstring)."""
    raw = _objects(coco, "categories", "category", where)
    ids = [_id(c.get("id"), f"the id of category #{n}", where) for n, c in enumerate(raw)]
    _unique(ids, "category", "categories", where)
    order = sorted(range(len(raw)), key=ids.__getitem__)
    entries = [raw[n] for n in order]
    names = [c.get("name") for c in entries]
    if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise InvalidArgumentError(
            f"{where}: expected categories with distinct names. Got {names!r:.200}. {_FIX_FILE}"
        )
    schemas = [(ids[n], _schema(raw[n], ids[n], where)) for n in order]
    with_points = [(i, s) for i, s in schemas if s[0]]
    points, skeleton = _one_schema(with_points, where)
    index = {ids[n]: k for k, n in enumerate(order)}
    return CocoCategories(entries, index, points, skeleton, frozenset(i for i, _ in with_points))


# -- images and annotations ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CocoImage:
    """One checked image entry."""

    id: int
    path: str
    """The file, resolved inside the images folder."""
    entry: dict[str, Any]
    """``id``, ``file_name`` and, when given, ``height`` and ``width``, as in the file."""


def _image(img: Mapping[str, Any], img_id: int, images_dir: str, where: str) -> CocoImage:
    path = confine(images_dir, img.get("file_name"), what=f"file_name of image {img_id} in {where!r}")
    for key in ("height", "width"):
        value = img.get(key)
        if key in img and not (value.__class__ is int and 0 < value < _EXACT):
            raise _document_error(
                where,
                f"{key} of image {img_id} is not a positive integer",
                "expected a positive integer.",
                value,
            )
    entry = {k: img[k] for k in ("id", "file_name", "height", "width") if k in img}
    return CocoImage(img_id, path, entry)


def parse_images(coco: Mapping[str, Any], images_dir: str, where: str) -> list[CocoImage]:
    """The checked images of ``coco``, in the file's order (see the module docstring)."""
    raw = _objects(coco, "images", "image", where)
    ids = [_id(img.get("id"), f"the id of image #{n}", where) for n, img in enumerate(raw)]
    _unique(ids, "image", "images", where)
    images = [_image(img, i, images_dir, where) for img, i in zip(raw, ids, strict=True)]
    readers: dict[str, int] = {}
    for image in images:
        other = readers.setdefault(image.path, image.id)
        if other != image.id:
            raise InvalidArgumentError(
                f"{where}: file_name {image.entry['file_name']!r} of image {image.id} names the file of "
                f"image {other} too: images {other} and {image.id} both read {image.path!r}. Give each "
                f"image its own file. {_FIX_FILE}"
            )
    return images


def _group(coco: Mapping[str, Any], images: Sequence[CocoImage], where: str) -> dict[int, list[Any]]:
    """Each image's annotations, in the file's order; ids checked (integers, each once, naming an image)."""
    by_image: dict[int, list[Any]] = {image.id: [] for image in images}
    seen: dict[int, int] = {}
    for n, ann in enumerate(_objects(coco, "annotations", "annotation", where)):
        ann_id = _id(ann.get("id"), f"the id of annotation #{n}", where)
        first = seen.setdefault(ann_id, n)
        if first != n:
            raise InvalidArgumentError(
                f"{where}: annotation id {ann_id} appears twice (annotations #{first} and #{n}); each id "
                f"must be unique. {_FIX_FILE}"
            )
        image_id = ann.get("image_id")
        bucket = by_image.get(image_id) if image_id.__class__ is int else None
        if bucket is None:
            _id(image_id, f"the image_id of annotation {ann_id}", where)
            raise InvalidArgumentError(
                f"{where}: annotation {ann_id} names image_id {image_id}, which is not among the images. "
                f"{_FIX_FILE}"
            )
        bucket.append(ann)
    return by_image


@dataclass(frozen=True, slots=True)
class CocoDocument:
    """A COCO annotations file that passed the document-level checks."""

    categories: CocoCategories
    images: list[CocoImage]
    annotations: dict[int, list[Any]]
    """image id -> its annotations (JSON objects, checked by `annotation_columns` in the worker)."""

    def rules(self, where: str) -> AnnotationRules:
        """What each annotation is checked against in the workers."""
        cats = self.categories
        return AnnotationRules(where, cats.index, len(cats.keypoint_names), cats.with_points)


def parse_document(coco: Mapping[str, Any], images_dir: str, where: str) -> CocoDocument:
    """Check a COCO document as a whole (see the module docstring).

    Raises:
        InvalidArgumentError: naming the file (``where``), the entry and the rule.
    """
    categories = parse_categories(coco, where)
    images = parse_images(coco, images_dir, where)
    annotations = _group(coco, images, where)
    if not images:
        raise InvalidArgumentError(f"{where} lists no images; there is nothing to ingest.")
    return CocoDocument(categories, images, annotations)


# -- one image's annotations (in the worker) -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnnotationRules:
    """What every annotation of one file is checked against (sent to each worker)."""

    where: str
    """The annotations file, for messages."""
    index: dict[int, int]
    """category id -> class index."""
    n_points: int
    """Keypoints per object of the categories that have them (0: none)."""
    with_points: frozenset[int]
    """The ids of the categories that name keypoints."""


@dataclass(frozen=True, slots=True)
class _Image:
    """The image whose annotations are checked, for messages."""

    where: str
    image_id: Any
    file_name: Any

    def fail(self, tensor: str, ann: Mapping[str, Any], rule: str) -> InvalidSampleError:
        return InvalidSampleError(
            tensor,
            f"annotation {ann.get('id')!r} of image {self.image_id!r} ({self.file_name!r}) in "
            f"{self.where!r}: {rule} {_SKIP}",
        )


def _numbers(values: Any, count: int | None = None) -> np.ndarray | None:
    """``values`` as float64 when it is a list of (``count``) finite JSON numbers (ints float64 holds
    exactly, no bools), else None."""
    if values.__class__ is not list or (count is not None and len(values) != count):
        return None
    if not {v.__class__ for v in values} <= _NUMBER_TYPES:
        return None
    try:
        arr = np.array(values, dtype=np.float64)
    except OverflowError:  # an int beyond float64
        return None
    return arr if np.isfinite(arr).all() and np.abs(arr).max(initial=0) <= _EXACT else None


_BBOX_RULE: Final = (
    "expected 'bbox' as 4 numbers [x, y, width, height], finite, with width >= 0 and height >= 0."
)


def _boxes(anns: Sequence[Mapping[str, Any]], image: _Image) -> np.ndarray:
    """The ``(k, 4)`` boxes: checked for the whole image at once, then one by one only to name a bad one."""
    boxes: list[Any] = [a.get("bbox") for a in anns]
    if all(b.__class__ is list and len(b) == 4 for b in boxes):
        arr = _numbers([v for b in boxes for v in b])
        if arr is not None and (arr[2::4] >= 0).all() and (arr[3::4] >= 0).all():
            return arr.reshape(-1, 4)
    for ann, box in zip(anns, boxes, strict=True):
        one = _numbers(box, 4)
        if one is None or one[2] < 0 or one[3] < 0:
            raise image.fail("boxes", ann, f"{_BBOX_RULE} Got {box!r:.120}.")
    raise AssertionError("unreachable: some box was refused above")


def _categories(anns: Sequence[Mapping[str, Any]], rules: AnnotationRules, image: _Image) -> np.ndarray:
    values: list[Any] = [a.get("category_id") for a in anns]
    if {v.__class__ for v in values} <= {int}:
        found = [rules.index.get(v) for v in values]
        if None not in found:
            return np.array(found, dtype=np.uint32)
    for ann, value in zip(anns, values, strict=True):
        if not is_id(value):
            raise image.fail(
                "categories",
                ann,
                f"category_id {value!r:.80}: expected an integer category id. Got {_got(value)}.",
            )
        if value not in rules.index:
            raise image.fail(
                "categories",
                ann,
                f"category_id {value} is not among the file's categories (ids {sorted(rules.index)!r:.200}).",
            )
    raise AssertionError("unreachable: some category was refused above")


def _flags(anns: Sequence[Mapping[str, Any]], image: _Image) -> np.ndarray:
    values = [a.get("iscrowd", 0) for a in anns]
    if {v.__class__ for v in values} <= {int, bool} and set(values) <= {0, 1}:
        return np.array(values, dtype=np.uint8)
    for ann, v in zip(anns, values, strict=True):
        if v.__class__ not in (int, bool) or v not in (0, 1):
            raise image.fail("iscrowd", ann, f"iscrowd {v!r:.80}: expected 0 or 1. Got {v!r:.80}.")
    raise AssertionError("unreachable: some iscrowd was refused above")


def _areas(anns: Sequence[Mapping[str, Any]], image: _Image) -> np.ndarray:
    values = [a.get("area", 0.0) for a in anns]
    arr = _numbers(values)
    if arr is not None and (arr >= 0).all():
        return arr
    for ann, v in zip(anns, values, strict=True):
        one = _numbers([v])
        if one is None or one[0] < 0:
            raise image.fail("areas", ann, f"area {v!r:.80}: expected a number >= 0 (pixels).")
    raise AssertionError("unreachable: some area was refused above")


_POLYGON_RULE: Final = (
    "expected a list of numbers, an even count of them, at least 3 points (x1, y1, x2, y2, x3, y3, ...), "
    "finite"
)
_SEGMENTATION_RULE: Final = "as pycocotools reads it (or absent), expected a list of polygons or an RLE dict."
_RLE_RULE: Final = (
    "an RLE segmentation needs 'size' as [height, width] (integers) and 'counts' as a list of run lengths "
    "or pycocotools' compressed string."
)


def _polygon_parts(seg: list[Any], ann: Mapping[str, Any], image: _Image) -> list[np.ndarray]:
    parts = []
    for i, part in enumerate(seg):
        arr = _numbers(part)
        if arr is None or len(arr) < 6 or len(arr) % 2:
            raise image.fail(
                "polygons", ann, f"polygon {i} of the segmentation: {_POLYGON_RULE}. Got {part!r:.120}."
            )
        parts.append(arr)
    return parts


def _rle(seg: dict[str, Any], ann: Mapping[str, Any], image: _Image) -> tuple[tuple[int, int], int]:
    """``((height, width), sum of the counts)`` of an RLE, checked without decoding it."""
    size, counts = seg.get("size"), seg.get("counts")
    if not (size.__class__ is list and len(size) == 2 and all(is_id(s) and s >= 0 for s in size)):
        raise image.fail("rles", ann, f"{_RLE_RULE} Got {seg!r:.120}.")
    if counts.__class__ is list:
        if not ({c.__class__ for c in counts} <= {int} and all(c >= 0 for c in counts)):
            raise image.fail("rles", ann, f"RLE counts must be integers >= 0. Got {counts!r:.120}.")
        return (size[0], size[1]), sum(counts)
    if counts.__class__ is str:
        try:
            total = int(rle_counts(counts).sum())
        except ValueError as exc:
            raise image.fail(
                "rles", ann, f"compressed RLE counts {counts!r:.80} cannot be read ({exc})."
            ) from None
        return (size[0], size[1]), total
    raise image.fail("rles", ann, f"{_RLE_RULE} Got {seg!r:.120}.")


@dataclass(frozen=True, slots=True)
class _Shape:
    """What one annotation's segmentation claims, kept for `check_canvas`."""

    parts: list[np.ndarray]
    """Its polygons (flat float64), empty for an RLE."""
    rle: tuple[tuple[int, int], int] | None
    """``((height, width), sum of counts)`` of its RLE, None for polygons."""


def _segmentations(
    anns: Sequence[Mapping[str, Any]], image: _Image
) -> tuple[list[Any], list[Any], list[_Shape]]:
    """``(polygons column, rles column, shapes)``: each annotation's segmentation checked for its form."""
    polygons: list[Any] = []
    rles: list[Any] = []
    shapes: list[_Shape] = []
    for ann in anns:
        seg = ann.get("segmentation")
        if seg is None or seg == []:
            polygons.append([])
            rles.append(None)
            shapes.append(_Shape([], None))
        elif seg.__class__ is list:
            shapes.append(_Shape(_polygon_parts(seg, ann, image), None))
            polygons.append(seg)
            rles.append(None)
        elif seg.__class__ is dict:
            shapes.append(_Shape([], _rle(seg, ann, image)))
            polygons.append([])
            rles.append(seg)
        else:
            raise image.fail("polygons", ann, f"segmentation: {_SEGMENTATION_RULE} Got {_got(seg)}.")
    return polygons, rles, shapes


def _keypoints(
    anns: Sequence[Mapping[str, Any]], rules: AnnotationRules, image: _Image
) -> tuple[np.ndarray, np.ndarray]:
    """``(k, K, 3)`` keypoints (zeros where an annotation has none) and ``(k,)`` num_keypoints."""
    n = rules.n_points
    rows = np.zeros((len(anns), n, 3), dtype=np.float64)
    for j, ann in enumerate(anns):
        kp = ann.get("keypoints")
        if kp is None or kp == []:
            continue
        cat = ann.get("category_id")
        if cat not in rules.with_points:
            raise image.fail(
                "keypoints", ann, f"category {cat!r} names no keypoints, but the annotation has some."
            )
        arr = _numbers(kp, 3 * n)
        if arr is None:
            rule = (
                f"expected 'keypoints' as {3 * n} numbers ({n} keypoints of category {cat}, x, y, "
                "visibility each)."
            )
            raise image.fail("keypoints", ann, f"{rule} Got {kp!r:.120}.")
        visibility = arr[2::3]
        if not np.isin(visibility, (0, 1, 2)).all():
            bad = visibility[~np.isin(visibility, (0, 1, 2))][0]
            raise image.fail(
                "keypoints", ann, f"keypoint visibility (every third number) must be 0, 1 or 2. Got {bad:g}."
            )
        rows[j] = arr.reshape(n, 3)
    counts = [a.get("num_keypoints", 0) for a in anns]
    for ann, c in zip(anns, counts, strict=True):
        if not (is_id(c) and c >= 0):
            raise image.fail("num_keypoints", ann, f"num_keypoints {c!r:.80}: expected an integer >= 0.")
    return rows, np.array(counts, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class CheckedAnnotations:
    """One image's annotations, checked for form: the stored columns, and what `check_canvas` checks."""

    columns: dict[str, Any]
    shapes: list[_Shape]
    image: _Image
    anns: Sequence[Mapping[str, Any]]


def annotation_columns(
    anns: Sequence[Mapping[str, Any]], entry: Mapping[str, Any], rules: AnnotationRules
) -> CheckedAnnotations:
    """The stored columns of one image's annotations, each field checked for its type and shape.

    Raises:
        InvalidSampleError: on the annotation's tensor, naming the file, the annotation, its image and
            the rule.
    """
    image = _Image(rules.where, entry.get("id"), entry.get("file_name"))
    polygons, rles, shapes = _segmentations(anns, image)
    columns: dict[str, Any] = {
        "boxes": _boxes(anns, image),
        "categories": _categories(anns, rules, image),
        "annotation_ids": np.array([a["id"] for a in anns], dtype=np.int64),
        "iscrowd": _flags(anns, image),
        "areas": _areas(anns, image),
        "polygons": polygons,
        "rles": rles,
    }
    if rules.n_points:
        columns["keypoints"], columns["num_keypoints"] = _keypoints(anns, rules, image)
    elif any(a.get("keypoints") not in (None, []) for a in anns):
        _keypoints(anns, rules, image)  # names the annotation with keypoints no category declares
    return CheckedAnnotations(columns, shapes, image, anns)


def _polygon_fits(part: np.ndarray, height: int, width: int) -> bool:
    """Whether rasterising ``part`` costs what the image does: every point within one image size of its
    edges, and an outline no longer (in pixel steps, as pycocotools walks it) than the image has pixels."""
    x, y = part[0::2], part[1::2]
    if x.min() < -width or x.max() > 2 * width or y.min() < -height or y.max() > 2 * height:
        return False
    steps = np.maximum(np.abs(np.diff(x, append=x[0])), np.abs(np.diff(y, append=y[0])))
    return float(steps.sum()) <= height * width + 2 * (height + width)


def check_canvas(checked: CheckedAnnotations, entry: Mapping[str, Any], height: int, width: int) -> None:
    """Check every size the image entry and its annotations declare against the decoded image's
    ``height x width``, before anything is allocated for them.

    Raises:
        InvalidSampleError: a declared image size that is not the file's (on ``images``), an RLE of another
            size or whose counts do not cover it exactly (``rles``), a polygon reaching far beyond the
            image (``polygons``).
    """
    image = checked.image
    declared = (entry.get("height", height), entry.get("width", width))
    if declared != (height, width):
        raise InvalidSampleError(
            "images",
            f"image {image.image_id!r} ({image.file_name!r}) in {image.where!r} declares {declared[0]} x "
            f"{declared[1]} (height x width), but the file is {height} x {width}: its annotations would not "
            f"fit it. Fix the entry's height and width (or the file). {_SKIP}",
        )
    for ann, shape in zip(checked.anns, checked.shapes, strict=True):
        if shape.rle is not None:
            _check_rle(shape.rle, ann, image, height, width)
        for i, part in enumerate(shape.parts):
            if not _polygon_fits(part, height, width):
                raise image.fail(
                    "polygons",
                    ann,
                    f"polygon {i} of the segmentation reaches far beyond the {height} x {width} image: "
                    "expected points within one image size of its edges and an outline no longer than the "
                    f"image has pixels. Got {part.tolist()!r:.120}.",
                )


def _check_rle(
    rle: tuple[tuple[int, int], int], ann: Mapping[str, Any], image: _Image, height: int, width: int
) -> None:
    (h, w), total = rle
    if (h, w) != (height, width):
        raise image.fail(
            "rles", ann, f"RLE of size {h} x {w} (height x width), but the image is {height} x {width}."
        )
    if total != h * w:
        raise image.fail(
            "rles",
            ann,
            f"RLE counts sum to {total} pixels, but its size {h} x {w} = {h * w}: the runs must cover the "
            "mask exactly.",
        )


# -- compressed RLE counts -----------------------------------------------------------------------------

_LONGEST: Final = 7
"""Characters one count may take: 7 x 5 bits hold any 32-bit count with its sign."""


def rle_counts(text: str) -> np.ndarray:
    """The run lengths in pycocotools' compressed RLE string, read without decoding the mask.

    Each count is written in 5-bit groups (least significant first) as the characters ``48 + group``,
    with ``0x20`` set on every group but a number's last and ``0x10`` of the last one its sign; from the
    third count on, each is stored minus the count two before it. pycocotools keeps counts as unsigned
    32-bit numbers, so the result is taken modulo 2**32, as there.

    Raises:
        ValueError: a character outside pycocotools' alphabet (``0`` to ``o``; a UnicodeEncodeError for
            one beyond ASCII), a number cut short, or one longer than 7 characters.
    """
    codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64)
    if codes.size == 0:
        return np.zeros(0, dtype=np.int64)
    if codes.min() < 48 or codes.max() > 111:
        raise ValueError("expected only the characters '0' to 'o'")
    c = codes - 48
    ends = np.flatnonzero((c & 0x20) == 0)
    if ends.size == 0 or ends[-1] != len(c) - 1:
        raise ValueError("the last number is cut short")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > _LONGEST:
        raise ValueError(f"a number takes more than {_LONGEST} characters")
    position = np.arange(len(c)) - np.repeat(starts, lengths)
    x = np.add.reduceat((c & 0x1F) << (5 * position), starts)
    x = np.where((c[ends] & 0x10) != 0, x - (np.int64(1) << (5 * lengths)), x)
    counts = x.copy()
    counts[1::2] = np.cumsum(x[1::2])  # counts 1, 3, 5, ...: each stored minus the one two before
    counts[2::2] = np.cumsum(x[2::2])  # counts 2, 4, 6, ...: likewise (count 0 stands alone)
    return counts % (1 << 32)
