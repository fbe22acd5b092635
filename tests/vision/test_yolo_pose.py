"""YOLO pose rows (ultralytics' format): export_yolo(task="pose") writes a box and x y v per keypoint,
normalized, with kpt_shape, flip_idx and kpt_names in data.yaml; ingest_yolo reads them back into a
keypoints tensor in pixels, and refuses malformed rows and pose keys naming the file, line or key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.vision._yolo_pose import mirrored

yaml = pytest.importorskip("yaml")
pytest.importorskip("pycocotools")

NAMES = ["nose", "left_eye", "right_eye"]


def _rows(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def people(coco_files: tuple[Path, Path], tmp_path: Path) -> lc.Dataset:
    """The COCO fixture ingested: persons with 3 named keypoints, a car and crowd regions."""
    images, annotations = coco_files
    return lc.ingest_coco(images, annotations, tmp_path / "people", masks=False, progressbar=False)


def test_export_yolo_pose_writes_boxes_with_keypoints(people: lc.Dataset, tmp_path: Path) -> None:
    """Each row is class, box, then x y v per keypoint (x, y divided by the image's size, v as an
    integer); data.yaml has kpt_shape [3, 3], flip_idx from the names (left and right eyes swapped) and
    the names for every class, as ultralytics defaults kpt_names."""
    people.export_yolo(tmp_path / "yolo", task="pose")
    config = yaml.safe_load((tmp_path / "yolo" / "data.yaml").read_text())
    assert config["kpt_shape"] == [3, 3]
    assert config["flip_idx"] == [0, 2, 1]
    assert config["kpt_names"] == {0: NAMES, 1: NAMES, 2: NAMES}
    person, car = _rows(tmp_path / "yolo" / "labels" / "a.txt")
    assert len(person) == len(car) == 1 + 4 + 9
    height, width = 48, 64
    np.testing.assert_allclose(
        np.array(person[5:], dtype=float).reshape(3, 3),
        [[10 / width, 12 / height, 2], [14 / width, 12 / height, 1], [0, 0, 0]],
    )
    assert person[7] == "2"
    assert person[10] == "1"
    assert car[5:] == ["0.0", "0.0", "0"] * 3


def test_yolo_pose_round_trip(people: lc.Dataset, tmp_path: Path) -> None:
    """ingest_yolo of a pose export gives the keypoints back in pixels (within 1e-9 of the COCO ingest's
    for every non-crowd object), their names and flip_idx; exported again, every label row reads the
    same numbers."""
    people.export_yolo(tmp_path / "yolo", task="pose")
    back = lc.ingest_yolo(tmp_path / "yolo", tmp_path / "back", progressbar=False)
    assert back.keypoints.info.keypoint_names == NAMES
    assert back.keypoints.info.flip_idx == [0, 2, 1]
    assert "polygons" not in back.tensors
    for i in range(len(people)):
        keep = people.iscrowd[i].numpy() == 0
        source = people.keypoints[i].numpy().reshape(-1, 3, 3)[keep]
        np.testing.assert_allclose(back.keypoints[i].numpy().reshape(-1, 3, 3), source, atol=1e-9, rtol=0)
    back.export_yolo(tmp_path / "again", task="pose")
    for label in sorted((tmp_path / "yolo" / "labels").rglob("*.txt")):
        first = np.array(_rows(label), dtype=float)
        again = np.array(
            _rows(tmp_path / "again" / "labels" / label.relative_to(tmp_path / "yolo" / "labels")),
            dtype=float,
        )
        np.testing.assert_allclose(again, first, atol=1e-12, rtol=0)
    assert yaml.safe_load((tmp_path / "again" / "data.yaml").read_text())["flip_idx"] == [0, 2, 1]


def _posed(path: Path, points: list[list[list[float]]], **info: object) -> lc.Dataset:
    """One 20 x 40 image with a box per keypoint group."""
    ds = lc.empty(str(path))
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="xyxy")
        ds.create_tensor("labels", htype="class_label", class_names=["hand"])
        ds.create_tensor("keypoints", htype="keypoints", dtype="float64", **info)
    ds.append(
        {
            "images": np.zeros((20, 40, 3), np.uint8),
            "boxes": [[1.0, 1.0, 30.0, 15.0]] * len(points),
            "labels": [0] * len(points),
            "keypoints": np.array(points, dtype=np.float64).reshape(len(points), -1, 3),
        }
    )
    return ds


def test_export_yolo_pose_writes_keypoints_off_the_image_as_unlabelled(tmp_path: Path) -> None:
    """A labelled keypoint off the image is written 0 0 0 (a pose row holds 0..1 only) and counted; one
    on the edge is kept."""
    ds = _posed(tmp_path / "ds", [[[40, 20, 2], [41, 5, 2], [-1, 5, 1], [3, 4, 0]]])
    result = ds.export_yolo(tmp_path / "yolo", task="pose")
    assert result.keypoints_outside == 2
    (row,) = _rows(tmp_path / "yolo" / "labels" / "000000.txt")
    assert row[5:] == ["1.0", "1.0", "2", "0.0", "0.0", "0", "0.0", "0.0", "0", "0.075", "0.2", "0"]
    config = yaml.safe_load((tmp_path / "yolo" / "data.yaml").read_text())
    assert (config["kpt_shape"], config["flip_idx"]) == ([4, 3], [0, 1, 2, 3])
    assert "kpt_names" not in config


def test_export_yolo_pose_flip_idx(tmp_path: Path) -> None:
    """flip_idx= is written as given; one that is not a permutation of the keypoints is refused, naming
    it; the keypoints tensor's own flip_idx is used when none is given."""
    ds = _posed(tmp_path / "ds", [[[1, 1, 2], [2, 2, 2]]], keypoint_names=["a", "b"], flip_idx=[1, 0])
    ds.export_yolo(tmp_path / "yolo", task="pose")
    assert yaml.safe_load((tmp_path / "yolo" / "data.yaml").read_text())["flip_idx"] == [1, 0]
    ds.export_yolo(tmp_path / "yolo", task="pose", flip_idx=[0, 1])
    assert yaml.safe_load((tmp_path / "yolo" / "data.yaml").read_text())["flip_idx"] == [0, 1]
    for bad in ([0, 0], [0, 1, 2], [1, 2], ["a", "b"]):
        with pytest.raises(
            lc.InvalidArgumentError, match=r"export_yolo's flip_idx must list.*permutation of 0\.\.1"
        ):
            ds.export_yolo(tmp_path / "bad", task="pose", flip_idx=bad)


