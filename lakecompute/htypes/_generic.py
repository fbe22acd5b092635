"""The codecs of plain numbers: ``generic`` (any numbers, any shape) and ``embedding`` (a float vector)."""

from __future__ import annotations

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.htypes._base import HTypeCodec, TensorRules

__all__ = ["CODECS", "EmbeddingCodec", "GenericCodec"]


class GenericCodec(HTypeCodec):
    """Any numbers of any shape; the tensor's dtype (once decided) is the only rule."""

    htype = "generic"

    def check_block(self, rules: TensorRules, values: np.ndarray) -> np.ndarray | None:
        return values


class EmbeddingCodec(HTypeCodec):
    """A 1-D vector of floats."""

    htype = "embedding"

    def check(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        if arr.ndim != 1:
            raise InvalidSampleError(rules.name, f"expected a 1-D embedding vector. Got shape {arr.shape}.")
        return arr

    def check_block(self, rules: TensorRules, values: np.ndarray) -> np.ndarray | None:
        if values.ndim != 2:
            raise InvalidSampleError(
                rules.name, f"expected 1-D embedding vectors. Got samples of shape {values.shape[1:]}."
            )
        return values


CODECS = (GenericCodec(), EmbeddingCodec())
