"""On S3 (moto on 127.0.0.1), a copy whose destination prefix is, is inside or contains the source's is
refused before anything is deleted; a sibling prefix sharing the name's first letters is not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lakecompute as lc


def test_s3_copy_onto_nested_prefixes_is_refused(bucket: str, storage_options: dict[str, Any]) -> None:
    """s3://b/data/src onto itself, s3://b/data/src/inner and s3://b/data: refused, the source whole;
    s3://b/data/src2 is apart and gets the copy."""
    src = f"s3://{bucket}/data/src"
    ds = lc.empty(src, storage_options=storage_options)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(6))
    cases = [(f"{src}/", "is the source"), (f"{src}/inner", "is inside the source"),
             (f"s3://{bucket}/data", "contains the source")]  # fmt: skip
    for dest, how in cases:
        with pytest.raises(lc.InvalidArgumentError, match=f"the destination {how}"):
            lc.copy(ds, dest, overwrite=True, storage_options=storage_options, progressbar=False)
    again = lc.load(src, storage_options=storage_options)
    assert again.x.numpy().tolist() == list(range(6))
    copied = lc.copy(ds, f"{src}2", overwrite=True, storage_options=storage_options, progressbar=False)
    assert copied.x.numpy().tolist() == list(range(6))
