"""augment reads the boxes' layout from their tensor: a pipeline that says another one is refused naming
both, edge boxes survive torchvision's resizes, and exports read the layouts of boxes and polygons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

pytestmark = pytest.mark.needs("torchvision")
A = pytest.importorskip("albumentations")
torch = pytest.importorskip("torch")
pytest.importorskip(
    "torchvision", reason="needs torchvision, which only the full lane installs (make test-full)"
)
from torchvision.transforms import v2  # noqa: E402


def _one_box(
    path: Path, box: list[float], fmt: str = "xywh", size: tuple[int, int] = (60, 100)
) -> lc.Dataset:
    """One ``size`` image with one box (layout ``fmt`` in pixels), a label, and a keypoint group."""
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format=fmt)
        ds.create_tensor("labels", htype="class_label", class_names=["a", "b"])
    image = np.arange(size[0] * size[1] * 3, dtype=np.uint8).reshape(*size, 3)
    ds.append({"images": image, "boxes": [box], "labels": [1]})
    return ds


@lc.compute
def moved(sample_in: Any, sample_out: Any, rng: np.random.Generator, pipeline: Any) -> None:
    """``pipeline`` applied to the row's image, boxes and labels."""
    sample_out.append(lc.vision.augment(pipeline, sample_in, rng, boxes="boxes", objects=["labels"]))


def _run(ds: lc.Dataset, pipeline: Any, tmp_path: Path) -> lc.Dataset:
    out = lc.like(str(tmp_path / "out"), ds, overwrite=True)
    moved(pipeline=pipeline).eval(ds, out, seed=0, progressbar=False)
    return out


FLIPS = {
    "torchvision": lambda: v2.RandomHorizontalFlip(p=1),
    "torchvision-wrapped": lambda: lc.vision.TorchVision(v2.RandomHorizontalFlip(p=1)),
    "albumentations": lambda: A.Compose([A.HorizontalFlip(p=1)], bbox_params=A.BboxParams(format="coco")),
    "albumentations-label-fields": lambda: A.Compose(
        [A.HorizontalFlip(p=1)], bbox_params=A.BboxParams(format="coco", label_fields=["labels"])
    ),
}


@pytest.mark.parametrize("library", sorted(FLIPS))
def test_a_flip_moves_xywh_boxes_in_their_own_layout(library: str, tmp_path: Path) -> None:
    """A horizontal flip of an xywh box on a 100-px wide image moves x to 100 - x - w, whatever the
    library, with the layout read from the tensor (torchvision needs no box_format; albumentations'
    label_fields, its usual form, work)."""
    ds = _one_box(tmp_path / "ds", [10.0, 20.0, 30.0, 40.0])
    out = _run(ds, FLIPS[library](), tmp_path)
    # albumentations computes in normalized float32: its own rounding, a few millionths of a pixel
    np.testing.assert_allclose(out.boxes[0].numpy(), [[60.0, 20.0, 30.0, 40.0]], rtol=0, atol=1e-5)
    assert out.labels[0].numpy().tolist() == [1]
    np.testing.assert_array_equal(out.images[0].numpy(), ds.images[0].numpy()[:, ::-1])


MISMATCHES = {
    "torchvision": (
        lambda: lc.vision.TorchVision(v2.RandomHorizontalFlip(p=1), box_format="xyxy"),
        r"the pipeline says the boxes are 'xyxy' in pixels, but the bbox tensor 'boxes' holds them "
        r"'xywh' in pixels",
    ),
    "torchvision-normalized": (
        lambda: lc.vision.TorchVision(v2.RandomHorizontalFlip(p=1), box_format="xywh", normalized=True),
        r"says the boxes are 'xywh' normalized, but the bbox tensor 'boxes' holds them 'xywh' in pixels",
    ),
    "albumentations": (
        lambda: A.Compose([A.HorizontalFlip(p=1)], bbox_params=A.BboxParams(format="pascal_voc")),
        r"BboxParams\(format='pascal_voc'\) says the boxes are 'xyxy' in pixels, but the bbox tensor "
        r"'boxes' holds them 'xywh' in pixels.*use BboxParams\(format='coco'\)",
    ),
}


@pytest.mark.parametrize("library", sorted(MISMATCHES))
def test_a_pipeline_saying_another_layout_is_refused_naming_both(library: str, tmp_path: Path) -> None:
    """A pipeline that says the boxes are in another layout than their tensor's is refused before it
    runs, naming both layouts, and nothing is stored (today: a box reaching x=160 on a 100-px image)."""
    make, message = MISMATCHES[library]
    ds = _one_box(tmp_path / "ds", [10.0, 20.0, 30.0, 40.0])
    out = lc.like(str(tmp_path / "out"), ds, overwrite=True)
    with pytest.raises(lc.TransformError, match=message) as caught:
        moved(pipeline=make()).eval(ds, out, seed=0, progressbar=False)
    assert isinstance(caught.value.__cause__, lc.InvalidArgumentError)
    assert len(out) == 0


