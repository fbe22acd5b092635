"""The codec registry: one `HTypeCodec` per declared htype, and the entry points that dispatch to them.

Every sample passes through `encode_sample` (or `encode_batch` for a stacked array, `encode_ragged` for
arrays of varying first dimension) before it is buffered, so a bad value is refused at the call that tried
to write it and nothing already written is touched; every stored blob comes back through `decode_sample`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError
from lakecompute.htypes import _detection, _generic, _image, _labels, _polygon, _text
from lakecompute.htypes._base import HTypeCodec, TensorRules, cast_checked
from lakecompute.specs import HTYPES, Encoded, TensorSpec

__all__ = [
    "CODECS",
    "codec_registry",
    "decode_sample",
    "encode_batch",
    "encode_ragged",
    "encode_sample",
]


def codec_registry(*families: tuple[HTypeCodec, ...]) -> Mapping[str, HTypeCodec]:
    """The codecs of ``families`` by htype, in the declarations' order, checked against the declarations.

    Raises:
        InvalidArgumentError: a codec for an htype that is not declared (`lakecompute.specs.HTYPES`) or
            that has one already, or a declared htype without a codec.
    """
    codecs: dict[str, HTypeCodec] = {}
    for codec in (c for family in families for c in family):
        name = codec.htype
        if name in codecs or name not in HTYPES:
            why = (
                "has a codec already" if name in codecs else "is not declared in lakecompute/specs/_htypes.py"
            )
            raise InvalidArgumentError(
                f"Expected one codec per declared htype. Got {type(codec).__name__} for htype {name!r}, "
                f"which {why}. Declare the htype, or register one codec for it."
            )
        codecs[name] = codec
    missing = [name for name in HTYPES if name not in codecs]
    if missing:
        raise InvalidArgumentError(
            f"Expected one codec per declared htype. Got none for {missing!r}: write an HTypeCodec for "
            "each and register it (see docs/how-it-works.md, 'Adding an htype')."
        )
    return MappingProxyType({name: codecs[name] for name in HTYPES})


CODECS: Final = codec_registry(
    _generic.CODECS, _image.CODECS, _labels.CODECS, _text.CODECS, _detection.CODECS, _polygon.CODECS
)
"""Every htype's codec by name, in the declarations' order."""


def encode_sample(rules: TensorRules, value: object) -> Encoded:
    """Check one sample against a tensor's ``rules`` and turn it into what is stored.

    The rules' ``info`` is the tensor's info: the coordinate format of ``bbox`` tensors, the keypoint
    names of ``keypoints`` tensors (see `lakecompute.specs.HType.checked_info`).

    Raises:
        InvalidSampleError: the value cannot be stored in this tensor, naming it.
    """
    try:
        return CODECS[rules.spec.htype].encode(rules, value)
    except InvalidSampleError as exc:
        if exc.tensor:
            raise
        # A sample that failed before it knew its tensor (a file from lc.read that does not decode).
        raise InvalidSampleError(rules.name, exc.detail) from exc.__cause__


def encode_batch(rules: TensorRules, values: np.ndarray) -> np.ndarray | None:
    """Check a stacked array of samples at once (fast path); None if it must go sample by sample."""
    spec = rules.spec
    if spec.kind != "array" or values.dtype.kind not in "biufc" or values.ndim == 0:
        return None
    block = CODECS[spec.htype].check_block(rules, values)
    if block is not None and spec.dtype is not None:
        block = cast_checked(block, np.dtype(spec.dtype), spec.name)
    return block


def encode_ragged(rules: TensorRules, values: list[Any]) -> list[Encoded] | None:
    """Check numpy arrays of one dtype and rank whose first dimension varies (an image's boxes, labels
    or keypoints) joined on axis 0, in one go: what `encode_sample` gives for each, or None when the fast
    path does not apply or some value is refused (then `encode_sample` on each finds it, and says so).

    Only for htypes declared ``ragged``, whose checks are per row or per value (ranges, finiteness, box
    corners, visibility, class indices, the dtype cast), so checking the joined rows refuses exactly what
    checking each sample would; a check that would reshape a sample (COCO's flat keypoints) leaves it to
    each sample.
    """
    spec = rules.spec
    if spec.kind != "array" or not HTYPES[spec.htype].ragged or len(values) < 2:
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
        checked = CODECS[spec.htype].checked(rules, joined)
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


def decode_sample(spec: TensorSpec, blob: bytes | memoryview | np.ndarray, shape: tuple[int, ...]) -> Any:
    """Turn a stored blob back into the value a user reads (``bytes`` kind tensors).

    Raises:
        ValueError or LakeComputeError: a blob its codec did not write (the reader reports it as a
            damaged dataset).
    """
    raw = blob.tobytes() if isinstance(blob, np.ndarray) else bytes(blob)
    return CODECS[spec.htype].decode(spec, raw, shape)
