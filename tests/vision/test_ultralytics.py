"""ultralytics, the field's YOLO trainer, reads export_yolo's folder as written: its data.yaml check passes
from any working directory and its dataset loads every non-crowd object of every image, label by label.

ultralytics runs in a child process whose settings folder is in the test's tmp_path and which is told
never to go online (YOLO_CONFIG_DIR, YOLO_OFFLINE): it writes nothing outside tmp_path and downloads
nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.vision.conftest import SIZES, coco_document

pytestmark = pytest.mark.needs("ultralytics")
# Only looked up, never imported here: importing ultralytics patches Pillow for the rest of the session
# (an unreadable image's error then names pi_heif). It runs in the child processes below.
if importlib.util.find_spec("ultralytics") is None:
    pytest.skip(
        "needs ultralytics, which only the full lane installs (make test-full)", allow_module_level=True
    )

_READ = """
import json, sys
from ultralytics.data.utils import check_det_dataset
from ultralytics.data import YOLODataset

yaml_path, task = sys.argv[1:3]
data = check_det_dataset(yaml_path, autodownload=False)
dataset = YOLODataset(img_path=data["train"], data=data, task=task, augment=False, imgsz=64)
labels = [
    {
        "file": label["im_file"],
        "cls": label["cls"].reshape(-1).tolist(),
        "boxes": label["bboxes"].tolist(),
        "segments": len(label["segments"]),
        "keypoints": None if label.get("keypoints") is None else label["keypoints"].tolist(),
    }
    for label in dataset.labels
]
keys = ("train", "val", "names", "kpt_shape", "flip_idx")
json.dump({**{k: data.get(k) for k in keys}, "labels": labels}, sys.stdout)
"""


def _ultralytics(data_yaml: Path, task: str, tmp_path: Path) -> dict[str, Any]:
    """What ultralytics makes of an exported folder, read in a child process run from another folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "YOLO_CONFIG_DIR": str(tmp_path / "ultralytics-settings"),
        "YOLO_OFFLINE": "1",
        "YOLO_VERBOSE": "False",
    }
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(data_yaml), task],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "ultralytics-settings").is_dir()  # its settings went where it was told
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _expected(image_sizes: dict[str, tuple[int, int]]) -> dict[str, list[tuple[int, list[float]]]]:
    """Per image file, its non-crowd objects as (class index, normalized cxcywh box) from the COCO file."""
    doc = coco_document()
    order = {c["id"]: k for k, c in enumerate(sorted(doc["categories"], key=lambda c: c["id"]))}
    names = {img["id"]: img["file_name"] for img in doc["images"]}
    out: dict[str, list[tuple[int, list[float]]]] = {name: [] for name in image_sizes}
    for ann in doc["annotations"]:
        if ann["iscrowd"]:
            continue
        name = names[ann["image_id"]]
        height, width = image_sizes[name]
        x, y, w, h = ann["bbox"]
        box = [(x + w / 2) / width, (y + h / 2) / height, w / width, h / height]
        out[name].append((order[ann["category_id"]], box))
    return out


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_ultralytics_reads_every_non_crowd_object_of_a_coco_export(
    coco_files: tuple[Path, Path], tmp_path: Path, task: str
) -> None:
    """A COCO folder with polygons (one of two parts) and crowd RLE, ingested and exported to YOLO, passes
    ultralytics' check_det_dataset run from another folder; its YOLODataset holds every image and, for
    each, every non-crowd object with its class and a box within 1e-3 of the COCO file's, as polygons
    where every object of the image has one."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    result = ds.export_yolo(tmp_path / "yolo")
    assert (result.images, result.objects, result.crowd_left_out, result.outside_left_out) == (4, 3, 2, 0)

    read = _ultralytics(tmp_path / "yolo" / "data.yaml", task, tmp_path)
    assert read["train"] == read["val"] == str((tmp_path / "yolo" / "images").resolve())
    assert read["names"] == {"0": "person", "1": "car", "2": "dog"}
    root = (tmp_path / "yolo" / "images").resolve()
    got = {str(Path(label["file"]).relative_to(root)): label for label in read["labels"]}
    expected = _expected(SIZES)
    assert sorted(got) == sorted(expected)
    for name, objects in expected.items():
        label = got[name]
        assert label["cls"] == [c for c, _ in objects], name
        np.testing.assert_allclose(
            np.array(label["boxes"]).reshape(-1, 4),
            np.array([b for _, b in objects]).reshape(-1, 4),
            atol=1e-3,
        )
        # a.jpg and b.jpg: every object left has a polygon (b.jpg's crowd region is left out)
        assert label["segments"] == (len(objects) if name in ("a.jpg", "b.jpg") else 0), name


def test_ultralytics_reads_a_split_export_and_its_data_yaml(
    coco_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """Two splits exported into one folder: data.yaml names both (train and val), ultralytics reads
    each split's images from it."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", masks=False, progressbar=False)
    ds[:3].export_yolo(tmp_path / "yolo", split="train")
    ds[3:].export_yolo(tmp_path / "yolo", split="val")
    read = _ultralytics(tmp_path / "yolo" / "data.yaml", "detect", tmp_path)
    root = (tmp_path / "yolo").resolve()
    assert (read["train"], read["val"]) == (str(root / "images" / "train"), str(root / "images" / "val"))
    assert sorted(Path(label["file"]).name for label in read["labels"]) == ["a.jpg", "b.jpg", "c.jpg"]


def test_ultralytics_reads_a_pose_export_keypoint_by_keypoint(
    coco_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """A COCO folder with person keypoints, ingested and exported with task='pose', is read by ultralytics'
    YOLODataset with task='pose' from another folder: data.yaml's kpt_shape and flip_idx (left and right
    eyes swapped), and for every image every non-crowd object with its class, box and every keypoint
    (x, y normalized, visibility) within 1e-3 of the COCO file's (an object without keypoints: all 0)."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", masks=False, progressbar=False)
    result = ds.export_yolo(tmp_path / "yolo", task="pose")
    assert (result.objects, result.crowd_left_out, result.keypoints_outside) == (3, 2, 0)

    read = _ultralytics(tmp_path / "yolo" / "data.yaml", "pose", tmp_path)
    assert (read["kpt_shape"], read["flip_idx"]) == ([3, 3], [0, 2, 1])
    root = (tmp_path / "yolo" / "images").resolve()
    got = {str(Path(label["file"]).relative_to(root)): label for label in read["labels"]}
    doc = coco_document()
    names = {img["id"]: img["file_name"] for img in doc["images"]}
    expected = _expected(SIZES)
    assert sorted(got) == sorted(expected)
    points: dict[str, list[list[list[float]]]] = {name: [] for name in SIZES}
    for ann in doc["annotations"]:
        if ann["iscrowd"]:
            continue
        name = names[ann["image_id"]]
        height, width = SIZES[name]
        flat = np.array(ann.get("keypoints", [0] * 9), dtype=np.float64).reshape(3, 3)
        points[name].append((flat / [width, height, 1]).tolist())
    checked = 0
    for name, objects in expected.items():
        label = got[name]
        assert label["cls"] == [c for c, _ in objects], name
        np.testing.assert_allclose(
            np.array(label["boxes"]).reshape(-1, 4),
            np.array([b for _, b in objects]).reshape(-1, 4),
            atol=1e-3,
        )
        np.testing.assert_allclose(
            np.array(label["keypoints"]).reshape(-1, 3, 3),
            np.array(points[name]).reshape(-1, 3, 3),
            atol=1e-3,
        )
        checked += len(points[name]) * 3
    assert checked == 9  # three objects of three keypoints
