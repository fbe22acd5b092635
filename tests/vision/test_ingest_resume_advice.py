"""Refusing to resume an ingest whose COCO file (or folder) changed gives advice the ingest accepts:
``overwrite=True`` instead of ``resume=True`` (an ingest takes no ``rerun=True``), and following it works."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from tests.vision.conftest import write_coco


def _checkpointed_then_failed(images: Path, annotations: Path, dest: Path) -> None:
    """An ingest with checkpoints that fails at its third image (a missing file), keeping the first two."""
    (images / "c.jpg").rename(images / "c.bak")
    with pytest.raises(lc.InvalidSampleError, match=r"c\.jpg"):
        lc.ingest_coco(images, annotations, dest, checkpoint_interval=1, progressbar=False)
    (images / "c.bak").rename(images / "c.jpg")
    assert len(lc.load(dest)) == 2


def test_a_changed_coco_file_is_refused_with_advice_the_ingest_takes(tmp_path: Path) -> None:
    images, annotations = write_coco(tmp_path / "coco")
    dest = tmp_path / "ds"
    _checkpointed_then_failed(images, annotations, dest)
    doc = json.loads(annotations.read_text())
    doc["annotations"][0]["bbox"] = [5.5, 6.25, 20.0, 30.0]
    annotations.write_text(json.dumps(doc))
    with pytest.raises(lc.EvalConflictError) as info:
        lc.ingest_coco(images, annotations, dest, checkpoint_interval=1, resume=True, progressbar=False)
    message = str(info.value)
    assert "rerun=True" not in message
    assert "first 2 images of an unfinished ingest" in message
    assert "Pass overwrite=True instead of resume=True" in message
    assert info.value.done == 2
    assert len(lc.load(dest)) == 2  # the checkpoints are kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = lc.ingest_coco(images, annotations, dest, overwrite=True, progressbar=False)  # the advice
    assert len(ds) == 4
    assert ds.boxes[0].numpy()[0].tolist() == [5.5, 6.25, 20.0, 30.0]


def test_resuming_after_putting_the_file_back_works(tmp_path: Path) -> None:
    """The other half of the advice: the same files and annotations resume after the checkpoint."""
    images, annotations = write_coco(tmp_path / "coco")
    dest = tmp_path / "ds"
    _checkpointed_then_failed(images, annotations, dest)
    ds = lc.ingest_coco(images, annotations, dest, checkpoint_interval=1, resume=True, progressbar=False)
    assert len(ds) == 4


def test_a_changed_class_folder_is_refused_the_same_way(tmp_path: Path) -> None:
    root = tmp_path / "animals"
    for i in range(4):
        (root / "cats").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((4, 4, 3), i, np.uint8)).save(root / "cats" / f"{i}.png")
    (root / "cats" / "9.png").write_bytes(b"not a png")
    with pytest.raises(lc.InvalidSampleError, match=r"9\.png"):
        lc.ingest_classification(root, tmp_path / "ds", checkpoint_interval=1, progressbar=False)
    (root / "cats" / "9.png").unlink()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(root / "cats" / "10.png")  # another file list
    with pytest.raises(lc.EvalConflictError, match=r"Pass overwrite=True instead of resume=True"):
        lc.ingest_classification(root, tmp_path / "ds", checkpoint_interval=1, resume=True, progressbar=False)
