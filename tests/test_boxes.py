"""BoxLayout: a bbox tensor's layout as a value, with its checks and conversions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.boxes import BBOX_FORMATS, BoxLayout

LAYOUTS = [BoxLayout(f, n) for f, n in itertools.product(BBOX_FORMATS, (False, True))]
CANVAS = (50, 80)  # height, width
XYXY = np.array([[8.0, 5.0, 40.0, 45.0], [0.0, 0.0, 80.0, 50.0], [10.0, 10.0, 10.0, 10.0]])


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(LAYOUTS, LAYOUTS)))
def test_convert_between_every_pair_of_layouts(src: BoxLayout, dst: BoxLayout) -> None:
    """Boxes written in any layout convert to any other and back to the same numbers."""
    pixels = BoxLayout("xyxy")
    boxes = pixels.convert(XYXY, src, CANVAS)
    there = src.convert(boxes, dst, CANVAS)
    np.testing.assert_allclose(dst.convert(there, pixels, CANVAS), XYXY, atol=1e-12)
    np.testing.assert_allclose(dst.convert(there, src, CANVAS), boxes, atol=1e-12)


def test_convert_to_the_same_layout_is_untouched() -> None:
    """The same layout gives the very array back: no arithmetic, so no rounding."""
    boxes = np.array([[0.1, 0.2, 0.30000000000000004, 0.4]])
    assert BoxLayout("cxcywh", True).convert(boxes, BoxLayout("cxcywh", True)) is boxes


def test_convert_needs_the_canvas_to_change_normalization() -> None:
    """Normalized to pixels without the image's size is refused with the fix."""
    with pytest.raises(
        lc.InvalidArgumentError, match=r"needs the image's size: pass canvas=\(height, width\)"
    ):
        BoxLayout("xywh", True).convert(np.zeros((1, 4)), BoxLayout("xywh"))


def test_layout_of_a_tensor_is_its_info(tmp_path) -> None:
    """BoxLayout.of reads a bbox tensor's info, whole or one row; another htype is refused by name."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("boxes", htype="bbox", format="cxcywh", normalized=True)
    ds.create_tensor("labels", htype="class_label")
    ds.append({"boxes": [[0.5, 0.5, 0.2, 0.2]], "labels": [0]})
    assert BoxLayout.of(ds.boxes) == BoxLayout.of(ds[0]["boxes"]) == BoxLayout("cxcywh", True)
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Expected a bbox tensor.*'labels' of htype 'class_label'"
    ):
        BoxLayout.of(ds.labels)


@pytest.mark.parametrize(
    ("fmt", "normalized", "message"),
    [
        ("xyz", False, "format must be one of"),
        ("xyxy", 1, "normalized must be True"),
        (["xyxy"], False, "format"),
    ],
)
def test_layout_refuses_what_is_not_one(fmt: object, normalized: object, message: str) -> None:
    """A format outside the three, a normalized that is not a bool (1 included), or a list, is refused."""
    with pytest.raises(lc.InvalidArgumentError, match=message):
        BoxLayout.parse({"format": fmt, "normalized": normalized}, "t")
    with pytest.raises(lc.InvalidArgumentError, match=message):
        BoxLayout(fmt, normalized)  # type: ignore[arg-type]


def test_check_against_the_canvas() -> None:
    """With a canvas, boxes on the image pass (rounding of a conversion included) and a box past its edge
    is refused, naming the box, the layout and the image size."""
    coco = BoxLayout("xywh")
    coco.check(np.array([[0.0, 0.0, 80.0, 50.00000000000001]]), "boxes", canvas=CANVAS)
    with pytest.raises(
        lc.InvalidSampleError, match=r"box 1 \[70.0, 20.0, 20.0, 10.0\] \('xywh' in pixels\) "
    ):
        coco.check(np.array([[1.0, 2.0, 3.0, 4.0], [70.0, 20.0, 20.0, 10.0]]), "boxes", canvas=CANVAS)


def test_clip_cuts_boxes_to_the_image() -> None:
    """clip keeps a box's part on the image, in the layout it was given in."""
    yolo = BoxLayout("cxcywh", True)
    pixels = BoxLayout("xyxy")
    boxes = pixels.convert(np.array([[-10.0, 5.0, 30.0, 60.0]]), BoxLayout("cxcywh"), CANVAS)
    clipped = BoxLayout("cxcywh").clip(boxes, CANVAS)
    np.testing.assert_allclose(BoxLayout("cxcywh").convert(clipped, pixels), [[0.0, 5.0, 30.0, 50.0]])
    assert yolo.clip(np.array([[0.5, 0.5, 0.2, 0.2]]), CANVAS).tolist() == [[0.5, 0.5, 0.2, 0.2]]
