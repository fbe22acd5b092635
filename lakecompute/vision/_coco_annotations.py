"""One image's COCO annotations, checked in the worker that reads the image (the second level of the gate
whose first is `lakecompute.vision._coco_checks`).

`annotation_columns` checks each field's type and shape and makes the stored columns; `check_canvas` then
checks every size the image entry and its annotations declare against the decoded image, before anything
is allocated for them. A problem is an `InvalidSampleError` on the annotation's tensor naming the file,
the annotation, its image and the rule; ``skip_errors=True`` skips that image.

Two paths give the same columns: `_fast_columns` checks a whole image at once (one type check and one
float64 array for all its numbers, the rules on plain lists) and gives up on anything unusual;
`_checked_columns` then goes annotation by annotation and raises naming the first one that breaks a rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Final, TypeGuard

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.ingest import skip_advice

__all__ = [
    "AnnotationRules",
    "CheckedAnnotations",
    "annotation_columns",
    "check_canvas",
    "is_id",
    "rle_counts",
]

_INT64: Final = 2**63
_NUMBER_TYPES: Final = frozenset({int, float})
_SKIPPED: Final = "the images whose annotations break a rule"
_SKIP: Final = skip_advice("Fix the annotation", _SKIPPED)


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
            source=self.where,
        )


def is_id(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer as COCO writes ids: a JSON integer (not a bool) in int64's range."""
    return isinstance(value, int) and value.__class__ is int and -_INT64 <= value < _INT64


def _numbers(values: Any, count: int | None = None) -> np.ndarray | None:
    """``values`` as float64 when it is a list of (``count``) finite JSON numbers (not bools), else None."""
    if values.__class__ is not list or (count is not None and len(values) != count):
        return None
    if not {v.__class__ for v in values} <= _NUMBER_TYPES:
        return None
    try:
        arr = np.array(values, dtype=np.float64)
    except OverflowError:  # an int beyond float64
        return None
    return arr if np.isfinite(arr).all() else None


_BBOX_RULE: Final = (
    "expected 'bbox' as 4 numbers [x, y, width, height], finite, with width >= 0 and height >= 0."
)
_POLYGON_RULE: Final = (
    "expected a list of numbers, an even count of them, at least 3 points (x1, y1, x2, y2, x3, y3, ...), "
    "finite"
)
_SEGMENTATION_RULE: Final = "as pycocotools reads it (or absent), expected a list of polygons or an RLE dict."
_RLE_RULE: Final = (
    "an RLE segmentation needs 'size' as [height, width] (integers) and 'counts' as a list of run lengths "
    "or pycocotools' compressed string."
)

# -- segmentations -------------------------------------------------------------------------------------

Part = tuple[int, int, Any]
"""One polygon: its annotation's position, its place in that annotation's segmentation, its numbers."""


@dataclass(frozen=True, slots=True)
class _Rle:
    """What one annotation's RLE declares, read without decoding it."""

    owner: int
    size: tuple[int, int]
    total: int
    """The sum of its counts."""


def _rle(j: int, seg: dict[str, Any], ann: Mapping[str, Any], image: _Image) -> _Rle:
    size, counts = seg.get("size"), seg.get("counts")
    if not (size.__class__ is list and len(size) == 2 and all(is_id(s) and s >= 0 for s in size)):
        raise image.fail("rles", ann, f"{_RLE_RULE} Got {seg!r:.120}.")
    if counts.__class__ is list:
        if not ({c.__class__ for c in counts} <= {int} and all(c >= 0 for c in counts)):
            raise image.fail("rles", ann, f"RLE counts must be integers >= 0. Got {counts!r:.120}.")
        return _Rle(j, (size[0], size[1]), sum(counts))
    if counts.__class__ is str:
        try:
            total = int(rle_counts(counts).sum())
        except ValueError as exc:
            rule = f"compressed RLE counts {counts!r:.80} cannot be read ({exc})."
            raise image.fail("rles", ann, rule) from None
        return _Rle(j, (size[0], size[1]), total)
    raise image.fail("rles", ann, f"{_RLE_RULE} Got {seg!r:.120}.")


def _segmentations(anns: Sequence[Mapping[str, Any]], image: _Image) -> tuple[list[Part], list[_Rle]]:
    """``(polygons, RLEs)`` of the annotations: each segmentation a list (of polygons, checked with the
    other numbers), an RLE dict (checked here), or absent."""
    parts: list[Part] = []
    rles = []
    for j, ann in enumerate(anns):
        seg = ann.get("segmentation")
        if seg.__class__ is list:
            parts.extend((j, i, part) for i, part in enumerate(seg))
        elif seg.__class__ is dict:
            rles.append(_rle(j, seg, ann, image))
        elif seg is not None:
            rule = f"segmentation: {_SEGMENTATION_RULE} Got {type(seg).__name__}."
            raise image.fail("polygons", ann, rule)
    return parts, rles


