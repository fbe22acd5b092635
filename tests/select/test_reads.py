"""Evaluation reads by column: the tensors an expression names, whole chunks of them, nothing else.

Proved by damage: with every stored chunk of the images destroyed, label filters, counts, sorts and label
filters still answer (they never read an image chunk), while reading an image fails; damage to a tensor the
expression names is a DatasetCorruptError naming that tensor, never a wrong answer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import chunk_key
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned._keys import segment_key
from lakecompute.versioned._segments import DATA_CHUNK


def chunk_files(ds: lc.Dataset, name: str) -> set[Path]:
    """The stored chunk files holding tensor ``name``'s samples (from its fragments in the manifest)."""
    files = set()
    for f in dataset_core(ds).txn.head.tensors[name].fragments:
        first, last = f.off // DATA_CHUNK, (f.off + max(f.nbytes, 1) - 1) // DATA_CHUNK
        for i in range(first, last + 1):
            files.add(Path(ds.path) / chunk_key(segment_key(f.seg, "data"), i))
    return files


def _detection(path: Path, n: int = 240) -> lc.Dataset:
    rng = np.random.default_rng(0)
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
        ds.create_tensor("score", dtype="float32")
        ds.create_tensor("boxes", htype="bbox")
        ds.create_tensor("categories", htype="class_label", class_names=["car", "bus"])
        k = rng.integers(0, 4, n)
        ds.extend(
            {
                "images": [rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for _ in range(n)],
                "labels": (np.arange(n) % 3 == 0).astype(np.uint32),
                "score": rng.random(n).astype(np.float32),
                "boxes": [np.tile(np.float32([0, 0, 1, 1]), (int(c), 1)) for c in k],
                "categories": [np.arange(int(c), dtype=np.uint32) % 2 for c in k],
            }
        )
    return ds


def _destroy(files: set[Path]) -> None:
    for file in files:
        data = bytearray(file.read_bytes())
        data[len(data) // 2 :] = b"\xff" * (len(data) - len(data) // 2)  # the checksum no longer holds
        file.write_bytes(bytes(data))


def test_label_selection_reads_no_image_chunk(tmp_path: Path) -> None:
    """With every image chunk destroyed, filters, counts, sorts and label filters answer as before."""
    ds = _detection(tmp_path / "ds")
    images = chunk_files(ds, "images")
    others = set().union(*(chunk_files(ds, n) for n in ("labels", "score", "boxes", "categories")))
    assert len(images) >= 3
    assert not images & others  # the images fill chunks of their own
    before = {
        "filter": np.asarray(ds.filter("labels == 'dog' and score > 0.25").positions).tolist(),
        "count": ds.count_values("labels"),
        "objects": ds.count_values("categories"),
        "sort": np.asarray(ds.sort("score").positions).tolist(),
        "labels": ds.filter_labels("categories == 'bus'").categories.numpy(aslist=True),
    }
    _destroy(images)
    damaged = lc.load(str(tmp_path / "ds"), read_only=True)
    with pytest.raises(lc.DatasetCorruptError, match="images"):
        damaged.images.numpy(aslist=True)
    assert (
        np.asarray(damaged.filter("labels == 'dog' and score > 0.25").positions).tolist() == before["filter"]
    )
    assert damaged.count_values("labels") == before["count"] == {"cat": 160, "dog": 80}
    assert damaged.count_values("categories") == before["objects"]
    assert np.asarray(damaged.sort("score").positions).tolist() == before["sort"]
    view = damaged.filter_labels("categories == 'bus'")
    assert [a.tolist() for a in view.categories.numpy(aslist=True)] == [a.tolist() for a in before["labels"]]
    assert [len(b) for b in view.boxes.numpy(aslist=True)] == [len(c) for c in before["labels"]]


@pytest.mark.parametrize(
    ("tensor", "expression"),
    [("labels", "labels == 'cat'"), ("score", "score > 0.5"), ("categories", "any(categories == 'car')")],
)
def test_damage_to_a_named_tensor_is_a_corrupt_error(tmp_path: Path, tensor: str, expression: str) -> None:
    """A damaged chunk of a tensor the expression reads raises DatasetCorruptError naming that tensor."""
    ds = _detection(tmp_path / "ds")
    _destroy(chunk_files(ds, tensor))
    damaged = lc.load(str(tmp_path / "ds"), read_only=True)
    with pytest.raises(lc.DatasetCorruptError) as info:
        damaged.filter(expression)
    assert info.value.tensor == tensor
    with pytest.raises(lc.DatasetCorruptError):
        damaged.count_values(tensor)


def test_a_count_of_objects_reads_shapes_only(tmp_path: Path) -> None:
    """len() of a tensor of boxes is read from its samples' shapes: its destroyed data do not matter."""
    ds = _detection(tmp_path / "ds")
    want = np.asarray(ds.filter("len(boxes) >= 2").positions).tolist()
    _destroy(chunk_files(ds, "boxes"))
    damaged = lc.load(str(tmp_path / "ds"), read_only=True)
    assert np.asarray(damaged.filter("len(boxes) >= 2").positions).tolist() == want
    with pytest.raises(lc.DatasetCorruptError):
        damaged.filter("boxes[2] > 0")