def test_export_yolo_pose_refusals(people: lc.Dataset, tmp_path: Path) -> None:
    """An unknown task, flip_idx without task='pose', no keypoints tensor, and keypoints that are not one
    group per box are refused naming the problem, before anything is written."""
    with pytest.raises(lc.InvalidArgumentError, match=r"task must be None .* or 'pose'.*Got 'segment'"):
        people.export_yolo(tmp_path / "x", task="segment")  # type: ignore[arg-type]
    with pytest.raises(lc.InvalidArgumentError, match=r"give it with task='pose'"):
        people.export_yolo(tmp_path / "x", flip_idx=[0, 2, 1])
    boxes_only = lc.ingest_yolo(*_yolo_boxes(tmp_path), progressbar=False)
    with pytest.raises(lc.InvalidArgumentError, match=r"needs a tensor 'keypoints' of htype keypoints"):
        boxes_only.export_yolo(tmp_path / "x", task="pose")
    two = _posed(tmp_path / "two", [[[1, 1, 2]]])
    two.boxes[0] = [[1.0, 1.0, 3.0, 3.0], [2.0, 2.0, 4.0, 4.0]]
    two.labels[0] = [0, 0]
    with pytest.raises(
        lc.InvalidArgumentError, match=r"sample 0 has 2 boxes but keypoints of shape \(1, 1, 3\)"
    ):
        two.export_yolo(tmp_path / "x", task="pose")
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").rglob("*.png"))


