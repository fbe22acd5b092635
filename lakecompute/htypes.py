"""Tensor kinds (htypes): what a sample may be, how it is checked, and how it is stored.

Every sample passes through `encode_sample` (or `encode_batch` for a stacked array)
before it is buffered, so a bad value is refused at the call that tried to write it and nothing
already written is touched. Samples are stored either as raw numeric bytes (``array`` kind) or
as one encoded blob each (``bytes`` kind: PNG/JPEG/WEBP images, UTF-8 text, JSON).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np

from lakecompute import compression
from lakecompute.boxes import BoxLayout
from lakecompute.errors import InvalidSampleError

# Specs sit below storage (see lakecompute.specs); re-exported here, where callers have always found them.
from lakecompute.specs import (
    CLASS_NAMED_HTYPES,
    HTYPES,
    MAX_TENSOR_NAME,
    Encoded,
    TensorSpec,
    check_new_tensor_name,
    parse_htype_info,
    parse_tensor_name,
    parse_tensor_spec,
)

__all__ = [
    "CLASS_NAMED_HTYPES",
    "HTYPES",
    "MAX_TENSOR_NAME",
    "Encoded",
    "TensorSpec",
    "cast_checked",
    "check_new_tensor_name",
    "decode_sample",
    "encode_batch",
    "encode_ragged",
    "encode_sample",
    "parse_htype_info",
    "parse_tensor_name",
    "parse_tensor_spec",
]


def cast_checked(arr: np.ndarray, dtype: np.dtype[Any], tensor: str) -> np.ndarray:
    """Cast ``arr`` to ``dtype`` if no value changes meaning; else raise InvalidSampleError."""
    if arr.dtype == dtype:
        return arr
    src, dst = arr.dtype.kind, dtype.kind
    if np.can_cast(arr.dtype, dtype, "safe"):
        return arr.astype(dtype)
    if (src in "biuf" and dst in "fc") or (src == "c" and dst == "c"):
        return _cast_float_checked(arr, dtype, tensor)
    if src in "biu" and dst in "iu":
        if arr.size:
            info = np.iinfo(dtype)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                bad = lo if lo < info.min else hi
                raise InvalidSampleError(
                    tensor,
                    f"value {bad} does not fit dtype {dtype} (range {info.min}..{info.max}). "
                    "Use a wider dtype for the tensor or clip the values.",
                )
        return arr.astype(dtype)
    raise InvalidSampleError(
        tensor,
        f"values of dtype {arr.dtype} cannot be stored as {dtype} without losing information. "
        f"Convert them first (e.g. arr.astype({dtype.name!r})) or use a tensor of dtype {arr.dtype}.",
    )


def _cast_float_checked(arr: np.ndarray, dtype: np.dtype[Any], tensor: str) -> np.ndarray:
    """Cast to a narrower float (or complex) dtype, refusing finite values that would become inf; inf
    and nan given as such stay what they are."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(dtype)
    overflow = np.isfinite(arr) & ~np.isfinite(out) if arr.dtype.kind in "fc" else ~np.isfinite(out)
    if overflow.any():
        bad = arr[overflow].flat[0]
        limit = np.finfo(dtype).max
        raise InvalidSampleError(
            tensor,
            f"value {bad} does not fit dtype {dtype} (largest finite magnitude {limit}); storing it "
            "would make it inf. Use a wider dtype for the tensor or clip the values.",
        )
    return out


def _as_array(value: object, tensor: str) -> np.ndarray:
    numpy_method = getattr(value, "numpy", None)
    if callable(numpy_method) and not isinstance(value, np.ndarray):
        value = numpy_method()
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InvalidSampleError(tensor, f"cannot make an array of {type(value).__name__} ({exc}).") from exc
    if arr.dtype.kind not in "biufc":
        raise InvalidSampleError(
            tensor,
            "expected numbers (a numpy array, list or scalar). "
            f"Got {type(value).__name__} with dtype {arr.dtype}.",
        )
    return arr


def _class_index(value: object, names: list[str], tensor: str) -> object:
    if isinstance(value, str):
        try:
            return names.index(value)
        except ValueError:
            raise InvalidSampleError(
                tensor, f"class name {value!r} is not in class_names {names!r}. Add it to class_names first."
            ) from None
    if isinstance(value, (list, tuple)) and any(isinstance(v, str) for v in value):
        return [_class_index(v, names, tensor) for v in value]
    return value


