"""Detection and segmentation htypes: bbox, binary_mask, segment_mask, keypoints, polygon.

Each round-trips exactly (through a reopened local dataset and through an eval with worker processes),
and malformed samples are refused with messages that say what is wrong and what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

RNG = np.random.default_rng(0)
BOXES = [
    np.array([[1.5, 2.0, 30.25, 40.0], [0.0, 0.0, 5.0, 5.0]], dtype=np.float32),
    np.zeros((0, 4), dtype=np.float32),
    np.array([[10.0, 10.0, 10.0, 12.0]], dtype=np.float32),
]
MASKS = [RNG.random((6, 7, 2)) > 0.5, np.zeros((6, 7, 0), bool), RNG.random((6, 7, 1)) > 0.3]
SEGMENTS = [RNG.integers(0, 3, (6, 7)), np.zeros((4, 4), np.int64), RNG.integers(0, 3, (5, 2))]
KEYPOINTS = [
    np.array([[[1, 2, 2], [3, 4, 1], [0, 0, 0]]], dtype=np.float32),
    np.zeros((0, 3, 3), np.float32),
    np.array([[[5.5, 6.5, 2], [7, 8, 2], [9, 10, 1]], [[0, 0, 0], [1, 1, 2], [2, 2, 2]]], np.float32),
]
POLYGONS = [
    [[np.array([[0.0, 0.0], [4.0, 0.0], [4.0, 3.5]])]],
    [[]],
    [
        [np.array([[1.0, 1.0], [2.0, 1.0], [2.0, 2.0], [1.0, 2.0]]), np.array([[5.0, 5.0], [6, 5], [6, 7]])],
        [np.array([[0.25, 0.5], [9.0, 9.0], [3.0, 1.0]])],
    ],
]


def _make(path: str) -> lc.Dataset:
    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("boxes", htype="bbox", format="xywh")
        ds.create_tensor("masks", htype="binary_mask")
        ds.create_tensor("segments", htype="segment_mask", class_names=["bg", "road", "car"])
        ds.create_tensor("keypoints", htype="keypoints", keypoint_names=["a", "b", "c"], skeleton=[[1, 2]])
        ds.create_tensor("polygons", htype="polygon", dtype="float64")
    return ds


def _check(ds: Any) -> None:
    assert len(ds) == 3
    for i in range(3):
        np.testing.assert_array_equal(ds.boxes[i].numpy(), BOXES[i])
        assert ds.boxes[i].numpy().shape == BOXES[i].shape
        np.testing.assert_array_equal(ds.masks[i].numpy(), MASKS[i])
        assert ds.masks[i].numpy().dtype == np.bool_
        np.testing.assert_array_equal(ds.segments[i].numpy(), SEGMENTS[i])
        np.testing.assert_array_equal(ds.keypoints[i].numpy(), KEYPOINTS[i])
        got = ds.polygons[i].numpy()
        assert len(got) == len(POLYGONS[i])
        for got_obj, obj in zip(got, POLYGONS[i], strict=True):
            assert len(got_obj) == len(obj)
            for a, b in zip(got_obj, obj, strict=True):
                assert a.dtype == np.float64
                np.testing.assert_array_equal(a, b)
    assert ds.boxes.info == {"format": "xywh", "normalized": False}
    assert ds.segments.info.class_names == ["bg", "road", "car"]
    assert ds.keypoints.info.keypoint_names == ["a", "b", "c"]
    assert ds.keypoints.info.skeleton == [[1, 2]]
    assert ds.masks.dtype == np.bool_
    assert ds.segments.dtype == np.uint32
    assert ds.boxes.shape == (3, None, 4)


def test_detection_htypes_round_trip_through_a_reopened_dataset(tmp_path: Path) -> None:
    """Every sample of every detection htype reads back exactly after reopening the dataset, and after
    compact()."""
    path = str(tmp_path / "det")
    ds = _make(path)
    ds.extend(
        {"boxes": BOXES, "masks": MASKS, "segments": SEGMENTS, "keypoints": KEYPOINTS, "polygons": POLYGONS}
    )
    _check(lc.load(path))
    lc.load(path).compact()  # rewritten into one run per tensor: the same samples
    _check(lc.load(path))


def copy_targets(sample_in: Any, sample_out: Any) -> None:
    """Copy every target of a row (runs in worker processes); polygons are lists, read with aslist=True."""
    sample_out.append({name: sample_in[name].numpy(aslist=True) for name in sample_in.tensors})


def test_detection_htypes_round_trip_through_an_eval_with_workers(tmp_path: Path) -> None:
    """An eval with 2 worker processes copies boxes, masks, keypoints and polygons unchanged."""
    src = _make(str(tmp_path / "src"))
    src.extend(
        {"boxes": BOXES, "masks": MASKS, "segments": SEGMENTS, "keypoints": KEYPOINTS, "polygons": POLYGONS}
    )
    out = lc.like(str(tmp_path / "out"), src)
    lc.compute(copy_targets)().eval(src, out, num_workers=2, progressbar=False)
    _check(lc.load(str(tmp_path / "out")))


def test_flat_coco_keypoints_and_polygons_are_read_as_points(tmp_path: Path) -> None:
    """COCO's flat [x, y, v, ...] keypoints become (k, 3) and flat polygons (m, 2); 0/1 masks become bool."""
    ds = lc.empty("mem://flat-coco", overwrite=True)
    ds.create_tensor("kp", htype="keypoints")
    ds.create_tensor("poly", htype="polygon")
    ds.create_tensor("mask", htype="binary_mask")
    mask = np.eye(3, dtype=np.uint8)
    ds.append({"kp": [10, 20, 2, 30, 40, 1], "poly": [[[0, 0, 4, 0, 4, 3]]], "mask": mask})
    assert ds.kp[0].numpy().tolist() == [[10, 20, 2], [30, 40, 1]]
    (obj,) = ds.poly[0].numpy()
    assert [p.tolist() for p in obj] == [[[0, 0], [4, 0], [4, 3]]]
    assert ds.mask[0].numpy().tolist() == np.eye(3, dtype=bool).tolist()


