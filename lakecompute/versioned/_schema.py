"""The manifest's schema: every field a version manifest may hold, checked before anything uses it.

A manifest comes from storage, and storage may be damaged or hostile: a hand-edited file, a dataset
downloaded from someone else. Every value is checked here for its type, its range and its
consistency with the others (fragments inside their segments, shapes that agree with byte counts,
names that cannot leave the dataset), so that the readers above can trust what they are given.
A value that breaks the schema raises `InvalidField` naming the field; ``read_manifest``
turns it into a `lakecompute.errors.DatasetCorruptError` naming the file too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

import numpy as np

from lakecompute.errors import InvalidArgumentError, LakeComputeError
from lakecompute.specs import (
    CHUNK_COMPRESSIONS,
    HTYPES,
    NOT_NUMERIC_DTYPES,
    SAMPLE_COMPRESSIONS,
    TensorSpec,
    parse_htype_info,
    parse_tensor_name,
    parse_tensor_spec,
)
from lakecompute.versioned._segments import CAPACITY_BYTES, CAPACITY_INDEX

__all__ = [
    "MAX_DEPTH",
    "MAX_NDIM",
    "InvalidField",
    "check_bounds",
    "check_depth",
    "check_dtype_name",
    "check_info",
    "check_int",
    "check_layout",
    "check_nesting",
    "check_optional_int",
    "check_segment_ref",
    "check_shape",
    "check_spec",
    "check_str",
    "check_str_dict",
    "check_uniform",
    "nested",
]

#: The deepest nesting of lists and dicts accepted in ``info`` and ``evals`` values. Deeper JSON is
#: refused before anything recurses into it (``json`` and ``copy.deepcopy`` would hit the
#: interpreter's recursion limit at a few hundred levels).
MAX_DEPTH: Final = 64
#: The most dimensions a sample may have (numpy's own limit is 32 in 1.x and 64 in 2.x).
MAX_NDIM: Final = 32
#: Byte offsets and counts: at most the capacity of a segment's data array.
MAX_OFFSET: Final = CAPACITY_BYTES

# A segment id as new_segment_id() makes it: milliseconds, the writer's pid, random hex.
_SEGMENT_ID: Final = re.compile(r"[0-9]{1,20}-[0-9]{1,10}-[0-9a-f]{1,32}")
# A typed array written by compact(): "@tensors/<tensor name>/<segment id>".
_TYPED_REF: Final = re.compile(r"@tensors/([^/]+)/([^/]+)")

T = TypeVar("T")


class InvalidField(ValueError):
    """A manifest value that breaks the schema.

    Internal to the table: it is turned into
    `lakecompute.errors.DatasetCorruptError` (which names the file as well) before it reaches users.

    Attributes:
        field: where the value is, as a path (``tensors.images.fragments[2].k``).
        reason: what is wrong with it (expected vs got).
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)

    def within(self, outer: str) -> InvalidField:
        """The same error with ``outer`` prefixed to its field path."""
        if not self.field:
            return InvalidField(outer, self.reason)
        joiner = "" if self.field.startswith("[") else "."
        return InvalidField(f"{outer}{joiner}{self.field}", self.reason)