def _check_image(arr: np.ndarray, tensor: str) -> None:
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3, 4)):
        raise InvalidSampleError(
            tensor,
            f"expected an image of shape HxW or HxWxC with C in (1, 3, 4). Got shape {arr.shape}.",
        )
    if arr.dtype.kind == "f":
        raise InvalidSampleError(
            tensor,
            f"expected a uint8 image. Got a float image ({arr.dtype}); "
            "convert it with (img * 255).round().astype(np.uint8) or clip to 0..255 first.",
        )


def encode_sample(
    spec: TensorSpec, value: object, class_names: list[str], info: Mapping[str, Any] | None = None
) -> Encoded:
    """Check one sample against ``spec`` and turn it into what is stored.

    ``info`` is the tensor's info: the coordinate format of ``bbox`` tensors, the keypoint names of
    ``keypoints`` tensors (see `parse_htype_info`).
    """
    try:
        return _encode_sample(spec, value, class_names, info)
    except InvalidSampleError as exc:
        if exc.tensor:
            raise
        # A sample that failed before it knew its tensor (a file from lc.read that does not decode).
        raise InvalidSampleError(spec.name, exc.detail) from exc.__cause__


def _encode_sample(
    spec: TensorSpec, value: object, class_names: list[str], info: Mapping[str, Any] | None
) -> Encoded:
    blob_encoder = _BLOB_ENCODERS.get(spec.htype)
    if blob_encoder is not None:
        return blob_encoder(spec, value)
    blob_in = getattr(value, "_lakecompute_blob", None)
    if blob_in is not None and spec.sample_compression is not None:
        # A lazily read file (lc.read) whose encoding already matches: store its bytes as they are.
        fmt, data, shape = blob_in()
        if fmt == spec.sample_compression:
            return Encoded(None, data, tuple(shape))
    if spec.htype == "class_label":
        value = _class_index(value, class_names, spec.name)
    arr = _checked_values(spec, _as_array(value, spec.name), value, class_names, info)
    if spec.sample_compression is not None:
        blob = compression.encode_image(arr, spec.sample_compression, tensor=spec.name)
        return Encoded(None, blob, arr.shape)
    if spec.htype == "binary_mask":
        return Encoded(None, np.packbits(arr, axis=None).tobytes(), arr.shape)  # 8 pixels a byte
    return Encoded(arr, None, arr.shape)


def _checked_values(
    spec: TensorSpec, arr: np.ndarray, value: object, class_names: list[str], info: Mapping[str, Any] | None
) -> np.ndarray:
    """What the tensor's htype and dtype make of one sample's numbers (or of rows of samples stacked on
    axis 0: every check below is per row or per value)."""
    target_check = _TARGET_CHECKS.get(spec.htype)
    if target_check is not None:
        arr = target_check(arr, info or {}, class_names, spec.name)
    else:
        _check_htype(spec, arr, value, class_names)
    if spec.dtype is not None:
        arr = cast_checked(arr, np.dtype(spec.dtype), spec.name)
    return arr


#: The htypes whose checks hold row by row, so samples of varying length can be checked joined.
_RAGGED_HTYPES: Final = frozenset({"generic", "class_label", "bbox", "keypoints"})


def encode_ragged(
    spec: TensorSpec, values: list[Any], class_names: list[str], info: Mapping[str, Any] | None = None
) -> list[Encoded] | None:
    """Check numpy arrays of one dtype and rank whose first dimension varies (an image's boxes, labels
    or keypoints) joined on axis 0, in one go: what `encode_sample` gives for each, or None when the fast
    path does not apply or some value is refused (then `encode_sample` on each finds it, and says so).

    The checks of these htypes are per row or per value (ranges, finiteness, box corners, visibility,
    class indices, the dtype cast), so checking the joined rows refuses exactly what checking each
    sample would; a check that would reshape a sample (COCO's flat keypoints) leaves it to each sample.
    """
    if spec.kind != "array" or spec.htype not in _RAGGED_HTYPES or len(values) < 2:
        return None
    first = values[0]
    if first.__class__ is not np.ndarray or first.ndim == 0 or first.dtype.kind not in "biufc":
        return None
    dtype, rows, nd = first.dtype, first.shape[1:], np.ndarray
    lengths = []
    for v in values:
        # Exact ndarrays only: a subclass or an object with .numpy() goes through encode_sample.
        if v.__class__ is not nd or v.dtype != dtype or v.shape[1:] != rows or v.ndim != first.ndim:
            return None
        lengths.append(v.shape[0])
    joined = np.concatenate(values)
    try:
        checked = _checked_values(spec, joined, joined, class_names, info)
    except InvalidSampleError:
        return None
    if checked.shape[1:] != rows:
        return None
    out, start = [], 0
    for n in lengths:
        part = checked[start : start + n]
        out.append(Encoded(part, None, part.shape))
        start += n
    return out