def test_masks_are_stored_compressed(tmp_path: Path) -> None:
    """A mostly empty binary mask takes a small fraction of its raw size on disk."""
    path = tmp_path / "masks"
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("masks", htype="binary_mask")
    masks = np.zeros((8, 256, 256), dtype=bool)
    masks[:, 40:90, 60:120] = True
    ds.masks.extend(list(masks))
    on_disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert on_disk < masks.nbytes / 20


BAD_SAMPLES = [
    ("bbox", {}, [1.0, 2.0, 3.0, 4.0], "shape (k, 4), one row per box (k may be 0). Got shape (4,); for one"),
    ("bbox", {}, [[5.0, 0.0, 1.0, 1.0]], "box 0 [5.0, 0.0, 1.0, 1.0] is not a 'xyxy' box: expected x2 >= x1"),
    ("bbox", {"format": "xywh"}, [[0, 0, -1, 2]], "is not a 'xywh' box: expected width and height >= 0"),
    ("bbox", {"format": "cxcywh", "normalized": True}, [[0.5, 0.5, 1.5, 0.2]], "outside 0..1"),
    ("bbox", {}, [[0, 0, np.nan, 1]], "box coordinates must be finite numbers. Got nan."),
    ("bbox", {}, [["a", "b", "c", "d"]], "expected numbers"),
    ("binary_mask", {}, np.full((2, 2), 255), "holds True/False (or 0/1). Got dtype int64 with value 255"),
    ("binary_mask", {}, np.zeros((2, 2), np.float32), "threshold it first, e.g. mask > 0"),
    ("binary_mask", {}, np.zeros(4, bool), "shape HxW, or HxWxK for K objects. Got shape (4,)"),
    ("segment_mask", {"class_names": ["bg", "car"]}, np.full((2, 2), 2), "class index 2 is out of range"),
    ("segment_mask", {}, np.full((2, 2), -1), "class ids are >= 0. Got -1."),
    ("segment_mask", {}, np.zeros((2, 2), np.float32), "expected integer class ids"),
    ("segment_mask", {}, np.zeros((2, 2, 3), np.int64), "shape HxW (a class id per pixel)"),
    ("keypoints", {}, [[1, 2]], "rows of (x, y, visibility)"),
    ("keypoints", {}, [[1, 2, 3]], "visibility (the third value of a keypoint) is 0"),
    ("keypoints", {"keypoint_names": ["a", "b"]}, [[1, 2, 2]], "expected 2 keypoints per object"),
    ("polygon", {}, [[[0, 0], [1, 1]]], "at least 3 (x, y) points"),
    ("polygon", {}, [5], "each object as a polygon or a list of polygons. Got 5."),
    ("polygon", {}, 5, "expected a list of polygons (one per object). Got int."),
]


