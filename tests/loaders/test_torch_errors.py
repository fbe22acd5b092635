"""Errors raised in ds.pytorch()'s DataLoader workers arrive as themselves, with their attributes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.loaders.conftest import fails_on_30

pytest.importorskip("torch")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pytorch_transform_error_keeps_its_type_and_index(numbered: lc.Dataset, num_workers: int) -> None:
    """A compute transform failing in a DataLoader worker raises TransformError with .index and cause."""
    loader = numbered.pytorch(8, tensors="idx", transform=fails_on_30(), num_workers=num_workers)
    with pytest.raises(lc.TransformError, match=r"'fails_on_30' failed on data_in\[30\]") as info:
        list(loader)
    assert info.value.index == 30
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "no 30"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pytorch_damaged_data_is_dataset_corrupt_error(tmp_path: Path, num_workers: int) -> None:
    """A missing chunk read by a DataLoader worker raises DatasetCorruptError naming tensor and key."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", dtype="int32", chunk_compression=None)
    ds.x.extend(np.arange(3000 * 256, dtype=np.int32).reshape(3000, 256))
    chunks = sorted((tmp_path / "ds" / "segments").glob("*/data/c/*"), key=lambda p: int(p.name))
    os.remove(chunks[1])
    loader = lc.load(str(tmp_path / "ds")).pytorch(500, num_workers=num_workers)
    with pytest.raises(lc.DatasetCorruptError) as info:
        list(loader)
    assert info.value.tensor == "x"
    assert info.value.reason == "the chunk is missing"
    assert info.value.file is not None
    assert info.value.file.endswith(f"data/c/{chunks[1].name}")


def test_pytorch_loader_with_workers_keeps_its_values_and_length(numbered: lc.Dataset) -> None:
    """The DataLoader that re-raises worker errors yields what ds.batches does, every sample, with len()."""
    loader = numbered.pytorch(8, tensors="idx", num_workers=2)
    batches = list(loader)
    assert len(loader) == len(batches)
    values = [b["idx"].numpy().tolist() for b in batches]
    assert values == [b["idx"].tolist() for b in numbered.batches(8, tensors="idx", num_workers=2)]
    assert sorted(v for batch in values for v in batch) == list(range(len(numbered)))
