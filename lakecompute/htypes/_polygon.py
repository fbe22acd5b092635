"""The codec of ``polygon``: per sample, a list of objects, each a list of its polygons (an object may
have several parts), each polygon ``(m, 2)`` points with m >= 3; COCO's flat ``[x1, y1, x2, y2, ...]``
lists are accepted. One blob per sample: int64 counts (objects, parts per object, points per part), then
the coordinates in the tensor's dtype, all little-endian."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.htypes._base import HTypeCodec, TensorRules, as_array, cast_checked, check_finite
from lakecompute.specs import Encoded, TensorSpec

__all__ = ["CODECS", "PolygonCodec"]


class PolygonCodec(HTypeCodec):
    """Objects of polygons; ``numpy()`` of a sample is a list (per object) of lists of ``(m, 2)`` arrays."""

    htype = "polygon"

    def encode(self, rules: TensorRules, value: object) -> Encoded:
        return _encode_polygon(rules.spec, value)

    def decode(self, spec: TensorSpec, raw: bytes, shape: tuple[int, ...]) -> Any:
        return _decode_polygons(raw, np.dtype(spec.dtype or "float32"))


def _polygon_part(part: object, name: str) -> np.ndarray:
    arr = as_array(part, name)
    if arr.ndim == 1 and arr.size % 2 == 0:
        arr = arr.reshape(-1, 2)
    if arr.ndim != 2 or arr.shape[1] != 2 or len(arr) < 3:
        raise InvalidSampleError(
            name,
            "expected each polygon as at least 3 (x, y) points: shape (m, 2), or COCO's flat "
            f"[x1, y1, x2, y2, ...]. Got shape {arr.shape}.",
        )
    check_finite(arr, name, "polygon coordinates")
    return arr


def _is_one_part(obj: Any) -> bool:
    """Whether ``obj`` (one object of a polygon sample) is one polygon rather than a list of them: an
    (m, 2) array, a flat list of numbers, or a list of (x, y) points."""
    if isinstance(obj, np.ndarray):
        return obj.ndim <= 2
    rank = _rank(obj[0])
    return rank == 0 or (rank == 1 and len(obj[0]) == 2)


def _rank(value: Any) -> int:
    """``np.ndim(value)``, or -1 for what is not an array of one rank (a ragged list)."""
    try:
        return int(np.ndim(value))
    except (ValueError, TypeError):
        return -1


def _is_sequence(value: object) -> bool:
    """A list, a tuple, or an array of rank 1 or more: what a polygon sample, an object or a part may be."""
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    return isinstance(value, (list, tuple))


def _polygon_objects(spec: TensorSpec, value: object) -> list[list[np.ndarray]]:
    """A sample's objects, each a list of its polygons (an object may have several parts)."""
    name = spec.name
    numpy_method = getattr(value, "numpy", None)
    if callable(numpy_method) and not isinstance(value, (list, tuple, np.ndarray)):
        value = numpy_method()
    if not _is_sequence(value):
        raise InvalidSampleError(
            name, f"expected a list of polygons (one per object). Got {type(value).__name__}."
        )
    objects: list[list[np.ndarray]] = []
    for obj in value:  # type: ignore[attr-defined]  # a sequence (checked above)
        if not _is_sequence(obj):
            raise InvalidSampleError(
                name, f"expected each object as a polygon or a list of polygons. Got {obj!r:.80}."
            )
        # An empty list is an object without a polygon (COCO's crowd regions are masks instead).
        parts = [obj] if len(obj) and _is_one_part(obj) else list(obj)
        objects.append([_polygon_part(p, name) for p in parts])
    return objects


