"""The samples of every htype for its conformance suite (`lakecompute.testing.htypes.HTypeTests`).

For each declared htype, `HTYPE_CASES` holds one or more `HTypeCase`: a way to create a tensor of it
(dtype, class names, info), a hypothesis strategy of lists of valid samples written as they read back,
and values the tensor must refuse. A new htype declared in `lakecompute.specs` without cases here fails
the suite (`cases_of`) until its cases are written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

__all__ = ["HOSTILE_TO_EVERY_HTYPE", "HTYPE_CASES", "HTypeCase", "cases_of", "near_valid_samples"]


@dataclass(frozen=True)
class HTypeCase:
    """One tensor of an htype as the suite creates it, the samples it stores and those it refuses."""

    htype: str
    """The declared htype."""
    label: str
    """What sets this case apart (shown in failures)."""
    samples: st.SearchStrategy[list[Any]]
    """Lists of 1 to 4 samples one tensor takes together (one rank), each as it reads back: of the
    tensor's dtype, in its canonical shape (boxes ``(k, 4)``, class indices rather than names)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """``create_tensor``'s other arguments: dtype, compressions, class_names, info."""
    hostile: tuple[Any, ...] = ()
    """Values the tensor must refuse with an `InvalidSampleError` naming it."""
    lossy: bool = False
    """Samples read back close to, not exactly, what was written (JPEG): only dtype and shape are
    compared."""

    def __str__(self) -> str:
        return f"{self.htype}[{self.label}]"


def _lists(sample: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(sample, min_size=1, max_size=4)


def _ranked_lists(make: Any, ranks: tuple[int, ...], **kwargs: Any) -> st.SearchStrategy[list[Any]]:
    """Lists of samples sharing one drawn rank (every sample of a tensor has the same rank)."""
    return st.sampled_from(ranks).flatmap(lambda rank: _lists(make(rank, **kwargs)))


def _numbers(rank: int, dtype: str, *, max_side: int = 4, **elements: Any) -> st.SearchStrategy[Any]:
    shapes = hnp.array_shapes(min_dims=rank, max_dims=rank, min_side=0, max_side=max_side)
    return hnp.arrays(np.dtype(dtype), shapes, elements=hnp.from_dtype(np.dtype(dtype), **elements))


def _image(rank: int) -> st.SearchStrategy[np.ndarray]:
    side = st.integers(1, 6)
    shape = st.tuples(side, side) if rank == 2 else st.tuples(side, side, st.sampled_from((1, 3, 4)))
    return hnp.arrays(np.uint8, shape)


@st.composite
def _boxes(draw: st.DrawFn, dtype: str, fmt: str, normalized: bool) -> np.ndarray:
    """``(k, 4)`` boxes valid in the layout: sizes >= 0, corners ordered, fractions within 0..1."""
    k = draw(st.integers(0, 4))
    top = 1.0 if normalized else 1000.0
    kind = np.dtype(dtype).kind
    value = st.integers(0, int(top)) if kind in "iu" else st.floats(0, top / 2, width=32)
    corner = draw(hnp.arrays(np.dtype(dtype), (k, 2), elements=value))
    size = draw(hnp.arrays(np.dtype(dtype), (k, 2), elements=value))
    if fmt == "xyxy":
        return np.concatenate([corner, corner + size], axis=1).astype(dtype)
    if fmt == "cxcywh":  # a centre at least half the size in from the origin
        return np.concatenate([corner + size / 2, size], axis=1).astype(dtype)
    return np.concatenate([corner, size], axis=1).astype(dtype)


@st.composite
def _keypoints(draw: st.DrawFn, rank: int, count: int | None) -> np.ndarray:
    """``(k, 3)`` (rank 2) or ``(n, k, 3)`` (rank 3) rows of x, y and a visibility of 0, 1 or 2."""
    k = count if count is not None else draw(st.integers(0, 4))
    shape = (k,) if rank == 2 else (draw(st.integers(0, 3)), k)
    xy = draw(hnp.arrays(np.float32, (*shape, 2), elements=st.floats(-1e4, 1e4, width=32)))
    vis = draw(hnp.arrays(np.float32, (*shape, 1), elements=st.sampled_from((0.0, 1.0, 2.0))))
    return np.concatenate([xy, vis], axis=-1)


def _polygon(dtype: str) -> st.SearchStrategy[list[list[np.ndarray]]]:
    """A sample of objects, each a list of polygons of at least 3 finite points."""
    points = st.integers(3, 5).flatmap(
        lambda m: hnp.arrays(np.dtype(dtype), (m, 2), elements=st.floats(-1e4, 1e4, width=32))
    )
    return st.lists(st.lists(points, max_size=2), max_size=3)


_JSON: Final = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)
_NAMES: Final = ["bg", "road", "car"]
_POINTS: Final = ["nose", "left_eye", "right_eye"]
_DEEP: list[Any] = []
for _ in range(100_000):  # nested past Python's recursion limit
    _DEEP = [_DEEP]

_GENERIC: Final = (
    HTypeCase(
        "generic",
        "int16",
        _ranked_lists(_numbers, (0, 1, 2), dtype="int16"),
        {"dtype": "int16"},
        hostile=(70_000, [1.5], "text", [[1], [1, 2]]),
    ),
    HTypeCase(
        "generic",
        "float64 with nan and inf",
        _ranked_lists(_numbers, (1, 3), dtype="float64"),
        {"dtype": "float64"},
        hostile=(np.array([1 + 2j]), ["a", 1.0]),
    ),
    HTypeCase(
        "generic",
        "dtype from the data",
        st.sampled_from(("bool", "uint8", "int32", "float32", "complex64")).flatmap(
            lambda dt: _lists(_numbers(2, dt))
        ),
        hostile=(np.array(["a", "b"]),),
    ),
    HTypeCase(
        "embedding",
        "float32",
        _lists(_numbers(1, "float32", max_side=8)),
        hostile=(np.zeros((2, 2), np.float32), 1.0, "vector"),
    ),
    HTypeCase(
        "embedding",
        "float16",
        _lists(_numbers(1, "float16", max_side=8)),
        {"dtype": "float16"},
        hostile=([1e6],),  # no float16 holds it
    ),
)
_IMAGES: Final = (
    HTypeCase(
        "image",
        "arrays",
        _ranked_lists(_image, (2, 3)),
        hostile=(np.zeros((2, 2), np.float32), np.zeros((2, 2, 2), np.uint8), np.zeros(4, np.uint8), 256),
    ),
    HTypeCase("image", "png", _ranked_lists(_image, (2, 3)), {"sample_compression": "png"}),
    HTypeCase(
        "image",
        "webp",
        _ranked_lists(_image, (2, 3)),
        {"sample_compression": "webp"},
        hostile=(np.zeros((0, 3, 3), np.uint8),),
    ),
    HTypeCase("image", "jpeg", _lists(_image(2)), {"sample_compression": "jpeg"}, lossy=True),
)
_LABELS: Final = (
    HTypeCase(
        "class_label",
        "named",
        _ranked_lists(_numbers, (0, 1), dtype="uint32", min_value=0, max_value=2),
        {"class_names": _NAMES},
        hostile=("zebra", 3, -1, 1.5, ["car", "zebra"]),
    ),
    HTypeCase(
        "class_label",
        "int64 without names",
        _ranked_lists(_numbers, (0, 1), dtype="int64"),
        {"dtype": "int64"},
        hostile=("bg", 0.5, 2**64),
    ),
    HTypeCase(
        "segment_mask",
        "named",
        _lists(_numbers(2, "uint32", min_value=0, max_value=2)),
        {"class_names": _NAMES},
        hostile=(np.full((2, 2), 3), np.zeros(4, np.uint32), np.zeros((2, 2), np.float32)),
    ),
    HTypeCase(
        "segment_mask",
        "int32 ids",
        _lists(_numbers(2, "int32", min_value=0)),
        {"dtype": "int32"},
        hostile=(np.full((2, 2), -1),),
    ),
)
_TEXT: Final = (
    HTypeCase("text", "str", _lists(st.text()), hostile=(5, None, b"bytes", "\ud800", ["a"])),
    HTypeCase("json", "values", _lists(_JSON), hostile=(float("nan"), {"a": object()}, {1, 2}, _DEEP)),
)
_TARGETS: Final = (
    HTypeCase(
        "bbox",
        "xyxy pixels float32",
        _lists(_boxes("float32", "xyxy", False)),
        hostile=([[5, 0, 1, 1]], [1, 2, 3, 4], [[0, 0, np.nan, 1]], [[0, 0, 1, 1, 1]]),
    ),
    HTypeCase(
        "bbox",
        "cxcywh normalized float64",
        _lists(_boxes("float64", "cxcywh", True)),
        {"dtype": "float64", "format": "cxcywh", "normalized": True},
        hostile=([[0.5, 0.5, 2.0, 0.1]], [[0.5, 0.5, -0.1, 0.1]]),
    ),
    HTypeCase(
        "bbox",
        "xywh int32",
        _lists(_boxes("int32", "xywh", False)),
        {"dtype": "int32", "format": "xywh"},
        hostile=([[0, 0, -1, 1]], [[0.5, 0, 1, 1]]),
    ),
    HTypeCase(
        "binary_mask",
        "bool",
        _ranked_lists(_numbers, (2, 3), dtype="bool"),
        hostile=(np.full((2, 2), 255), np.zeros(4, bool), np.full((2, 2), 0.5)),
    ),
    HTypeCase(
        "keypoints",
        "named",
        _ranked_lists(_keypoints, (2, 3), count=len(_POINTS)),
        {"keypoint_names": _POINTS, "skeleton": [[1, 2], [1, 3]]},
        hostile=([[0, 0, 3]] * 3, [[0, 0, 2]] * 2, [[np.inf, 0, 2]] * 3, [1, 2]),
    ),
    HTypeCase("keypoints", "unnamed", _ranked_lists(_keypoints, (2, 3), count=None)),
    HTypeCase(
        "polygon",
        "float32",
        _lists(_polygon("float32")),
        hostile=([[[0, 0], [1, 1]]], "abc", [[[0, np.nan], [1, 1], [2, 2]]], 5, [[[[[0]]]]]),
    ),
    HTypeCase("polygon", "float64", _lists(_polygon("float64")), {"dtype": "float64"}),
)


def _by_htype(*cases: HTypeCase) -> Mapping[str, tuple[HTypeCase, ...]]:
    grouped: dict[str, list[HTypeCase]] = {}
    for case in cases:
        grouped.setdefault(case.htype, []).append(case)
    return {name: tuple(group) for name, group in grouped.items()}


HTYPE_CASES: Final = _by_htype(*_GENERIC, *_IMAGES, *_LABELS, *_TEXT, *_TARGETS)
"""Every htype's cases, by htype."""