# -- the columns, fast -----------------------------------------------------------------------------------

_FLAG_TYPES: Final = frozenset({int, bool})
_FLAGS: Final = frozenset({0, 1})
_VISIBILITY: Final = frozenset({0, 1, 2})


def _given_keypoints(anns: Sequence[Mapping[str, Any]]) -> list[tuple[int, Any]]:
    """``(position, keypoints)`` of the annotations that have keypoints (not absent, null or ``[]``)."""
    return [(j, kp) for j, a in enumerate(anns) if (kp := a.get("keypoints")) is not None and kp != []]


def _plain_index(ann: Mapping[str, Any], rules: AnnotationRules) -> int | None:
    """The class index of an annotation whose category, crowd flag, box length and keypoint count are
    plainly fine, else None (a float 1.0 or a bool equals an id it is not: the class is checked first)."""
    cat, flag, box = ann.get("category_id"), ann.get("iscrowd", 0), ann.get("bbox")
    if cat.__class__ is not int or flag.__class__ not in _FLAG_TYPES or flag not in _FLAGS:
        return None
    if box.__class__ is not list or len(box) != 4:
        return None
    if rules.n_points:
        count = ann.get("num_keypoints", 0)
        if count.__class__ is not int or not 0 <= count < _INT64:
            return None
    return rules.index.get(cat)


def _fast_rows(
    anns: Sequence[Mapping[str, Any]], rules: AnnotationRules
) -> tuple[list[int], list[tuple[int, Any]]] | None:
    """``(class indices, (position, keypoints) of those given)`` when every annotation is plainly fine
    but for its numbers' values, in one pass; else None."""
    n, found, points = rules.n_points, [], []
    for j, ann in enumerate(anns):
        index = _plain_index(ann, rules)
        if index is None:
            return None
        found.append(index)
        kp = ann.get("keypoints")
        if kp is not None and kp != []:
            if not (
                n and kp.__class__ is list and len(kp) == 3 * n and ann["category_id"] in rules.with_points
            ):
                return None
            points.append((j, kp))
    return found, points


def _fast_numbers(
    boxes: list[Any], areas: list[Any], parts: list[Part], points: list[tuple[int, Any]]
) -> np.ndarray | None:
    """Boxes, areas, polygons and keypoints as one float64 array, when all are finite JSON numbers (not
    bools), polygons of an even count of at least 6, widths, heights and areas >= 0 and visibilities 0, 1
    or 2; else None."""
    flat = [*chain.from_iterable(boxes), *areas]
    for _, _, p in parts:
        if p.__class__ is not list or len(p) < 6 or len(p) % 2:
            return None
        flat.extend(p)
    for _, kp in points:
        flat.extend(kp)
    if not set(map(type, flat)) <= _NUMBER_TYPES:
        return None
    try:
        arr = np.array(flat, dtype=np.float64)
        # A sum is finite only when every term is (it may also overflow: the careful path decides then).
        finite = math.isfinite(sum(flat))
    except OverflowError:  # an int beyond float64
        return None
    if not finite or not all(b[2] >= 0 and b[3] >= 0 for b in boxes) or (areas and min(areas) < 0):
        return None
    return arr if all(set(kp[2::3]) <= _VISIBILITY for _, kp in points) else None


def _fast_columns(
    anns: Sequence[Mapping[str, Any]], rules: AnnotationRules, parts: list[Part]
) -> dict[str, Any] | None:
    """The stored columns when every value is plainly within the rules, checked for the whole image at once
    (one float64 array for all its numbers); None for anything else, which `_checked_columns` decides."""
    rows = _fast_rows(anns, rules)
    if rows is None:
        return None
    found, points = rows
    boxes = [a["bbox"] for a in anns]
    areas = [a.get("area", 0.0) for a in anns]
    arr = _fast_numbers(boxes, areas, parts, points)
    if arr is None:
        return None
    k, n = len(anns), rules.n_points
    columns = {
        "boxes": arr[: 4 * k].reshape(k, 4),
        "categories": np.array(found, dtype=np.uint32),
        "annotation_ids": np.array([a["id"] for a in anns], dtype=np.int64),
        "iscrowd": np.array([a.get("iscrowd", 0) for a in anns], dtype=np.uint8),
        "areas": arr[4 * k : 5 * k],
    }
    if n:
        columns["keypoints"] = _keypoint_rows(k, n, points, arr[len(arr) - len(points) * 3 * n :])
        columns["num_keypoints"] = np.array([a.get("num_keypoints", 0) for a in anns], dtype=np.int64)
    return columns