@pytest.mark.parametrize(("htype", "options", "value", "message"), BAD_SAMPLES)
def test_malformed_samples_are_refused(htype: str, options: dict[str, Any], value: Any, message: str) -> None:
    """A malformed box, mask, keypoint set or polygon raises InvalidSampleError naming the tensor and the
    problem, and nothing is written."""
    ds = lc.empty("mem://bad-targets", overwrite=True)
    ds.create_tensor("t", htype=htype, **options)
    with pytest.raises(lc.InvalidSampleError) as info:
        ds.t.append(value)
    assert message in str(info.value)
    assert str(info.value).startswith("Cannot store sample in tensor 't': ")
    assert info.value.tensor == "t"
    assert len(ds.t) == 0


BAD_INFO = [
    ("bbox", {"format": "xyz"}, "format must be one of ['xyxy', 'xywh', 'cxcywh']. Got 'xyz'."),
    ("bbox", {"normalized": "yes"}, "normalized must be True (0..1 fractions of the image size)"),
    ("keypoints", {"keypoint_names": ["a", "a"]}, "keypoint_names must be a list of distinct strings"),
    ("keypoints", {"keypoint_names": ["a", "b"], "skeleton": [[1, 3]]}, "1-based keypoint numbers (1..2)"),
    ("bbox", {"class_names": ["a"]}, "class_names is for htypes ['class_label', 'segment_mask']"),
    ("binary_mask", {"dtype": "uint8"}, "binary_mask tensor 't' must have dtype bool. Got uint8."),
    ("segment_mask", {"dtype": "float32"}, "needs an integer dtype (class ids). Got float32."),
]


@pytest.mark.parametrize(("htype", "options", "message"), BAD_INFO)
def test_bad_tensor_options_are_refused(htype: str, options: dict[str, Any], message: str) -> None:
    """create_tensor refuses an unknown box format, bad keypoint names or skeleton, and wrong dtypes."""
    ds = lc.empty("mem://bad-target-info", overwrite=True)
    with pytest.raises(lc.InvalidArgumentError) as info:
        ds.create_tensor("t", htype=htype, **options)
    assert message in str(info.value)
    assert "t" not in ds.tensors


def test_like_keeps_formats_and_class_names() -> None:
    """lc.like copies a bbox tensor's format and a segment_mask tensor's class names."""
    ds = lc.empty("mem://like-targets", overwrite=True)
    ds.create_tensor("boxes", htype="bbox", format="cxcywh", normalized=True)
    ds.create_tensor("seg", htype="segment_mask", class_names=["bg", "x"])
    out = lc.like("mem://like-targets-out", ds, overwrite=True)
    assert out.boxes.info == {"format": "cxcywh", "normalized": True}
    assert out.seg.info.class_names == ["bg", "x"]
