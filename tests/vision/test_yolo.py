"""YOLO in and out: the images/ + labels/ + data.yaml layout, ingested and written back exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.vision.conftest import YOLO_LABELS

yaml = pytest.importorskip("yaml")


def _labels(path: Path) -> list[list[float]]:
    """A label file's lines as numbers (class first), as a YOLO reader parses them."""
    if not path.exists():
        return []
    return [[float(t) for t in line.split()] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_yolo_round_trip_is_exact(yolo_folder: Path, tmp_path: Path, num_workers: int) -> None:
    """Every label line (boxes and polygons, same class, same floats), data.yaml's names and every image
    file are the same after ingest + export; a file mixing a polygon line with box lines is written as
    box lines (one row type per file, as ultralytics reads them), the polygon as its bounds."""
    ds = lc.ingest_yolo(yolo_folder, tmp_path / "ds", num_workers=num_workers, progressbar=False)
    out = tmp_path / "export"
    ds.export_yolo(out)
    assert yaml.safe_load((out / "data.yaml").read_text())["names"] == ["car", "person", "dog"]
    for i, name in enumerate(YOLO_LABELS):
        label = Path("labels") / name.replace(".jpg", ".txt")
        expected = _labels(yolo_folder / label)
        if name == "val/d.jpg":  # a polygon line beside a box line
            rows = zip(ds.labels[i].numpy().tolist(), ds.boxes[i].numpy().tolist(), strict=True)
            expected = [[c, *b] for c, b in rows]
        assert _labels(out / label) == expected, name
        assert (out / "images" / name).read_bytes() == (yolo_folder / "images" / name).read_bytes()


def test_yolo_ingest_columns(yolo_folder: Path, tmp_path: Path) -> None:
    """Boxes are normalized cxcywh as in the files; a polygon line also gives its bounds as a box."""
    ds = lc.ingest_yolo(yolo_folder, tmp_path / "ds", progressbar=False)
    assert ds.file_name.text() == list(YOLO_LABELS)
    assert ds.labels.info.class_names == ["car", "person", "dog"]
    assert ds.boxes.info == {"format": "cxcywh", "normalized": True}
    assert ds.boxes[1].numpy().tolist() == [[0.481719, 0.634028, 0.690625, 0.713278]]
    assert ds.boxes[2].numpy().shape == (0, 4)  # no label file
    np.testing.assert_allclose(ds.boxes[3].numpy(), [[0.25, 0.3, 0.3, 0.4], [0.75, 0.25, 0.5, 0.5]])
    assert ds.labels[3].numpy().tolist() == [0, 2]
    (poly,), empty = ds.polygons[3].numpy()
    assert poly.tolist() == [[0.1, 0.1], [0.4, 0.1], [0.4, 0.5], [0.1, 0.5]]
    assert empty == []


def test_ingest_yolo_split(yolo_folder: Path, tmp_path: Path) -> None:
    """split= reads one sub-folder of images/ (and the same one of labels/)."""
    ds = lc.ingest_yolo(yolo_folder, tmp_path / "ds", split="val", progressbar=False)
    assert ds.file_name.text() == ["d.jpg"]
    assert ds.labels[0].numpy().tolist() == [0, 2]


def test_ingest_yolo_names_a_bad_label_line(yolo_folder: Path, tmp_path: Path) -> None:
    """A label line with an unknown class is refused, naming the file and line; nothing is left behind."""
    (yolo_folder / "labels" / "train" / "b.txt").write_text("0 0.5 0.5 0.1 0.1\n7 0.5 0.5 0.1 0.1\n")
    with pytest.raises(lc.InvalidSampleError, match=r"b\.txt line 2: expected 'class cx cy w h'") as info:
        lc.ingest_yolo(yolo_folder, tmp_path / "ds", progressbar=False)
    assert "with class in 0..2 (data.yaml names). Got '7 0.5 0.5 0.1 0.1'" in str(info.value)
    assert not lc.exists(str(tmp_path / "ds"))


def test_ingest_yolo_needs_data_yaml(tmp_path: Path) -> None:
    """A folder without data.yaml is refused with the layout it expects."""
    (tmp_path / "nothing").mkdir()
    with pytest.raises(lc.InvalidArgumentError, match=r"No data.yaml in .*images/ and labels/"):
        lc.ingest_yolo(tmp_path / "nothing", tmp_path / "ds", progressbar=False)


def test_export_yolo_converts_coco_boxes(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    """A COCO-ingested dataset (xywh pixel boxes, 'categories') exports normalized cxcywh YOLO labels."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", masks=False, progressbar=False)
    ds.export_yolo(tmp_path / "yolo")
    lines = _labels(tmp_path / "yolo" / "labels" / "a.txt")
    # image a.jpg is 64 wide, 48 high; box 1 is car [30, 4, 20, 12] (xywh) -> class 1, centre (40, 10)
    # it has a polygon of two parts, (30,4) (40,4) (40,10) and (42,8) (50,8) (50,16) (42,16), joined into
    # one outline at their closest points, (40,10) and (42,8), by a bridge walked there and back
    outline = [(30, 4), (40, 4), (40, 10), (42, 8), (50, 8), (50, 16), (42, 16), (42, 8), (40, 10), (30, 4)]
    assert lines[1] == [1, *(v for x, y in outline for v in (x / 64, y / 48))]
    assert lines[0][0] == 0
    assert yaml.safe_load((tmp_path / "yolo" / "data.yaml").read_text())["names"] == ["person", "car", "dog"]
