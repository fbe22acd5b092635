"""collate_fn follows torch's convention: it gets a batch's samples as a list, one dict per sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import lakecompute as lc

N = 10


@pytest.fixture
def mixed(tmp_path: Path) -> lc.Dataset:
    """Images, class labels, a ragged tensor and text."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image")
        ds.create_tensor("labels", htype="class_label", class_names=["a", "b", "c"])
        ds.create_tensor("ragged", dtype="int32")
        ds.create_tensor("caption", htype="text")
        for i in range(N):
            ds.append({
                "images": np.full((2, 3, 3), i, np.uint8),
                "labels": i % 3,
                "ragged": np.arange(i % 4, dtype=np.int32),
                "caption": f"sample {i}",
            })  # fmt: skip
    return ds


def keep(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A collate that returns what it is given."""
    return samples


@pytest.mark.parametrize("workers", [0, 2])
def test_collate_fn_gets_a_list_of_sample_dicts(mixed: lc.Dataset, workers: int) -> None:
    """Each call gets one dict per sample of the batch, with numpy values as stored (labels as int64),
    ragged samples and text one per sample."""
    batches = list(mixed.pytorch(4, collate_fn=keep, num_workers=workers))
    # Each worker cuts its own samples into batches: 10 samples are 4 + 4 + 2, or per worker 4 + 1.
    assert [len(b) for b in batches] == ([4, 4, 2] if workers == 0 else [4, 4, 1, 1])
    samples = sorted((s for b in batches for s in b), key=lambda s: int(s["images"][0, 0, 0]))
    assert [sorted(s) for s in samples] == [["caption", "images", "labels", "ragged"]] * N
    for i, s in enumerate(samples):
        np.testing.assert_array_equal(s["images"], np.full((2, 3, 3), i, np.uint8))
        assert s["labels"] == i % 3
        assert s["labels"].dtype == np.int64
        np.testing.assert_array_equal(s["ragged"], np.arange(i % 4))
        assert s["caption"] == f"sample {i}"


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_default_collate_gives_the_default_batches(mixed: lc.Dataset, workers: int) -> None:
    """torch's own default_collate, passed as collate_fn, stacks the samples into the tensors the loader
    gives without one (a torch-style collate works unchanged)."""
    tensors = ["images", "labels"]
    plain = list(mixed.pytorch(4, tensors=tensors, num_workers=workers))
    torch_style = list(
        mixed.pytorch(4, tensors=tensors, num_workers=workers, collate_fn=torch.utils.data.default_collate)
    )
    assert len(plain) == len(torch_style) == (3 if workers == 0 else 4)
    for a, b in zip(plain, torch_style, strict=True):
        for name in tensors:
            assert torch.equal(a[name], b[name])
            assert a[name].dtype == b[name].dtype


def test_tuple_collate_as_deep_lake_users_write_it(mixed: lc.Dataset) -> None:
    """The Deep Lake habit: a collate making (images, labels) tuples from the samples."""

    def to_tuple(samples: list[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.stack([torch.from_numpy(s["images"]) for s in samples])
        labels = torch.tensor([int(s["labels"]) for s in samples])
        return images, labels

    images, labels = next(iter(mixed.pytorch(5, tensors=["images", "labels"], collate_fn=to_tuple)))
    assert images.shape == (5, 2, 3, 3)
    assert labels.tolist() == [0, 1, 2, 0, 1]


def test_a_batch_style_collate_fails_loudly(mixed: lc.Dataset) -> None:
    """A collate written for a batch dict (batch["labels"]) is given a list and fails at once, rather
    than returning nonsense."""
    with pytest.raises(TypeError, match="list indices must be integers"):
        next(iter(mixed.pytorch(4, collate_fn=lambda batch: batch["labels"])))
