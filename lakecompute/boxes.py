"""Box layouts: how a ``bbox`` tensor's four numbers place a box on its image, owned by the tensor.

A bbox tensor says once, in its info, how its boxes are written (``format``: ``xyxy``, ``xywh`` or
``cxcywh``; ``normalized``: pixels or 0..1 fractions of the image). `BoxLayout` is that statement as a
value: made from the tensor's info (`BoxLayout.of`), it checks boxes (the bbox htype's rules, and that
they lie on their image when the row has one) and converts them to any other layout. Every border that
reads boxes (the htype's checks, ``viz``, the COCO and YOLO exports, ``augment``, the detection training
helper) asks the tensor for its layout here, and nothing asks the user again.

This module depends only on `lakecompute.errors`, so that the tensor specs below storage use it too.

Example:
    >>> import numpy as np
    >>> from lakecompute.boxes import BoxLayout
    >>> coco = BoxLayout("xywh")
    >>> coco.convert(np.array([[10.0, 20.0, 30.0, 40.0]]), BoxLayout("xyxy")).tolist()
    [[10.0, 20.0, 40.0, 60.0]]
    >>> yolo = BoxLayout("cxcywh", normalized=True)
    >>> coco.convert(np.array([[10.0, 20.0, 30.0, 40.0]]), yolo, canvas=(100, 50)).tolist()
    [[0.5, 0.4, 0.6, 0.4]]
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError

__all__ = ["BBOX_FORMATS", "BoxFormat", "BoxLayout", "canvas_tolerance"]

#: The coordinate layouts a ``bbox`` tensor's ``info.format`` may name.
BBOX_FORMATS: Final = ("xyxy", "xywh", "cxcywh")

BoxFormat = Literal["xyxy", "xywh", "cxcywh"]

_RULES: Final = {
    "xyxy": "x2 >= x1 and y2 >= y1 (columns x1, y1, x2, y2)",
    "xywh": "width and height >= 0 (columns x, y, width, height; x, y the top-left corner)",
    "cxcywh": "width and height >= 0 (columns centre x, centre y, width, height)",
}


def canvas_tolerance(canvas: tuple[int, int]) -> float:
    """How far (in pixels) a box may reach past its image's edge and still be on it: a millionth of the
    image's larger side, for the rounding of a box written in another layout (``64.00000000000001``)."""
    return 1e-6 * max(canvas[0], canvas[1], 1)