def _keypoint_rows(k: int, n: int, points: list[tuple[int, Any]], values: np.ndarray) -> np.ndarray:
    """``(k, n, 3)`` keypoints: ``values`` at the annotations of ``points``, zeros elsewhere."""
    if len(points) == k:
        return values.reshape(k, n, 3)
    rows = np.zeros((k, n, 3), dtype=np.float64)
    for row, (j, _) in zip(values.reshape(-1, n, 3), points, strict=True):
        rows[j] = row
    return rows


# -- the columns, annotation by annotation ---------------------------------------------------------------


def _checked_columns(
    anns: Sequence[Mapping[str, Any]], rules: AnnotationRules, parts: list[Part], image: _Image
) -> dict[str, Any]:
    """The stored columns, each annotation checked on its own: raises naming the first one that breaks a
    rule (the same rules `_fast_columns` applies to the whole image)."""
    for j, i, part in parts:
        arr = _numbers(part)
        if arr is None or len(arr) < 6 or len(arr) % 2:
            raise image.fail(
                "polygons", anns[j], f"polygon {i} of the segmentation: {_POLYGON_RULE}. Got {part!r:.120}."
            )
    columns = {
        "boxes": np.array([_box(a, image) for a in anns], dtype=np.float64).reshape(-1, 4),
        "categories": np.array([_category(a, rules, image) for a in anns], dtype=np.uint32),
        "annotation_ids": np.array([a["id"] for a in anns], dtype=np.int64),
        "iscrowd": np.array([_flag(a, image) for a in anns], dtype=np.uint8),
        "areas": np.array([_area(a, image) for a in anns], dtype=np.float64),
    }
    rows = [(j, _keypoints(anns[j], kp, rules, image)) for j, kp in _given_keypoints(anns)]
    if rules.n_points:
        values = np.array([r for _, r in rows], dtype=np.float64).reshape(-1)
        columns["keypoints"] = _keypoint_rows(len(anns), rules.n_points, rows, values)
        columns["num_keypoints"] = np.array([_count(a, image) for a in anns], dtype=np.int64)
    return columns


def _box(ann: Mapping[str, Any], image: _Image) -> np.ndarray:
    box = ann.get("bbox")
    one = _numbers(box, 4)
    if one is None or one[2] < 0 or one[3] < 0:
        raise image.fail("boxes", ann, f"{_BBOX_RULE} Got {box!r:.120}.")
    return one


def _category(ann: Mapping[str, Any], rules: AnnotationRules, image: _Image) -> int:
    value = ann.get("category_id")
    if not is_id(value):
        rule = f"category_id {value!r:.80}: expected an integer category id. Got {type(value).__name__}."
        raise image.fail("categories", ann, rule)
    if value not in rules.index:
        rule = f"category_id {value} is not among the file's categories (ids {sorted(rules.index)!r:.200})."
        raise image.fail("categories", ann, rule)
    return rules.index[value]


def _flag(ann: Mapping[str, Any], image: _Image) -> int:
    v = ann.get("iscrowd", 0)
    if v.__class__ not in (int, bool) or v not in (0, 1):
        raise image.fail("iscrowd", ann, f"iscrowd {v!r:.80}: expected 0 or 1. Got {v!r:.80}.")
    return int(v)


def _area(ann: Mapping[str, Any], image: _Image) -> float:
    v = ann.get("area", 0.0)
    one = _numbers([v])
    if one is None or one[0] < 0:
        raise image.fail("areas", ann, f"area {v!r:.80}: expected a number >= 0 (pixels).")
    return float(one[0])


def _count(ann: Mapping[str, Any], image: _Image) -> int:
    c = ann.get("num_keypoints", 0)
    if not (is_id(c) and c >= 0):
        raise image.fail("num_keypoints", ann, f"num_keypoints {c!r:.80}: expected an integer >= 0.")
    return c


def _keypoints(ann: Mapping[str, Any], kp: Any, rules: AnnotationRules, image: _Image) -> np.ndarray:
    n, cat = rules.n_points, ann.get("category_id")
    if cat not in rules.with_points:
        raise image.fail(
            "keypoints", ann, f"category {cat!r} names no keypoints, but the annotation has some."
        )
    arr = _numbers(kp, 3 * n)
    if arr is None:
        rule = f"expected 'keypoints' as {3 * n} numbers ({n} keypoints of category {cat}: x, y, visibility)."
        raise image.fail("keypoints", ann, f"{rule} Got {kp!r:.120}.")
    visibility = arr[2::3]
    bad = visibility[~np.isin(visibility, (0, 1, 2))]
    if bad.size:
        rule = f"keypoint visibility (every third number) must be 0, 1 or 2. Got {bad[0]:g}."
        raise image.fail("keypoints", ann, rule)
    return arr


