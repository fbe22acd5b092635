"""The codecs of detection targets: ``bbox`` (an image's boxes, in the tensor's `BoxLayout`),
``keypoints`` (rows of x, y, visibility) and ``binary_mask`` (True/False per pixel, stored as bits).
Polygons are in ``_polygon.py``."""

from __future__ import annotations

from typing import Any

import numpy as np

from lakecompute.boxes import BoxLayout
from lakecompute.errors import InvalidSampleError
from lakecompute.htypes._base import HTypeCodec, TensorRules, check_finite
from lakecompute.specs import Encoded, TensorSpec

__all__ = ["CODECS", "BBoxCodec", "BinaryMaskCodec", "KeypointsCodec"]


class BBoxCodec(HTypeCodec):
    """Boxes of one image: ``(k, 4)``, checked by the tensor's `BoxLayout`; an empty list is ``(0, 4)``."""

    htype = "bbox"

    def check(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        return BoxLayout.parse(rules.info, rules.name).check(arr, rules.name)


class KeypointsCodec(HTypeCodec):
    """``(k, 3)`` or ``(n, k, 3)`` rows of (x, y, visibility); COCO's flat ``[x1, y1, v1, ...]`` becomes
    ``(k, 3)``; with ``info.keypoint_names``, k is their number."""

    htype = "keypoints"

    def check(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        tensor = rules.name
        if arr.ndim == 1 and arr.size % 3 == 0:
            arr = arr.reshape(-1, 3)
        if arr.ndim not in (2, 3) or arr.shape[-1] != 3:
            raise InvalidSampleError(
                tensor,
                "expected keypoints as rows of (x, y, visibility): shape (k, 3) for one object, (n, k, 3) "
                f"for n objects, or COCO's flat [x1, y1, v1, ...]. Got shape {arr.shape}.",
            )
        names = rules.info.get("keypoint_names")
        if names and arr.shape[-2] != len(names):
            raise InvalidSampleError(
                tensor,
                f"expected {len(names)} keypoints per object (info.keypoint_names). Got {arr.shape[-2]}.",
            )
        check_finite(arr, tensor, "keypoint coordinates")
        vis = arr[..., 2]
        bad = ~np.isin(vis, (0, 1, 2))
        if bad.any():
            raise InvalidSampleError(
                tensor,
                f"visibility (the third value of a keypoint) is 0 (not labelled), 1 (labelled, hidden) or 2 "
                f"(visible), as in COCO. Got {vis[bad].flat[0]}.",
            )
        return arr


class BinaryMaskCodec(HTypeCodec):
    """``HxW`` or ``HxWxK`` (one channel per object), True/False; 0/1 integers become booleans. Stored as
    bits (np.packbits: 8 pixels a byte, eight times less to copy and compress than bools)."""

    htype = "binary_mask"

    def store(self, rules: TensorRules, arr: np.ndarray) -> Encoded:
        return Encoded(None, np.packbits(arr, axis=None).tobytes(), arr.shape)

    def check(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        tensor = rules.name
        if arr.ndim not in (2, 3):
            raise InvalidSampleError(
                tensor, f"expected a binary mask of shape HxW, or HxWxK for K objects. Got shape {arr.shape}."
            )
        if arr.dtype == np.bool_:
            return arr
        if arr.dtype.kind in "iu" and (arr.size == 0 or (arr.min() >= 0 and arr.max() <= 1)):
            return arr.astype(np.bool_)
        odd = arr[(arr != 0) & (arr != 1)]
        value = f" with value {odd.flat[0].item()!r}" if odd.size else ""
        raise InvalidSampleError(
            tensor,
            f"a binary mask holds True/False (or 0/1). Got dtype {arr.dtype}{value}; "
            "threshold it first, e.g. mask > 0.",
        )

    def decode(self, spec: TensorSpec, raw: bytes, shape: tuple[int, ...]) -> Any:
        count = int(np.prod(shape)) if shape else 1
        if len(raw) != (count + 7) // 8:
            raise ValueError(f"a mask of shape {shape} takes {(count + 7) // 8} bytes, got {len(raw)}")
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=count)
        return bits.reshape(shape).view(np.bool_)


CODECS = (BBoxCodec(), KeypointsCodec(), BinaryMaskCodec())
