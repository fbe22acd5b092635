"""Arrays whose first dimension varies per sample (an image's boxes, labels, keypoints) are checked
joined, in one go, when many are written together: the values stored, and the error for a bad one,
are what checking each sample alone gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.specs import htype_declaration

RNG = np.random.default_rng(3)


def _boxes(k: int) -> np.ndarray:
    xy = RNG.uniform(0, 50, (k, 2))
    return np.concatenate([xy, xy + RNG.uniform(0, 20, (k, 2))], axis=1)


def _points(k: int) -> np.ndarray:
    out = RNG.uniform(0, 50, (k, 3, 3))
    out[..., 2] = RNG.integers(0, 3, (k, 3))
    return out


#: tensor options -> ragged samples (one per image, 0 to 4 rows each)
CASES: dict[str, tuple[dict[str, Any], list[np.ndarray]]] = {
    "generic_cast": ({"dtype": "int16"}, [np.arange(k, dtype=np.int64) - 2 for k in (3, 0, 1, 4)]),
    "generic_open": ({}, [np.full((k, 2), k, dtype=np.uint8) for k in (2, 1, 0, 3)]),
    "labels": (
        {"htype": "class_label", "class_names": ["a", "b", "c"]},
        [np.array([2, 0], np.uint32), np.zeros(0, np.uint32), np.array([1, 1, 2], np.uint32)],
    ),
    "boxes": ({"htype": "bbox", "dtype": "float32"}, [_boxes(k) for k in (2, 0, 1, 4)]),
    "boxes_xywh": (
        {"htype": "bbox", "format": "xywh", "normalized": True, "dtype": "float64"},
        [RNG.uniform(0, 0.5, (k, 4)) for k in (1, 3, 0)],
    ),
    "keypoints": (
        {"htype": "keypoints", "keypoint_names": ["a", "b", "c"], "dtype": "float64"},
        [_points(k) for k in (1, 0, 2, 3)],
    ),
}


def _one_by_one(options: dict[str, Any], samples: list[np.ndarray]) -> list[np.ndarray]:
    ds = lc.empty("mem://ragged-reference", overwrite=True)
    ds.create_tensor("t", **options)
    for s in samples:
        ds.t.append(s)
    return [ds.t[i].numpy() for i in range(len(ds.t))]


@pytest.mark.parametrize("case", sorted(CASES))
def test_extend_stores_what_appending_each_stores(case: str, tmp_path: Path) -> None:
    options, samples = CASES[case]
    expected = _one_by_one(options, samples)
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("t", **options)
    ds.t.extend(samples)
    back = lc.load(str(tmp_path / "ds"), read_only=True)
    assert len(back.t) == len(samples)
    for i, want in enumerate(expected):
        got = back.t[i].numpy()
        assert got.shape == want.shape
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


#: tensor options, good samples, the bad one put among them, and what is said about it
BAD: list[tuple[dict[str, Any], np.ndarray, str]] = [
    ({"htype": "bbox"}, np.array([[5.0, 0.0, 1.0, 1.0]]), "box 0 [5.0, 0.0, 1.0, 1.0] is not a 'xyxy' box"),
    (
        {"htype": "bbox"},
        np.array([[0.0, 0.0, np.inf, 1.0]]),
        "box coordinates must be finite numbers. Got inf.",
    ),
    (
        {"htype": "bbox", "format": "xywh", "normalized": True},
        np.array([[0.1, 0.1, 0.2, 0.2], [0.5, 0.5, 1.5, 0.2]]),
        "box 1 [0.5, 0.5, 1.5, 0.2] has coordinates outside 0..1",
    ),
    ({"htype": "class_label", "class_names": ["a", "b"]}, np.array([1, 2]), "class index 2 is out of range"),
    ({"dtype": "uint8"}, np.array([3, 300]), "value 300 does not fit dtype uint8"),
    (
        {"htype": "keypoints", "keypoint_names": ["a", "b", "c"]},
        np.array([[[1, 2, 2], [3, 4, 5], [0, 0, 0]]], np.float64),
        "visibility (the third value of a keypoint) is 0",
    ),
]


def _good(options: dict[str, Any], bad: np.ndarray) -> np.ndarray:
    """A valid sample of the same dtype and row shape as ``bad`` (so only its values are wrong)."""
    good = np.zeros((1, *bad.shape[1:]), dtype=bad.dtype)
    if htype_declaration(options.get("htype", "generic")).target == "boxes":
        good[:] = [0, 0, 0.1, 0.1]
    return good


@pytest.mark.parametrize(("options", "bad", "message"), BAD)
def test_a_bad_sample_among_many_is_refused_as_alone(
    options: dict[str, Any], bad: np.ndarray, message: str
) -> None:
    """Extending with a malformed sample among good ones raises the error appending it alone raises,
    and writes nothing."""
    alone = lc.empty("mem://ragged-bad-alone", overwrite=True)
    alone.create_tensor("t", **options)
    with pytest.raises(lc.InvalidSampleError) as single:
        alone.t.append(bad)
    ds = lc.empty("mem://ragged-bad", overwrite=True)
    ds.create_tensor("t", **options)
    good = _good(options, bad)
    with pytest.raises(lc.InvalidSampleError) as many:
        ds.t.extend([good, good[:0], bad, good])
    assert message in str(single.value)
    assert str(many.value) == str(single.value)
    assert len(ds.t) == 0


@lc.compute
def boxes_of(sample_in: Any, sample_out: Any) -> None:
    """Boxes of ``sample_in % 3`` rows; input 7 writes a box whose corners are swapped."""
    i = int(sample_in)
    boxes = np.tile([[1.0, 2.0, 3.0 + i, 4.0]], (i % 3, 1))
    if i == 7:
        boxes = np.array([[9.0, 2.0, 3.0, 4.0]])
    sample_out.boxes.append(boxes)
    sample_out.labels.append(np.full(i % 3, i % 2, dtype=np.int64))


@pytest.mark.parametrize("workers", [0, 2])
def test_an_eval_checks_ragged_outputs_and_blames_the_bad_input(workers: int, tmp_path: Path) -> None:
    """In an eval the joined check stores every value as it was written, and a bad box still names
    its own input (and, with ignore_errors, skips only it)."""

    def make(name: str) -> lc.Dataset:
        out = lc.empty(str(tmp_path / name), overwrite=True)
        out.create_tensor("boxes", htype="bbox", dtype="float32")
        out.create_tensor("labels", htype="class_label", class_names=["x", "y"])
        return out

    with pytest.raises(lc.TransformError, match=r"failed on data_in\[7\]") as info:
        boxes_of().eval(list(range(20)), make("fail"), num_workers=workers)
    assert isinstance(info.value.__cause__, lc.InvalidSampleError)
    assert "box 0 [9.0, 2.0, 3.0, 4.0] is not a 'xyxy' box" in str(info.value.__cause__)

    result = boxes_of().eval(list(range(20)), make("skip"), num_workers=workers, ignore_errors=True)
    assert result.failed_indices == [7]
    back = lc.load(str(tmp_path / "skip"), read_only=True)
    kept = [i for i in range(20) if i != 7]
    assert len(back.boxes) == len(kept)
    for row, i in enumerate(kept):
        np.testing.assert_array_equal(
            back.boxes[row].numpy(), np.tile([[1.0, 2.0, 3.0 + i, 4.0]], (i % 3, 1))
        )
        assert back.boxes[row].numpy().dtype == np.float32
        np.testing.assert_array_equal(back.labels[row].numpy(), np.full(i % 3, i % 2))


COCO_POLYGONS: list[Any] = [
    [
        [[0.0, 0.0, 4.0, 0.0, 4.0, 3.5]],
        [],
        [[1.0, 1.0, 2.0, 1.0, 2.0, 2.0, 1.0, 2.0], [5.0, 5.0, 6.0, 5.0, 6.0, 7.0]],
    ],
    [],
    [[[0.25, 0.5, 9.0, 9.0, 3.0, 1.0]]],
    [
        [[0, 0, 4, 0, 4, 3]],
        [[np.float32(1.5), 1.0, 2.0, 1.0, 2.0, 2.0]],
    ],  # ints, a numpy scalar: part by part
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_coco_polygons_round_trip(dtype: str, tmp_path: Path) -> None:
    """Polygons in COCO's layout (objects of flat [x1, y1, ...] lists) are stored as the points they
    name, whichever path checks them."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("p", htype="polygon", dtype=dtype)
    ds.p.extend(COCO_POLYGONS)
    back = lc.load(str(tmp_path / "ds"), read_only=True)
    for i, sample in enumerate(COCO_POLYGONS):
        got = back.p[i].numpy()
        assert len(got) == len(sample)
        for obj_got, obj in zip(got, sample, strict=True):
            assert len(obj_got) == len(obj)
            for part_got, part in zip(obj_got, obj, strict=True):
                assert part_got.dtype == np.dtype(dtype)
                np.testing.assert_array_equal(part_got, np.asarray(part, dtype=dtype).reshape(-1, 2))


BAD_POLYGONS = [
    ([[[0.0, 0.0, np.nan, 1.0, 2.0, 2.0]]], "polygon coordinates must be finite numbers. Got nan."),
    ([[[0.0, 0.0, 1.0, 1.0]]], "at least 3 (x, y) points"),
    ([[[0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0]]], "at least 3 (x, y) points"),
    ([[[0.0, 0.0, 1.0, 1.0, 2.0, "x"]]], "expected numbers"),
    ([[[0.0, 0.0, 1.0, 1.0, 2.0, None]]], "expected numbers"),
    ([[[0, 0, 1, 1, 2, 2**64]]], "expected numbers"),
    ([5.0], "each object as a polygon or a list of polygons. Got 5.0."),
]


@pytest.mark.parametrize(("value", "message"), BAD_POLYGONS)
def test_bad_coco_polygons_are_refused(value: Any, message: str) -> None:
    ds = lc.empty("mem://bad-coco-polygons", overwrite=True)
    ds.create_tensor("p", htype="polygon", dtype="float64")
    with pytest.raises(lc.InvalidSampleError) as info:
        ds.p.append(value)
    assert message in str(info.value)
    assert len(ds.p) == 0