def _yolo_boxes(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "boxes-yolo"
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "images" / "a.png")
    (root / "data.yaml").write_text("names: [a]\n")
    return root, tmp_path / "boxes-ds"


def test_export_yolo_pose_splits_keep_one_keypoint_shape(tmp_path: Path) -> None:
    """A pose split exported into a folder holding a split of boxes (no keypoints) is refused naming it
    and the keypoint shape; the folder keeps what it held."""
    ds = _posed(tmp_path / "ds", [[[1, 1, 2], [2, 2, 2]]], keypoint_names=["a", "b"])
    ds.export_yolo(tmp_path / "yolo", split="train")
    before = (tmp_path / "yolo" / "data.yaml").read_bytes()
    with pytest.raises(lc.InvalidArgumentError, match=r"split\(s\) \['train'\].*kpt_shape \[2, 3\]"):
        ds.export_yolo(tmp_path / "yolo", split="val", task="pose")
    assert (tmp_path / "yolo" / "data.yaml").read_bytes() == before
    assert not (tmp_path / "yolo" / "images" / "val").exists()


def test_mirrored_pairs_left_and_right_in_any_case() -> None:
    """flip_idx from names swaps left and right in the case each is written, and keeps a name without a
    mirror (or whose mirror is written in another case)."""
    names = ["LeftHand", "RIGHT_FOOT", "head", "RightHand", "LEFT_FOOT", "left_eye", "Right_Eye"]
    assert mirrored(names) == [3, 4, 2, 0, 1, 5, 6]


# -- ingest ------------------------------------------------------------------------------------------


def _pose_folder(root: Path, config: str, lines: str) -> Path:
    """A pose YOLO folder: one 20 x 40 image and its label file."""
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    Image.new("RGB", (40, 20)).save(root / "images" / "a.png")
    (root / "labels" / "a.txt").write_text(lines)
    (root / "data.yaml").write_text(config)
    return root


POSE = "names: [hand]\nkpt_shape: [2, 3]\n"


def test_ingest_yolo_reads_pose_rows_in_pixels(tmp_path: Path) -> None:
    """Keypoints are scaled by the decoded image's size (the keypoints htype holds pixels); x y rows
    (kpt_shape [K, 2]) are all visible; names and flip_idx come from data.yaml."""
    folder = _pose_folder(
        tmp_path / "yolo",
        "names: [hand]\nkpt_shape: [2, 2]\nflip_idx: [1, 0]\nkpt_names: {0: [left, right]}\n",
        "0 0.5 0.5 0.5 0.5 0.25 0.5 1.0 0.0\n",
    )
    ds = lc.ingest_yolo(folder, tmp_path / "ds", progressbar=False)
    np.testing.assert_array_equal(ds.keypoints[0].numpy(), [[[10.0, 10.0, 2.0], [40.0, 0.0, 2.0]]])
    assert ds.keypoints.info.keypoint_names == ["left", "right"]
    assert ds.keypoints.info.flip_idx == [1, 0]