HOSTILE_TO_EVERY_HTYPE: Final = (object(), {1, 2}, b"\x00\xff", print)
"""Values no htype stores: each must be refused with an `InvalidSampleError` naming the tensor."""


def cases_of(htype: str) -> tuple[HTypeCase, ...]:
    """The cases of a declared htype.

    Raises:
        LookupError: the htype has none (a new htype needs its cases here before its suite passes).
    """
    cases = HTYPE_CASES.get(htype, ())
    if not cases:
        raise LookupError(
            f"htype {htype!r} is declared but has no conformance cases: add HTypeCase entries for it in "
            "lakecompute/testing/htype_cases.py (how to create its tensor, valid samples, values refused)."
        )
    return cases


_SCALARS: Final = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.integers(-3, 5),
    st.floats(),
    st.text(max_size=3),
    st.binary(max_size=3),
)
_DTYPES: Final = st.sampled_from(
    ["bool", "uint8", "int8", "int32", "int64", "uint64", "float16", "float32", "float64", "complex64"]
)
_ARRAYS: Final = hnp.arrays(_DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))


def near_valid_samples(max_leaves: int = 16) -> st.SearchStrategy[Any]:
    """Anything a caller might hand a tensor: arrays of any dtype and small shape (with nan and
    infinities), nested lists and tuples (of up to ``max_leaves`` values) of numbers, bools, None, text
    and bytes, small dicts."""
    nested = st.recursive(
        _SCALARS | _ARRAYS,
        lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner),
        max_leaves=max_leaves,
    )
    return st.one_of(_ARRAYS, nested, st.dictionaries(st.text(max_size=2), _SCALARS, max_size=2))