def nested(field: str, check: Callable[..., T], *args: Any) -> T:
    """``check(*args)``; an `InvalidField` it raises gets ``field`` prefixed to its path."""
    try:
        return check(*args)
    except InvalidField as exc:
        raise exc.within(field) from None


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def check_int(value: object, field: str, lo: int = 0, hi: int = MAX_OFFSET) -> int:
    """An int (not a bool, not a float) in ``lo..hi``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidField(field, f"expected an integer, got {_kind(value)} {value!r:.40}")
    if not lo <= value <= hi:
        raise InvalidField(field, f"expected an integer in {lo}..{hi}, got {value}")
    return value


def check_optional_int(value: object, field: str, lo: int = 0, hi: int = MAX_OFFSET) -> int | None:
    return None if value is None else check_int(value, field, lo, hi)


def check_str(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidField(field, f"expected a string, got {_kind(value)} {value!r:.40}")
    return value


def check_depth(value: object, field: str, limit: int = MAX_DEPTH) -> None:
    """Refuse lists and dicts nested deeper than ``limit`` (iteratively: no recursion to exhaust)."""
    if not isinstance(value, (dict, list)):
        return
    stack: list[tuple[dict[Any, Any] | list[Any], int]] = [(value, 0)]
    containers = (dict, list)
    while stack:
        item, depth = stack.pop()
        if depth >= limit:
            raise InvalidField(field, f"nested deeper than {limit} levels")
        # Only containers are stacked: a flat object costs one pass over its values.
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, containers):
                stack.append((child, depth + 1))


def check_nesting(value: object, what: str) -> None:
    """Refuse metadata (``what``: how the message names it) nested deeper than a manifest accepts
    (`MAX_DEPTH`), before it is stored.

    Raises:
        InvalidArgumentError: naming ``what``.
    """
    try:
        check_depth(value, "info")  # iteratively: before json recurses into it
    except InvalidField:
        raise InvalidArgumentError(
            f"{what} holds values nested deeper than {MAX_DEPTH} levels of lists and dicts, which a version "
            "cannot store. Flatten the value (or store it as a JSON string)."
        ) from None


def check_str_dict(value: object, field: str) -> dict[str, Any]:
    """A dict with str keys (JSON object), nested at most `MAX_DEPTH` levels."""
    if not isinstance(value, dict):
        raise InvalidField(field, f"expected an object, got {_kind(value)}")
    for key in value:
        if not isinstance(key, str):
            raise InvalidField(field, f"expected string keys, got {key!r:.40}")
    check_depth(value, field)
    return value


def check_dtype_name(value: object, field: str) -> str:
    """A numpy dtype name of numbers (bool, int, uint, float, complex), or ``str`` / ``json``."""
    name = check_str(value, field)
    if name in NOT_NUMERIC_DTYPES:
        return name
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise InvalidField(field, f"unknown dtype {name!r:.40}") from exc
    if dtype.kind not in "biufc" or dtype.name != name:
        raise InvalidField(field, f"expected the name of a numeric dtype, got {name!r:.40}")
    return name


def check_shape(value: object, field: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_NDIM:
        raise InvalidField(field, f"expected a list of at most {MAX_NDIM} sizes, got {_kind(value)}")
    return tuple(check_int(s, f"{field}[{i}]") for i, s in enumerate(value))


def check_segment_ref(value: object, field: str) -> str:
    """A segment id as ``new_segment_id()`` makes it, or ``@tensors/<tensor>/<segment id>``.

    Nothing else can name a path: no ``/`` in a segment id, no ``..``, no absolute paths.
    """
    seg = check_str(value, field)
    if _SEGMENT_ID.fullmatch(seg):
        return seg
    typed = _TYPED_REF.fullmatch(seg)
    if typed is not None and _SEGMENT_ID.fullmatch(typed.group(2)):
        try:
            parse_tensor_name(typed.group(1))
        except LakeComputeError:
            pass
        else:
            return seg
    raise InvalidField(field, f"expected a segment id or '@tensors/<tensor>/<segment id>', got {seg!r:.80}")


def check_spec(name: str, obj: dict[str, Any]) -> TensorSpec:
    """The tensor's spec: a known htype, dtype and compressions that fit together."""
    htype = check_str(obj.get("htype"), "htype")
    if htype not in HTYPES:
        raise InvalidField("htype", f"expected one of {list(HTYPES)!r}, got {htype!r:.40}")
    dtype = obj.get("dtype")
    if dtype is not None:
        check_dtype_name(dtype, "dtype")
    sample = obj.get("sample_compression")
    if sample is not None and (not isinstance(sample, str) or sample not in SAMPLE_COMPRESSIONS):
        raise InvalidField("sample_compression", f"expected one of {sorted(SAMPLE_COMPRESSIONS)!r} or null")
    chunk = obj.get("chunk_compression")
    if chunk is not None and (not isinstance(chunk, str) or chunk not in CHUNK_COMPRESSIONS):
        names = sorted(c for c in CHUNK_COMPRESSIONS if c is not None)
        raise InvalidField("chunk_compression", f"expected one of {names!r} or null, got {chunk!r:.40}")
    spec = TensorSpec(name, htype, dtype, sample, chunk)
    try:
        # The rules create_tensor applies (image is uint8, text has no dtype, ...) hold on load too.
        again = parse_tensor_spec(name, htype, dtype if HTYPES[htype].numeric else None, sample, chunk)
    except LakeComputeError as exc:
        raise InvalidField("", str(exc)) from None
    for key in ("htype", "dtype", "sample_compression", "chunk_compression"):
        if getattr(again, key) != getattr(spec, key):
            raise InvalidField(
                key, f"these settings make {key} {getattr(again, key)!r}, got {getattr(spec, key)!r}"
            )
    return spec


def check_info(value: object, spec: TensorSpec) -> dict[str, Any]:
    info = {} if value is None else check_str_dict(value, "info")
    names = info.get("class_names")
    if spec.declaration.class_names == "always" or names is not None:
        if not isinstance(names, list) or not all(isinstance(c, str) for c in names):
            raise InvalidField("info.class_names", "expected a list of strings")
        if len(set(names)) != len(names):
            raise InvalidField("info.class_names", "expected distinct names")
    try:
        parse_htype_info(spec, info)  # a bbox format, keypoint names: what create_tensor accepts
    except LakeComputeError as exc:
        raise InvalidField("info", str(exc)) from None
    return info


def check_layout(seg: str, shape: tuple[int, ...] | None, idx: int | None, ndim: int, dtype: str) -> None:
    """A fragment is either fixed-shape samples (a shape, no index rows) or indexed (index rows, no shape)."""
    if shape is not None:
        if len(shape) != ndim:
            raise InvalidField("shape", f"expected {ndim} sizes (ndim), got {list(shape)}")
        if idx is not None:
            raise InvalidField("idx", "a run of fixed-shape samples has no index rows; expected null")
        if dtype in NOT_NUMERIC_DTYPES:
            raise InvalidField("dtype", f"a run of fixed-shape samples needs a numeric dtype, got {dtype!r}")
    elif idx is None or seg.startswith("@"):
        raise InvalidField("shape", "expected the sample shape (a run without index rows)")


def check_uniform(shape: tuple[int, ...], dtype: str, nbytes: int, total: int) -> None:
    """A run of ``total`` samples of one ``shape`` takes exactly ``nbytes``."""
    expected = total * math.prod(shape) * np.dtype(dtype).itemsize
    if expected != nbytes:
        raise InvalidField(
            "nbytes",
            f"{total} samples of shape {list(shape)} and dtype {dtype} take {expected} bytes, got {nbytes}",
        )


def check_bounds(seg: str, off: int, nbytes: int, idx: int | None, entries: int) -> None:
    """A fragment's bytes and index entries lie inside its segment's arrays."""
    if seg.startswith("@"):
        return  # a typed array: ``off`` is a row, checked against the array when it is opened
    if off + nbytes > CAPACITY_BYTES:
        raise InvalidField(
            "off", f"bytes {off}..{off + nbytes} run past the segment's end ({CAPACITY_BYTES})"
        )
    if idx is not None and idx + entries > CAPACITY_INDEX:
        raise InvalidField(
            "idx", f"index entries {idx}..{idx + entries} run past the segment's end ({CAPACITY_INDEX})"
        )
