"""The one gate of `ingest_coco`: nothing read from an annotations file is believed until it is checked.

Two levels, each with its own error:

* **The document** (`parse_document`, in the calling process, before a dataset is created): the top-level
  lists; categories, images and annotations as JSON objects with integer ids (in int64's range, never a
  string, float or bool), each id once; category names distinct; one keypoint schema (names and skeleton)
  for every category that names keypoints; each image's ``file_name`` confined to the images folder
  (`lakecompute.localfiles.Folder`: ``..``, absolute paths and symbolic links out of it are refused) and
  no two images reading one file; ``height`` and ``width`` positive integers when given; each
  annotation's ``image_id`` one of the images. A problem here is an `InvalidArgumentError` naming the file,
  the entry and the rule; nothing is written, and ``skip_errors`` does not skip it (the file as a whole
  is wrong).
* **Each annotation** (`lakecompute.vision._coco_annotations`, in the worker that reads its image): the
  fields' types and shapes, then every declared size against the decoded image, before anything is
  allocated for it. A problem here is an `InvalidSampleError` on the annotation's tensor (``boxes``,
  ``categories``, ``polygons``, ``rles``, ``keypoints``, ...) naming the file, the annotation, its image
  and the rule; ``skip_errors=True`` skips that image (and says why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from lakecompute.errors import InvalidArgumentError
from lakecompute.localfiles import Folder
from lakecompute.vision._coco_annotations import AnnotationRules, is_id

__all__ = ["CocoCategories", "CocoDocument", "CocoImage", "parse_document"]

_FIX_FILE: Final = "Fix the file."


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
    if (
        names.__class__ is not list
        or not all(n.__class__ is str for n in names)
        or len(set(names)) < len(names)
    ):
        raise _document_error(
            where,
            f"keypoints of category {cat_id} are not names",
            "expected a list of distinct names (strings).",
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


def _image(img: Mapping[str, Any], img_id: int, folder: Folder, where: str) -> CocoImage:
    path = folder.confine(img.get("file_name"), what=f"file_name of image {img_id} in {where!r}")
    for key in ("height", "width"):
        value = img.get(key)
        if key in img and not (is_id(value) and value > 0):
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
    folder = Folder.of(images_dir)
    images = [_image(img, i, folder, where) for img, i in zip(raw, ids, strict=True)]
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