@pytest.mark.parametrize(
    ("line", "tensor", "message"),
    [
        (
            "0 0.5 0.5 0.2 0.2 0.1 0.1 2",
            "labels",
            r"expected 'class cx cy w h' and 2 keypoints of 'x y v' \(10 numbers",
        ),
        ("0 0.5 0.5 0.2 0.2", "labels", r"Got 4 numbers after the class"),
        ("0 0.5 0.5 0.2 0.2 0.1 0.1 2 0.1 0.1 2 0.3", "labels", r"Got 11 numbers"),
        ("1 0.5 0.5 0.2 0.2 0.1 0.1 2 0.1 0.1 2", "labels", r"class in 0\.\.0"),
        (
            "0 0.5 0.5 0.2 0.2 0.1 0.1 3 0.1 0.1 2",
            "keypoints",
            r"visibility .* as 0 \(not labelled\), 1 .* or 2",
        ),
        (
            "0 0.5 0.5 0.2 0.2 0.1 1.5 2 0.1 0.1 2",
            "keypoints",
            r"keypoint coordinates as finite numbers in 0\.\.1",
        ),
        ("0 0.5 0.5 0.2 0.2 0.1 nan 2 0.1 0.1 2", "keypoints", r"finite numbers in 0\.\.1"),
        ("0 0.5 1.5 0.2 0.2 0.1 0.1 2 0.1 0.1 2", "boxes", r"coordinates as finite numbers in 0\.\.1"),
    ],
)
def test_ingest_yolo_refuses_bad_pose_rows(tmp_path: Path, line: str, tensor: str, message: str) -> None:
    """A pose row with the wrong number of values, a class out of range, a visibility other than 0/1/2 or
    a coordinate outside 0..1 is an InvalidSampleError on its tensor naming the file and line."""
    folder = _pose_folder(tmp_path / "yolo", POSE, f"0 0.5 0.5 0.2 0.2 0.1 0.1 2 0.1 0.1 2\n{line}\n")
    with pytest.raises(lc.InvalidSampleError, match=message) as info:
        lc.ingest_yolo(folder, tmp_path / "ds", progressbar=False)
    assert info.value.tensor == tensor
    assert "a.txt line 2" in str(info.value)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("kpt_shape: [2]\n", r"'kpt_shape' as \[number of keypoints, 2 or 3\]"),
        ("kpt_shape: [2, 4]\n", r"'kpt_shape' as \[number of keypoints, 2 or 3\]"),
        ("kpt_shape: [0, 3]\n", r"'kpt_shape'"),
        ("kpt_shape: [true, 3]\n", r"'kpt_shape'"),
        ("kpt_shape: '17,3'\n", r"'kpt_shape'"),
        ("kpt_shape: [2, 3]\nflip_idx: [0, 0]\n", r"'flip_idx' must list.*permutation of 0\.\.1"),
        ("kpt_shape: [2, 3]\nflip_idx: [0, 1, 2]\n", r"'flip_idx'"),
        # A huge declared count is refused by the flip_idx's length, before anything of that size is made.
        ("kpt_shape: [1000000000, 3]\nflip_idx: [1, 0]\n", r"'flip_idx' must list.*0\.\.999999999"),
        ("kpt_shape: [2, 3]\nkpt_names: [a, b]\n", r"'kpt_names' as \{class index"),
        ("kpt_shape: [2, 3]\nkpt_names: {0: [a]}\n", r"'kpt_names'"),
        ("kpt_shape: [2, 3]\nkpt_names: {0: [a, a]}\n", r"'kpt_names'"),
        ("kpt_shape: [2, 3]\nkpt_names: {5: [a, b]}\n", r"'kpt_names'"),
    ],
)
def test_ingest_yolo_refuses_bad_pose_keys(tmp_path: Path, config: str, message: str) -> None:
    """kpt_shape, flip_idx and kpt_names that are not what ultralytics takes are an InvalidArgumentError
    naming data.yaml and the key, before any row is read."""
    folder = _pose_folder(tmp_path / "yolo", "names: [hand]\n" + config, "")
    with pytest.raises(lc.InvalidArgumentError, match=message) as info:
        lc.ingest_yolo(folder, tmp_path / "ds", progressbar=False)
    assert "data.yaml" in str(info.value)


def test_ingest_yolo_refuses_kpt_names_that_differ_by_class(tmp_path: Path) -> None:
    """kpt_names giving two classes other keypoints is refused: a dataset holds one keypoint schema."""
    config = "names: [a, b]\nkpt_shape: [1, 3]\nkpt_names: {0: [x], 1: [y]}\n"
    folder = _pose_folder(tmp_path / "yolo", config, "")
    with pytest.raises(lc.InvalidArgumentError, match=r"other keypoints for some classes"):
        lc.ingest_yolo(folder, tmp_path / "ds", progressbar=False)