def _coco_polygons(value: object) -> tuple[list[int], np.ndarray] | None:
    """COCO's own layout (a list of objects, each a list of flat ``[x1, y1, x2, y2, ...]`` lists of at
    least 3 points, of plain numbers) checked in one go: the counts and float64 coordinates that
    `_encode_polygon` would store, or None for anything else, or anything it would refuse (which it
    then checks part by part).
    """
    if value.__class__ is not list:
        return None
    per_object: list[int] = []
    points: list[int] = []
    flat: list[Any] = []
    for obj in value:
        if obj.__class__ is not list:
            return None
        for part in obj:
            # A part of 2 numbers would be a point, and numbers directly in obj one polygon: not here.
            if part.__class__ is not list or len(part) < 6 or len(part) % 2:
                return None
            points.append(len(part) // 2)
            flat.extend(part)
        per_object.append(len(obj))
    if not _plain_numbers(flat):
        return None
    coords = np.array(flat, dtype=np.float64)
    if not np.isfinite(coords).all():
        return None
    return [len(per_object), *per_object, *points], coords


def _plain_numbers(values: list[Any]) -> bool:
    """Whether every value is a Python float, or an int that float64 holds exactly (JSON gives both):
    then each part alone becomes a float64 array of the very values the joined array has. Anything else
    (a bool, a numpy scalar, a huge int) takes the part-by-part path, whose rules for it are its own."""
    for x in values:
        cls = x.__class__
        if cls is not float and not (cls is int and -_EXACT_INT <= x <= _EXACT_INT):
            return False
    return True


_EXACT_INT: Final = 2**53


def _encode_polygon(spec: TensorSpec, value: object) -> Encoded:
    """One blob per sample: int64 counts (objects, parts per object, points per part), then the
    coordinates in the tensor's dtype, all little-endian."""
    if spec.dtype == "float64":
        # Each part's numbers become float64 alone or joined alike (a float64 tensor takes any of them).
        fast = _coco_polygons(value)
        if fast is not None:
            header, joined = fast
            blob = np.asarray(header, dtype="<i8").tobytes() + joined.astype("<f8").tobytes()
            return Encoded(None, blob, (header[0],))
    objects = _polygon_objects(spec, value)
    parts = [p for obj in objects for p in obj]
    counts = [len(objects), *(len(obj) for obj in objects), *(len(p) for p in parts)]
    dtype = np.dtype(spec.dtype or "float32").newbyteorder("<")
    coords = [cast_checked(p, np.dtype(spec.dtype or "float32"), spec.name) for p in parts]
    body = np.concatenate(coords).astype(dtype) if coords else np.empty((0, 2), dtype)
    blob = np.asarray(counts, dtype="<i8").tobytes() + body.tobytes()
    return Encoded(None, blob, (len(objects),))


def _decode_polygons(raw: bytes, dtype: np.dtype[Any]) -> list[list[np.ndarray]]:
    header = np.frombuffer(raw, dtype="<i8", count=1) if len(raw) >= 8 else np.empty(0, "<i8")
    n = int(header[0]) if len(header) else -1
    if n < 0 or 8 * (1 + n) > len(raw):
        raise ValueError(f"a polygon blob of {len(raw)} bytes does not start with its object count")
    per_object = np.frombuffer(raw, dtype="<i8", count=n, offset=8)
    n_parts = int(per_object.sum()) if n else 0
    head = 8 * (1 + n + n_parts)
    if (per_object.size and per_object.min() < 0) or head > len(raw):
        raise ValueError("a polygon blob's part counts do not fit in it")
    points = np.frombuffer(raw, dtype="<i8", count=n_parts, offset=8 * (1 + n))
    little = dtype.newbyteorder("<")
    coords = np.frombuffer(raw, dtype=little, offset=head)
    if (points.size and points.min() < 0) or coords.size != 2 * int(points.sum()):
        raise ValueError("a polygon blob's point counts do not match its coordinates")
    flat = coords.astype(dtype).reshape(-1, 2)
    ends = np.cumsum(points)
    part_arrays = [flat[e - m : e].copy() for m, e in zip(points.tolist(), ends.tolist(), strict=True)]
    out: list[list[np.ndarray]] = []
    at = 0
    for k in per_object.tolist():
        out.append(part_arrays[at : at + k])
        at += k
    return out


CODECS = (PolygonCodec(),)
