"""export_yolo writes what YOLO readers take: one row type per label file, crowd regions left out, multi-part
polygons joined into one outline, boxes cut to the image; and ingest_yolo reads its output back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.vision import merge_parts

yaml = pytest.importorskip("yaml")
mask_utils = pytest.importorskip("pycocotools.mask")


def _labels(path: Path) -> list[list[float]]:
    return [[float(t) for t in line.split()] for line in path.read_text().splitlines() if line.strip()]


def _area(outline: np.ndarray, height: int, width: int) -> int:
    """Pixels pycocotools fills for one polygon (as COCO tools rasterise it)."""
    rle = mask_utils.frPyObjects([outline.reshape(-1).tolist()], height, width)
    return int(mask_utils.area(mask_utils.merge(rle)))


def test_merge_parts_covers_the_parts_and_nothing_else() -> None:
    """Three disjoint parts joined into one outline fill the pixels the three fill (the bridges have no
    area), and its bounds are theirs."""
    parts = [
        np.array([[2.0, 2.0], [12.0, 2.0], [12.0, 10.0], [2.0, 10.0]]),
        np.array([[20.0, 5.0], [30.0, 5.0], [25.0, 15.0]]),
        np.array([[5.0, 20.0], [15.0, 20.0], [15.0, 28.0], [5.0, 28.0]]),
    ]
    outline = merge_parts(parts)
    joined = mask_utils.merge(mask_utils.frPyObjects([p.reshape(-1).tolist() for p in parts], 32, 40))
    assert _area(outline, 32, 40) == int(mask_utils.area(joined))
    np.testing.assert_array_equal(outline.min(axis=0), [2, 2])
    np.testing.assert_array_equal(outline.max(axis=0), [30, 28])
    assert all(any((outline == point).all(axis=1)) for p in parts for point in p)


def test_merge_parts_gives_one_part_back_as_it_is() -> None:
    """A one-part polygon is written exactly as stored."""
    part = np.array([[0.1, 0.2], [0.3, 0.2], [0.3, 0.4]])
    np.testing.assert_array_equal(merge_parts([part]), part)


def _boxes_dataset(path: Path, names: tuple[str, str] = ("a", "b")) -> lc.Dataset:
    ds = lc.empty(str(path))
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="xyxy")
        ds.create_tensor("labels", htype="class_label", class_names=list(names))
        ds.create_tensor("iscrowd", dtype="uint8")
    ds.append(
        {
            "images": np.zeros((20, 40, 3), np.uint8),
            # on the image; reaching 4 px past its right edge; wholly off it; a crowd region
            "boxes": [[4.0, 2.0, 12.0, 10.0], [30.0, 5.0, 44.0, 15.0], [50.0, 1.0, 60.0, 5.0], [0, 0, 8, 8]],
            "labels": [0, 1, 1, 0],
            "iscrowd": [0, 0, 0, 1],
        }
    )
    return ds


def test_export_yolo_cuts_boxes_to_the_image_and_leaves_out_what_is_not_there(tmp_path: Path) -> None:
    """A box past the image's edge is cut to it (not written as '1 1.1 ...', which YOLO readers and
    ingest_yolo refuse); one wholly off the image and a crowd region are left out, and the result says
    so."""
    result = _boxes_dataset(tmp_path / "ds").export_yolo(tmp_path / "yolo")
    assert (result.objects, result.clipped, result.outside_left_out, result.crowd_left_out) == (2, 1, 1, 1)
    lines = _labels(tmp_path / "yolo" / "labels" / "000000.txt")
    np.testing.assert_allclose(
        lines, [[0, 8 / 40, 6 / 20, 8 / 40, 8 / 20], [1, 35 / 40, 10 / 20, 10 / 40, 10 / 20]]
    )
    back = lc.ingest_yolo(tmp_path / "yolo", tmp_path / "back", progressbar=False)
    np.testing.assert_allclose(back.boxes[0].numpy(), np.array(lines)[:, 1:])
    assert back.labels[0].numpy().tolist() == [0, 1]


def test_yolo_round_trip_of_a_coco_ingest(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    """ingest_yolo reads export_yolo's output of a COCO ingest back: every non-crowd object with its class,
    its box (xywh pixels -> normalized cxcywh) and, where the file holds polygons, its outline."""
    images, annotations = coco_files
    coco = lc.ingest_coco(images, annotations, tmp_path / "coco-ds", masks=False, progressbar=False)
    coco.export_yolo(tmp_path / "yolo")
    back = lc.ingest_yolo(tmp_path / "yolo", tmp_path / "back", progressbar=False)
    assert back.file_name.text() == coco.file_name.text()
    assert back.labels.info.class_names == coco.categories.info.class_names
    for i in range(len(coco)):
        height, width = coco.images[i].shape[:2]
        keep = coco.iscrowd[i].numpy() == 0
        assert back.labels[i].numpy().tolist() == coco.categories[i].numpy()[keep].tolist()
        layout = lc.vision.BoxLayout.of(coco.boxes)
        expected = layout.convert(
            coco.boxes[i].numpy()[keep], lc.vision.BoxLayout("cxcywh", True), (height, width)
        )
        np.testing.assert_allclose(back.boxes[i].numpy(), expected.reshape(-1, 4), atol=1e-12)


def test_export_yolo_splits_keep_one_set_of_class_names(tmp_path: Path) -> None:
    """A split exported into a folder holding another split of other class names is refused, naming both,
    and the folder keeps what it held."""
    ds = _boxes_dataset(tmp_path / "ds")
    ds.export_yolo(tmp_path / "yolo", split="train")
    before = (tmp_path / "yolo" / "data.yaml").read_text()
    other = _boxes_dataset(tmp_path / "other", names=("x", "y"))
    with pytest.raises(
        lc.InvalidArgumentError, match=r"already holds the split\(s\) \['train'\].*\['x', 'y'\]"
    ):
        other.export_yolo(tmp_path / "yolo", split="val")
    assert (tmp_path / "yolo" / "data.yaml").read_text() == before
    assert not (tmp_path / "yolo" / "images" / "val").exists()


def test_export_yolo_refuses_a_split_that_leaves_the_folder(tmp_path: Path) -> None:
    """A split name climbing out of the folder is refused before anything is written."""
    with pytest.raises(lc.InvalidArgumentError, match=r"split '\.\./\.\./x'"):
        _boxes_dataset(tmp_path / "ds").export_yolo(tmp_path / "yolo", split="../../x")
    assert not (tmp_path / "x").exists()
