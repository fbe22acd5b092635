"""The codecs of class ids: ``class_label`` (a class per sample or per object, by index or by name) and
``segment_mask`` (a class id per pixel), each an index into the tensor's class names when it has them."""

from __future__ import annotations

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.htypes._base import HTypeCodec, TensorRules, as_array, check_label_range

__all__ = ["CODECS", "ClassLabelCodec", "SegmentMaskCodec"]


class ClassLabelCodec(HTypeCodec):
    """Class indices (a scalar, or one per object) or class names, which become their indices."""

    htype = "class_label"

    def numbers(self, rules: TensorRules, value: object) -> np.ndarray:
        value = _class_index(value, rules.class_names, rules.name)
        arr = as_array(value, rules.name)
        if arr.dtype.kind not in "biu":
            raise InvalidSampleError(
                rules.name, f"expected an integer class index or a class name. Got {arr.dtype} {value!r:.80}."
            )
        return arr

    def check(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        if arr.dtype.kind not in "biu":
            raise InvalidSampleError(
                rules.name, f"expected an integer class index or a class name. Got {arr.dtype} {arr!r:.80}."
            )
        check_label_range(arr, rules.class_names, rules.name)
        return arr

    def check_block(self, rules: TensorRules, values: np.ndarray) -> np.ndarray | None:
        if values.dtype.kind not in "biu":
            raise InvalidSampleError(rules.name, f"expected integer class indices. Got dtype {values.dtype}.")
        check_label_range(values, rules.class_names, rules.name)
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
    if isinstance(value, (list, tuple)) and not value:
        return np.zeros(0, dtype=np.int64)  # no labels (an image without objects), not a float array
    return value


class SegmentMaskCodec(HTypeCodec):
    """``HxW`` integer class ids, each an index into the tensor's class names (when it has them)."""

    htype = "segment_mask"

    def check(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        tensor = rules.name
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
        check_label_range(arr, rules.class_names, tensor)
        return arr


CODECS = (ClassLabelCodec(), SegmentMaskCodec())