@dataclass(frozen=True, slots=True)
class BoxLayout:
    """How the four numbers of a box are written: the ``format`` and ``normalized`` of a bbox tensor.

    Raises:
        InvalidArgumentError: a format that is not one of `BBOX_FORMATS`, or ``normalized`` not a bool.
    """

    format: BoxFormat = "xyxy"
    """``xyxy`` (corners), ``xywh`` (top-left corner and size: COCO's) or ``cxcywh`` (centre and size:
    YOLO's)."""
    normalized: bool = False
    """False: pixels; True: fractions (0..1) of the image's width and height."""

    def __post_init__(self) -> None:
        _check_kinds(self.format, self.normalized, "")

    @classmethod
    def parse(cls, info: Mapping[str, Any], tensor: str) -> BoxLayout:
        """The layout a bbox tensor's ``info`` states (``xyxy`` in pixels where it says nothing).

        Raises:
            InvalidArgumentError: a format or normalized of the wrong kind, naming ``tensor``.
        """
        fmt, normalized = info.get("format", "xyxy"), info.get("normalized", False)
        _check_kinds(fmt, normalized, f"bbox tensor {tensor!r}: ")
        return _layout(fmt, normalized)

    @classmethod
    def of(cls, tensor: Any) -> BoxLayout:
        """The layout of a bbox tensor (``ds.boxes``, ``ds[i]["boxes"]``, a ``sample_in`` value): its info.

        Raises:
            InvalidArgumentError: the tensor is not a bbox tensor.
        """
        htype = getattr(tensor, "htype", "bbox")
        name = getattr(tensor, "name", "")
        if htype != "bbox":
            raise InvalidArgumentError(
                f"Expected a bbox tensor, whose info says how its boxes are written. Got tensor {name!r} "
                f"of htype {htype!r}. Name the bbox tensor."
            )
        return cls.parse(getattr(tensor, "info", None) or {}, name)

    def info(self) -> dict[str, Any]:
        """The layout as a bbox tensor's info holds it."""
        return {"format": self.format, "normalized": self.normalized}

    def describe(self) -> str:
        """The layout in words: ``'xywh' in pixels``, ``'cxcywh' normalized``."""
        return f"{self.format!r} {'normalized' if self.normalized else 'in pixels'}"

    def check(self, boxes: np.ndarray, tensor: str, canvas: tuple[int, int] | None = None) -> np.ndarray:
        """Boxes of one image as ``(k, 4)`` (an empty list is ``(0, 4)``), checked against the layout.

        Args:
            boxes: the boxes, in this layout.
            tensor: the bbox tensor, for messages.
            canvas: the image's ``(height, width)`` when the row has one: then every box must lie on it
                (up to `canvas_tolerance`).

        Raises:
            InvalidSampleError: not ``(k, 4)``, not finite, breaking the format's rule (``x2 >= x1``, a
                size >= 0), normalized values outside 0..1, or a box off its image.
        """
        arr = boxes.reshape(0, 4) if boxes.ndim == 1 and boxes.size == 0 else boxes
        if arr.ndim != 2 or arr.shape[1] != 4:
            raise InvalidSampleError(
                tensor,
                f"expected the boxes of one image as shape (k, 4), one row per box (k may be 0). "
                f"Got shape {arr.shape}" + ("; for one box write [box]." if arr.shape == (4,) else "."),
            )
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            bad = arr[~np.isfinite(arr)].flat[0]
            raise InvalidSampleError(tensor, f"box coordinates must be finite numbers. Got {bad}.")
        self._check_rule(arr, tensor)
        if self.normalized and arr.size and (arr.min() < 0 or arr.max() > 1):
            i = int(np.flatnonzero(((arr < 0) | (arr > 1)).any(axis=1))[0])
            raise InvalidSampleError(
                tensor,
                f"box {i} {arr[i].tolist()} has coordinates outside 0..1, but the tensor holds normalized "
                "boxes (info.normalized=True). Divide by the image's width and height, or use a tensor "
                "with normalized=False for pixel coordinates.",
            )
        if canvas is not None and arr.size:
            self._check_canvas(arr, tensor, canvas)
        return arr

    def _check_rule(self, arr: np.ndarray, tensor: str) -> None:
        if self.format == "xyxy":
            ok = (arr[:, 2] >= arr[:, 0]) & (arr[:, 3] >= arr[:, 1])
        else:
            ok = (arr[:, 2] >= 0) & (arr[:, 3] >= 0)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise InvalidSampleError(
                tensor,
                f"box {i} {arr[i].tolist()} is not a {self.format!r} box: expected {_RULES[self.format]}. "
                "Convert the boxes, or create the tensor with the format they have (format='xywh', ...).",
            )

    def _check_canvas(self, arr: np.ndarray, tensor: str, canvas: tuple[int, int]) -> None:
        height, width = canvas
        x1, y1, x2, y2 = self.convert(arr, _PIXEL_CORNERS, canvas).T
        tol = canvas_tolerance(canvas)
        off = (x1 < -tol) | (y1 < -tol) | (x2 > width + tol) | (y2 > height + tol)
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise InvalidSampleError(
                tensor,
                f"box {i} {arr[i].tolist()} ({self.describe()}) reaches past its {width} x {height} image "
                f"(corners {[x1[i], y1[i], x2[i], y2[i]]}). Expected boxes on the image: check that the "
                "tensor's format and normalized are the boxes' own, or clip them (BoxLayout.clip).",
            )

    def convert(self, boxes: np.ndarray, to: BoxLayout, canvas: tuple[int, int] | None = None) -> np.ndarray:
        """The boxes ``(k, 4)`` written in layout ``to``, as float64.

        The same layout gives the boxes back untouched (no arithmetic, so values stay exact).

        Args:
            boxes: the boxes, in this layout.
            to: the layout wanted.
            canvas: the image's ``(height, width)``; needed only when one layout is normalized and the
                other is not.

        Raises:
            InvalidArgumentError: no canvas where one is needed.
        """
        if to == self:
            return boxes
        b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        if self.normalized != to.normalized and canvas is None:
            raise InvalidArgumentError(
                f"Converting boxes from {self.describe()} to {to.describe()} needs the image's size: pass "
                "canvas=(height, width)."
            )
        if self.normalized and not to.normalized:
            b = b * _scale(canvas)
        x1, y1, w, h = _corner_and_size(b, self.format)
        out = _from_corner_and_size(x1, y1, w, h, to.format)
        if to.normalized and not self.normalized:
            out = out / _scale(canvas)
        return out

    def clip(self, boxes: np.ndarray, canvas: tuple[int, int]) -> np.ndarray:
        """The boxes cut to the image's ``(height, width)``, in this layout (float64)."""
        height, width = canvas
        xyxy = self.convert(boxes, _PIXEL_CORNERS, canvas)
        clipped = np.clip(xyxy, 0.0, np.array([width, height, width, height], dtype=np.float64))
        return _PIXEL_CORNERS.convert(clipped, self, canvas)


def _check_kinds(fmt: object, normalized: object, where: str) -> None:
    if not isinstance(fmt, str) or fmt not in BBOX_FORMATS:
        raise InvalidArgumentError(
            f"{where}format must be one of {list(BBOX_FORMATS)!r}. Got {fmt!r:.60}. "
            "COCO boxes are 'xywh' in pixels; YOLO boxes 'cxcywh' normalized."
        )
    if not isinstance(normalized, bool):
        raise InvalidArgumentError(
            f"{where}normalized must be True (0..1 fractions of the image size) or False (pixels). "
            f"Got {normalized!r:.60}."
        )


@functools.lru_cache(maxsize=8)
def _layout(fmt: BoxFormat, normalized: bool) -> BoxLayout:
    """One `BoxLayout` object per layout (checks run per sample; building one each time costs more).
    Called with kinds already checked: ``1`` and ``True`` hash alike."""
    return BoxLayout(fmt, normalized)


_PIXEL_CORNERS: Final = BoxLayout("xyxy", False)


def _scale(canvas: tuple[int, int] | None) -> np.ndarray:
    assert canvas is not None
    height, width = canvas
    return np.array([width, height, width, height], dtype=np.float64)


def _corner_and_size(b: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if fmt == "xyxy":
        return b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    if fmt == "cxcywh":
        return b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 2], b[:, 3]
    return b[:, 0], b[:, 1], b[:, 2], b[:, 3]


def _from_corner_and_size(
    x1: np.ndarray, y1: np.ndarray, w: np.ndarray, h: np.ndarray, fmt: str
) -> np.ndarray:
    if fmt == "xyxy":
        return np.stack([x1, y1, x1 + w, y1 + h], axis=1)
    if fmt == "cxcywh":
        return np.stack([x1 + w / 2, y1 + h / 2, w, h], axis=1)
    return np.stack([x1, y1, w, h], axis=1)
