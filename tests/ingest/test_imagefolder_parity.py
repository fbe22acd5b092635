"""ingest_classification reads a class folder as torchvision's ImageFolder reads it, links included: the
same classes, and the same images with the same labels (full lane: torchvision). The order within a class
differs where a class has sub-folders: ours is by sorted path (``more/b.png`` before ``own.png``),
ImageFolder's folder by folder (``own.png`` first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.ingest.test_ingest import linked_split

pytestmark = pytest.mark.needs("torchvision")
pytest.importorskip(
    "torchvision", reason="needs torchvision, which only the full lane installs (make test-full)"
)
from torchvision.datasets import ImageFolder  # noqa: E402  (after the skip: torchvision is optional)


def test_a_split_made_of_links_reads_as_imagefolder_reads_it(tmp_path: Path) -> None:
    split, _ = linked_split(tmp_path)
    theirs = ImageFolder(str(split))
    ds = lc.ingest_classification(split, tmp_path / "out", progressbar=False)
    assert ds.labels.info.class_names == theirs.classes
    images = ds.images.numpy(aslist=True)
    ours = sorted((int(label), images[i].tobytes()) for i, label in enumerate(ds.labels.numpy()))
    assert ours == sorted((label, np.asarray(image).tobytes()) for image, label in theirs)
    assert len(ours) == 5