def _encode_text(spec: TensorSpec, value: object) -> Encoded:
    name = spec.name
    if hasattr(value, "text") and callable(value.text):
        value = value.text()
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind == "U":
        value = str(value)
    if not isinstance(value, str):
        raise InvalidSampleError(
            name, f"expected str for a text tensor. Got {type(value).__name__}: {value!r:.80}."
        )
    return Encoded(None, value.encode("utf-8"), ())


def _encode_json(spec: TensorSpec, value: object) -> Encoded:
    name = spec.name
    if hasattr(value, "data") and callable(value.data):
        value = value.data()
    try:
        blob = json.dumps(value, default=_json_default, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidSampleError(name, f"value is not JSON-serialisable ({exc}).") from exc
    return Encoded(None, blob, ())


def _check_htype(spec: TensorSpec, arr: np.ndarray, value: object, class_names: list[str]) -> None:
    """What an image, an embedding or a class label must be, beyond being numbers."""
    name, ht = spec.name, spec.htype
    if ht == "image":
        _check_image(arr, name)
    elif ht == "embedding" and arr.ndim != 1:
        raise InvalidSampleError(name, f"expected a 1-D embedding vector. Got shape {arr.shape}.")
    elif ht == "class_label":
        if arr.dtype.kind not in "biu":
            raise InvalidSampleError(
                name, f"expected an integer class index or a class name. Got {arr.dtype} {value!r:.80}."
            )
        _check_label_range(arr, class_names, name)


def encode_batch(spec: TensorSpec, values: np.ndarray, class_names: list[str]) -> np.ndarray | None:
    """Check a stacked array of samples at once (fast path); None if it must go sample by sample."""
    if spec.kind != "array" or values.dtype.kind not in "biufc" or values.ndim == 0:
        return None
    if spec.htype in _TARGET_CHECKS:
        return None  # boxes, masks and keypoints are checked (and normalised) sample by sample
    name, ht = spec.name, spec.htype
    if ht == "image":
        _check_image(values[0] if len(values) else values.reshape(values.shape[1:]), name)
    elif ht == "embedding" and values.ndim != 2:
        raise InvalidSampleError(
            name, f"expected 1-D embedding vectors. Got samples of shape {values.shape[1:]}."
        )
    elif ht == "class_label":
        if values.dtype.kind not in "biu":
            raise InvalidSampleError(name, f"expected integer class indices. Got dtype {values.dtype}.")
        _check_label_range(values, class_names, name)
    if spec.dtype is not None:
        values = cast_checked(values, np.dtype(spec.dtype), name)
    return values


def _check_label_range(arr: np.ndarray, class_names: list[str], name: str) -> None:
    if arr.size and class_names:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= len(class_names):
            bad = lo if lo < 0 else hi
            raise InvalidSampleError(
                name,
                f"class index {bad} is out of range for {len(class_names)} class_names {class_names!r}.",
            )


def decode_sample(spec: TensorSpec, blob: bytes | memoryview | np.ndarray, shape: tuple[int, ...]) -> Any:
    """Turn a stored blob back into the value a user reads (``bytes`` kind tensors)."""
    raw = blob.tobytes() if isinstance(blob, np.ndarray) else bytes(blob)
    if spec.htype == "text":
        return raw.decode("utf-8")
    if spec.htype == "json":
        return json.loads(raw)
    if spec.htype == "polygon":
        return _decode_polygons(raw, np.dtype(spec.dtype or "float32"))
    if spec.htype == "binary_mask":
        return _decode_mask(raw, shape)
    assert spec.sample_compression is not None
    return compression.decode_image(raw, shape)


def _json_default(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# -- detection and segmentation targets ----------------------------------------------------------------


def _check_finite(arr: np.ndarray, name: str, what: str) -> None:
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = arr[~np.isfinite(arr)].flat[0]
        raise InvalidSampleError(name, f"{what} must be finite numbers. Got {bad}.")


def _check_bbox(arr: np.ndarray, info: Mapping[str, Any], class_names: list[str], name: str) -> np.ndarray:
    """Boxes of one image: ``(k, 4)``, checked by the tensor's `BoxLayout`; an empty list is ``(0, 4)``."""
    return BoxLayout.parse(info, name).check(arr, name)


def _check_binary_mask(
    arr: np.ndarray, info: Mapping[str, Any], class_names: list[str], name: str
) -> np.ndarray:
    """``HxW`` or ``HxWxK`` (one channel per object), True/False; 0/1 integers become booleans."""
    if arr.ndim not in (2, 3):
        raise InvalidSampleError(
            name, f"expected a binary mask of shape HxW, or HxWxK for K objects. Got shape {arr.shape}."
        )
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind in "iu" and (arr.size == 0 or (arr.min() >= 0 and arr.max() <= 1)):
        return arr.astype(np.bool_)
    odd = arr[(arr != 0) & (arr != 1)]
    value = f" with value {odd.flat[0].item()!r}" if odd.size else ""
    raise InvalidSampleError(
        name,
        f"a binary mask holds True/False (or 0/1). Got dtype {arr.dtype}{value}; "
        "threshold it first, e.g. mask > 0.",
    )


def _check_segment_mask(
    arr: np.ndarray, info: Mapping[str, Any], class_names: list[str], name: str
) -> np.ndarray:
    """``HxW`` integer class ids, each an index into the tensor's class names (when it has them)."""
    if arr.ndim != 2:
        raise InvalidSampleError(
            name, f"expected a segmentation mask of shape HxW (a class id per pixel). Got shape {arr.shape}."
        )
    if arr.dtype.kind not in "biu":
        raise InvalidSampleError(
            name, f"expected integer class ids in a segmentation mask. Got dtype {arr.dtype}."
        )
    if arr.size and int(arr.min()) < 0:
        raise InvalidSampleError(name, f"class ids are >= 0. Got {int(arr.min())}.")
    _check_label_range(arr, class_names, name)
    return arr


def _check_keypoints(
    arr: np.ndarray, info: Mapping[str, Any], class_names: list[str], name: str
) -> np.ndarray:
    """``(k, 3)`` or ``(n, k, 3)`` rows of (x, y, visibility); COCO's flat ``[x1, y1, v1, ...]`` becomes
    ``(k, 3)``."""
    if arr.ndim == 1 and arr.size % 3 == 0:
        arr = arr.reshape(-1, 3)
    if arr.ndim not in (2, 3) or arr.shape[-1] != 3:
        raise InvalidSampleError(
            name,
            "expected keypoints as rows of (x, y, visibility): shape (k, 3) for one object, (n, k, 3) "
            f"for n objects, or COCO's flat [x1, y1, v1, ...]. Got shape {arr.shape}.",
        )
    names = info.get("keypoint_names")
    if names and arr.shape[-2] != len(names):
        raise InvalidSampleError(
            name,
            f"expected {len(names)} keypoints per object (info.keypoint_names). Got {arr.shape[-2]}.",
        )
    _check_finite(arr, name, "keypoint coordinates")
    vis = arr[..., 2]
    bad = ~np.isin(vis, (0, 1, 2))
    if bad.any():
        raise InvalidSampleError(
            name,
            f"visibility (the third value of a keypoint) is 0 (not labelled), 1 (labelled, hidden) or 2 "
            f"(visible), as in COCO. Got {vis[bad].flat[0]}.",
        )
    return arr


_TargetCheck = Callable[[np.ndarray, Mapping[str, Any], list[str], str], np.ndarray]
_TARGET_CHECKS: Final[dict[str, _TargetCheck]] = {
    "bbox": _check_bbox,
    "binary_mask": _check_binary_mask,
    "segment_mask": _check_segment_mask,
    "keypoints": _check_keypoints,
}


def _polygon_part(part: object, name: str) -> np.ndarray:
    arr = _as_array(part, name)
    if arr.ndim == 1 and arr.size % 2 == 0:
        arr = arr.reshape(-1, 2)
    if arr.ndim != 2 or arr.shape[1] != 2 or len(arr) < 3:
        raise InvalidSampleError(
            name,
            "expected each polygon as at least 3 (x, y) points: shape (m, 2), or COCO's flat "
            f"[x1, y1, x2, y2, ...]. Got shape {arr.shape}.",
        )
    _check_finite(arr, name, "polygon coordinates")
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


_BLOB_ENCODERS: Final[dict[str, Callable[[TensorSpec, object], Encoded]]] = {
    "text": _encode_text,
    "json": _encode_json,
    "polygon": _encode_polygon,
}


def _decode_mask(raw: bytes, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape)) if shape else 1
    if len(raw) != (count + 7) // 8:
        raise ValueError(f"a mask of shape {shape} takes {(count + 7) // 8} bytes, got {len(raw)}")
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=count)
    return bits.reshape(shape).view(np.bool_)