def test_albumentations_has_no_format_for_some_layouts(tmp_path: Path) -> None:
    """Boxes in a layout albumentations cannot take (cxcywh in pixels) are refused with what to do."""
    ds = _one_box(tmp_path / "ds", [25.0, 40.0, 30.0, 40.0], fmt="cxcywh")
    out = lc.like(str(tmp_path / "out"), ds, overwrite=True)
    pipeline = A.Compose([A.HorizontalFlip(p=1)], bbox_params=A.BboxParams(format="yolo"))
    with pytest.raises(lc.TransformError, match=r"albumentations has no format for that layout"):
        moved(pipeline=pipeline).eval(ds, out, seed=0, progressbar=False)


def test_torchvision_moves_boxes_of_a_layout_albumentations_lacks(tmp_path: Path) -> None:
    """cxcywh pixel boxes flip with torchvision, read and written back in their layout."""
    ds = _one_box(tmp_path / "ds", [25.0, 40.0, 30.0, 40.0], fmt="cxcywh")
    out = _run(ds, v2.RandomHorizontalFlip(p=1), tmp_path)
    assert out.boxes[0].numpy().tolist() == [[75.0, 40.0, 30.0, 40.0]]


EDGE = v2.Compose([v2.Resize((64, 80)), v2.SanitizeBoundingBoxes()])  # 0.8 of an 80 x 100 image


def test_a_box_on_the_edge_survives_a_resize_by_0_8(tmp_path: Path) -> None:
    """A box ending on the image's bottom edge keeps its label after a 0.8 resize and a sanitize: it
    reaches torchvision as float32, where 80 * 0.8 is 64 exactly (in float64 it is 64.00000000000001,
    past the 64-px canvas, and the box was dropped with its label)."""
    ds = _one_box(tmp_path / "ds", [10.0, 60.0, 20.0, 20.0], size=(80, 100))
    out = _run(ds, EDGE, tmp_path)
    assert out.boxes[0].numpy().tolist() == [[8.0, 48.0, 16.0, 16.0]]
    assert out.labels[0].numpy().tolist() == [1]
    assert out.images[0].numpy().shape == (64, 80, 3)


def test_sample_in_values_answer_their_tensors_htype_and_info(tmp_path: Path) -> None:
    """In an eval and in a loader transform, sample_in values read from a dataset answer .htype, .info and
    .name; the info is the caller's own copy."""
    ds = _one_box(tmp_path / "ds", [10.0, 20.0, 30.0, 40.0])
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("seen", htype="json")

    @lc.compute
    def look(sample_in: Any, sample_out: Any) -> None:
        boxes = sample_in["boxes"]
        info = boxes.info
        info["format"] = "changed"
        sample_out.append({"seen": [boxes.name, boxes.htype, sample_in.boxes.info, sample_in.labels.htype]})

    look().eval(ds, out, progressbar=False)
    expected = ["boxes", "bbox", {"format": "xywh", "normalized": False}, "class_label"]
    assert out.seen[0].data() == expected
    loader = ds.pytorch(1, tensors=["boxes", "labels"], transform=look(), collate_fn=lambda b: b)
    assert [batch["seen"][0] for batch in loader] == [expected]


def test_export_coco_scales_normalized_polygons_to_pixels(tmp_path: Path) -> None:
    """A normalized polygon (a YOLO segmentation ingest's) is written to COCO in pixels of its image: a
    400-pixel object stays 400 pixels."""
    mask_utils = pytest.importorskip("pycocotools.mask")
    ds = lc.empty(str(tmp_path / "ds"))
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="cxcywh", normalized=True)
        ds.create_tensor("labels", htype="class_label", class_names=["thing"])
        ds.create_tensor("polygons", htype="polygon", dtype="float64", normalized=True)
    square = [[0.1, 0.2], [0.3, 0.2], [0.3, 0.6], [0.1, 0.6]]  # 20 x 20 pixels on a 50 x 100 image
    ds.append(
        {
            "images": np.zeros((50, 100, 3), np.uint8),
            "boxes": [[0.2, 0.4, 0.2, 0.4]],
            "labels": [0],
            "polygons": [[square]],
        }
    )
    ds.rename_tensor("labels", "categories")
    coco = ds.export_coco(tmp_path / "out.json")
    (ann,) = coco["annotations"]
    np.testing.assert_allclose(ann["segmentation"], [[10, 10, 30, 10, 30, 30, 10, 30]])
    np.testing.assert_allclose(ann["bbox"], [10, 10, 20, 20])
    rle = mask_utils.frPyObjects(ann["segmentation"], 50, 100)
    assert int(mask_utils.area(mask_utils.merge(rle))) == 400
