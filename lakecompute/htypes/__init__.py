"""Tensor kinds (htypes): what a sample may be, how it is checked, and how it is stored.

Each htype is declared once in `lakecompute.specs` (`HType`: its dtypes, storage, class names, info, pad
value) and has one codec here (`HTypeCodec`), registered against the declaration in ``_registry.py``; the
codecs are split by family (``_generic``, ``_image``, ``_labels``, ``_text``, ``_detection``,
``_polygon``). Samples are stored either as raw numeric bytes (``array`` kind) or as one encoded blob each
(``bytes`` kind: PNG/JPEG/WEBP images, UTF-8 text, JSON, polygons, mask bits).
"""

from lakecompute.htypes._base import HTypeCodec, TensorRules, cast_checked
from lakecompute.htypes._decoding import decode_blobs, decode_many
from lakecompute.htypes._device import (
    HostDecode,
    decode_on_host_with,
    decoding_on,
    is_tensor,
    stack_on_device,
)
from lakecompute.htypes._registry import (
    CODECS,
    codec_registry,
    decode_sample,
    encode_batch,
    encode_ragged,
    encode_sample,
)
from lakecompute.htypes._stacking import StackedList, Staging, stack_samples, stacked, stacked_list

# Specs sit below storage (see lakecompute.specs); re-exported here, where callers have always found them.
from lakecompute.specs import (
    CLASS_NAMED_HTYPES,
    HTYPES,
    MAX_TENSOR_NAME,
    Encoded,
    HType,
    TensorSpec,
    check_new_tensor_name,
    htype_declaration,
    parse_htype,
    parse_htype_info,
    parse_tensor_name,
    parse_tensor_spec,
)

__all__ = [
    "CLASS_NAMED_HTYPES",
    "CODECS",
    "HTYPES",
    "MAX_TENSOR_NAME",
    "Encoded",
    "HType",
    "HTypeCodec",
    "HostDecode",
    "StackedList",
    "Staging",
    "TensorRules",
    "TensorSpec",
    "cast_checked",
    "check_new_tensor_name",
    "codec_registry",
    "decode_blobs",
    "decode_many",
    "decode_on_host_with",
    "decode_sample",
    "decoding_on",
    "encode_batch",
    "encode_ragged",
    "encode_sample",
    "htype_declaration",
    "is_tensor",
    "parse_htype",
    "parse_htype_info",
    "parse_tensor_name",
    "parse_tensor_spec",
    "stack_on_device",
    "stack_samples",
    "stacked",
    "stacked_list",
]
