"""The codec of ``image``: uint8 HxW or HxWxC pictures, stored as arrays or, with a sample compression,
as one PNG, JPEG or WebP file each (`lakecompute.compression`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lakecompute import compression
from lakecompute.errors import InvalidSampleError
from lakecompute.htypes._base import HTypeCodec, TensorRules
from lakecompute.specs import Encoded, TensorSpec

__all__ = ["CODECS", "ImageCodec"]


class ImageCodec(HTypeCodec):
    """A uint8 image of shape HxW or HxWxC with C of 1, 3 or 4 (a float image is refused, not scaled)."""

    htype = "image"

    def encode(self, rules: TensorRules, value: object) -> Encoded:
        blob_in = getattr(value, "_lakecompute_blob", None)
        if blob_in is not None and rules.spec.sample_compression is not None:
            # A lazily read file (lc.read) whose encoding already matches: store its bytes as they are.
            fmt, data, shape = blob_in()
            if fmt == rules.spec.sample_compression:
                compression.check_kept_bytes(data, rules.name)  # a 16-bit PNG would read cut to 8 bits
                return Encoded(None, data, tuple(shape))
        return super().encode(rules, value)

    def store(self, rules: TensorRules, arr: np.ndarray) -> Encoded:
        if rules.spec.sample_compression is None:
            return super().store(rules, arr)
        blob = compression.encode_image(arr, rules.spec.sample_compression, tensor=rules.name)
        return Encoded(None, blob, arr.shape)

    def check(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        _check_image(arr, rules.name)
        return arr

    def check_block(self, rules: TensorRules, values: np.ndarray) -> np.ndarray | None:
        # The samples share one shape and dtype: the first stands for them all.
        _check_image(values[0] if len(values) else values.reshape(values.shape[1:]), rules.name)
        return values

    def decode(self, spec: TensorSpec, raw: bytes, shape: tuple[int, ...]) -> Any:
        return compression.decode_image(raw, shape)


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


CODECS = (ImageCodec(),)