# -- one image -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckedAnnotations:
    """One image's annotations, checked for form: the stored columns, and what `check_canvas` checks."""

    columns: dict[str, Any]
    """The stored columns, by tensor name."""
    parts: list[Part]
    rles: list[_Rle]
    image: _Image
    anns: Sequence[Mapping[str, Any]]


def annotation_columns(
    anns: Sequence[Mapping[str, Any]],
    entry: Mapping[str, Any],
    rules: AnnotationRules,
    *,
    one_by_one: bool = False,
) -> CheckedAnnotations:
    """The stored columns of one image's annotations, each field checked for its type and shape.

    ``one_by_one=True`` skips the whole-image check and goes annotation by annotation: slower, and the
    same columns (the property tests hold the two paths to that).

    Raises:
        InvalidSampleError: on the annotation's tensor, naming the file, the annotation, its image and
            the rule.
    """
    image = _Image(rules.where, entry.get("id"), entry.get("file_name"))
    parts, rles = _segmentations(anns, image)
    columns = None if one_by_one else _fast_columns(anns, rules, parts)
    if columns is None:
        columns = _checked_columns(anns, rules, parts, image)
    columns["polygons"] = [a["segmentation"] if a.get("segmentation").__class__ is list else [] for a in anns]
    columns["rles"] = [a["segmentation"] if a.get("segmentation").__class__ is dict else None for a in anns]
    return CheckedAnnotations(columns, parts, rles, image, anns)


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
        # Declared turned: the file is likely a photo whose EXIF orientation says to show it turned, and
        # the annotations were drawn on it shown that way (as browsers and OpenCV show it).
        turned = (
            " The sizes are the file's turned: if its EXIF orientation turns it, pass exif_transpose=True."
            if declared == (width, height)
            else ""
        )
        raise InvalidSampleError(
            "images",
            f"image {image.image_id!r} ({image.file_name!r}) in {image.where!r} declares {declared[0]} x "
            f"{declared[1]} (height x width), but the file is {height} x {width}: its annotations would not "
            f"fit it.{turned} {skip_advice('Fix the entry (or the file)', _SKIPPED)}",
            source=image.where,
        )
    for rle in checked.rles:
        _check_rle(rle, checked.anns[rle.owner], image, height, width)
    if checked.parts:
        _check_polygons(checked, height, width)


def _check_rle(rle: _Rle, ann: Mapping[str, Any], image: _Image, height: int, width: int) -> None:
    (h, w), total = rle.size, rle.total
    if (h, w) != (height, width):
        rule = f"RLE of size {h} x {w} (height x width), but the image is {height} x {width}."
        raise image.fail("rles", ann, rule)
    if total != h * w:
        rule = f"RLE counts sum to {total} pixels, but its size {h} x {w} = {h * w}: the runs must cover it."
        raise image.fail("rles", ann, rule)


def _check_polygons(checked: CheckedAnnotations, height: int, width: int) -> None:
    """Refuse polygons whose rasterising costs more than the image: a point beyond one image size of its
    edges, or an outline longer (in pixel steps, as pycocotools walks it) than the image has pixels."""
    budget = height * width + 2 * (height + width)
    points = 0
    within = True
    for _, _, part in checked.parts:
        xs, ys = part[0::2], part[1::2]
        points += len(xs)
        within = (
            within
            and -width <= min(xs)
            and max(xs) <= 2 * width
            and -height <= min(ys)
            and max(ys) <= 2 * height
        )
    # Within those bounds a step is at most 3 image sizes, so few points cannot make a long outline.
    if within and points * 3 * max(height, width) <= budget:
        return
    bad = _far_polygon(checked.parts, height, width, budget)
    if bad is not None:
        j, i, part = checked.parts[bad]
        raise checked.image.fail(
            "polygons",
            checked.anns[j],
            f"polygon {i} of the segmentation reaches far beyond the {height} x {width} image: expected "
            "points within one image size of its edges and an outline no longer than the image has "
            f"pixels. Got {part!r:.120}.",
        )


def _far_polygon(parts: list[Part], height: int, width: int, budget: int) -> int | None:
    """The first polygon with a point beyond one image size of the edges or an outline over ``budget``."""
    xy = np.array([v for _, _, p in parts for v in p], dtype=np.float64).reshape(-1, 2)
    starts = np.cumsum([0, *(len(p) // 2 for _, _, p in parts[:-1])])
    far = (xy < -np.array([width, height])) | (xy > 2 * np.array([width, height]))
    following = np.arange(1, len(xy) + 1)  # each point's next on its polygon; the last one's is the first
    following[np.append(starts[1:], len(xy)) - 1] = starts
    outline = np.add.reduceat(np.abs(xy[following] - xy).max(axis=1), starts)
    bad = np.add.reduceat(far.any(axis=1), starts) | (outline > budget)
    return int(np.flatnonzero(bad)[0]) if bad.any() else None


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
