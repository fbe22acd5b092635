"""Tensor specs and htype declarations: what a tensor is, checked without touching any sample.

A tensor's name, htype, dtype and compressions (`TensorSpec`), the names lakecompute accepts for each,
and the declaration of every htype (`HType`, in the table `HTYPES`): its dtypes, storage, class names,
info, pad value and Arrow column (`ArrowMapping`). Storage records specs in manifests and checks them
when it reads one, so this package sits below storage and imports nothing but `lakecompute.errors` and
`lakecompute.boxes`: how samples are checked, encoded and decoded (`lakecompute.htypes`,
`lakecompute.compression`) sits above storage.
`lakecompute.htypes` and `lakecompute.compression` re-export these names where they were defined before.
"""

from lakecompute.specs._htypes import (
    CLASS_NAMED_HTYPES,
    HTYPES,
    NOT_NUMERIC_DTYPES,
    ArrowColumn,
    ArrowMapping,
    HType,
    ObjectAxis,
    Target,
    htype_declaration,
    parse_htype,
)
from lakecompute.specs._tensor import (
    CHUNK_COMPRESSIONS,
    MAX_TENSOR_NAME,
    SAMPLE_COMPRESSIONS,
    ChunkCompression,
    Encoded,
    SampleCompression,
    TensorSpec,
    check_new_tensor_name,
    parse_chunk_compression,
    parse_htype_info,
    parse_sample_compression,
    parse_tensor_name,
    parse_tensor_spec,
)

__all__ = [
    "CHUNK_COMPRESSIONS",
    "CLASS_NAMED_HTYPES",
    "HTYPES",
    "MAX_TENSOR_NAME",
    "NOT_NUMERIC_DTYPES",
    "SAMPLE_COMPRESSIONS",
    "ArrowColumn",
    "ArrowMapping",
    "ChunkCompression",
    "Encoded",
    "HType",
    "ObjectAxis",
    "SampleCompression",
    "Target",
    "TensorSpec",
    "check_new_tensor_name",
    "htype_declaration",
    "parse_chunk_compression",
    "parse_htype",
    "parse_htype_info",
    "parse_sample_compression",
    "parse_tensor_name",
    "parse_tensor_spec",
]
