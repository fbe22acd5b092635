"""The codecs of class ids: ``class_label`` (a class per sample or per object, by index or by name) and
``segment_mask`` (a class id per pixel), each an index into the tensor's class names when it has them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.htypes._base import HTypeCodec, as_array, check_label_range

__all__ = ["CODECS", "ClassLabelCodec", "SegmentMaskCodec"]


class ClassLabelCodec(HTypeCodec):
    """Class indices (a scalar, or one per object) or class names, which become their indices."""

    htype = "class_label"

    def numbers(self, tensor: str, value: object, class_names: list[str]) -> np.ndarray:
        value = _class_index(value, class_names, tensor)
        arr = as_array(value, tensor)
        if arr.dtype.kind not in "biu":
            raise InvalidSampleError(
                tensor, f"expected an integer class index or a class name. Got {arr.dtype} {value!r:.80}."
            )
        return arr

    def check(
        self, arr: np.ndarray, tensor: str, class_names: list[str], info: Mapping[str, Any]
    ) -> np.ndarray:
        if arr.dtype.kind not in "biu":
            raise InvalidSampleError(
                tensor, f"expected an integer class index or a class name. Got {arr.dtype} {arr!r:.80}."
            )
        check_label_range(arr, class_names, tensor)
        return arr

    def check_block(self, values: np.ndarray, tensor: str, class_names: list[str]) -> np.ndarray | None:
        if values.dtype.kind not in "biu":
            raise InvalidSampleError(tensor, f"expected integer class indices. Got dtype {values.dtype}.")
        check_label_range(values, class_names, tensor)
        return values


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


class SegmentMaskCodec(HTypeCodec):
    """``HxW`` integer class ids, each an index into the tensor's class names (when it has them)."""

    htype = "segment_mask"

    def check(
        self, arr: np.ndarray, tensor: str, class_names: list[str], info: Mapping[str, Any]
    ) -> np.ndarray:
        if arr.ndim != 2:
            raise InvalidSampleError(
                tensor,
                f"expected a segmentation mask of shape HxW (a class id per pixel). Got shape {arr.shape}.",
            )
        if arr.dtype.kind not in "biu":
            raise InvalidSampleError(
                tensor, f"expected integer class ids in a segmentation mask. Got dtype {arr.dtype}."
            )
        if arr.size and int(arr.min()) < 0:
            raise InvalidSampleError(tensor, f"class ids are >= 0. Got {int(arr.min())}.")
        check_label_range(arr, class_names, tensor)
        return arr


CODECS = (ClassLabelCodec(), SegmentMaskCodec())
