"""Selecting by value on S3 (a moto server): a label filter makes no request for an image chunk.

Proved by removing every image chunk object from the bucket: filters, counts and label filters answer as
before, and reading an image fails, naming the missing key.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import chunk_key
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned._keys import segment_key
from lakecompute.versioned._segments import DATA_CHUNK


def _image_chunk_keys(ds: lc.Dataset) -> set[str]:
    keys = set()
    for f in dataset_core(ds).txn.head.tensors["images"].fragments:
        for i in range(f.off // DATA_CHUNK, (f.off + max(f.nbytes, 1) - 1) // DATA_CHUNK + 1):
            keys.add(chunk_key(segment_key(f.seg, "data"), i))
    return keys


def test_a_label_filter_on_s3_reads_no_image(bucket: str, storage_options: dict[str, Any]) -> None:
    """With the image chunks gone from the bucket, filter, count_values and filter_labels still answer."""
    url = f"s3://{bucket}/select"
    rng = np.random.default_rng(0)
    ds = lc.empty(url, storage_options=storage_options)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
        ds.create_tensor("categories", htype="class_label", class_names=["car", "bus"])
        ds.extend(
            {
                "images": [rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for _ in range(120)],
                "labels": np.arange(120, dtype=np.uint32) % 2,
                "categories": [np.arange(i % 3, dtype=np.uint32) % 2 for i in range(120)],
            }
        )
    keys = _image_chunk_keys(ds)
    backend = dataset_core(ds).backend
    for key in keys:
        backend.delete(key)
    fresh = lc.load(url, storage_options=storage_options, read_only=True)
    assert np.asarray(fresh.filter("labels == 'dog'").positions).tolist() == list(range(1, 120, 2))
    assert fresh.count_values("categories") == {"car": 80, "bus": 40}
    assert len(fresh.filter_labels("categories == 'bus'")) == 40
    with pytest.raises(lc.DatasetCorruptError, match="images"):
        fresh.images[0].numpy()
