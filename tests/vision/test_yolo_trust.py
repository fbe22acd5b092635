"""ingest_yolo treats data.yaml, the label files and the folder's links as untrusted: paths stay inside the
folder, and every malformed file is a library error naming the file, the line and the rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc

pytest.importorskip("yaml")


def ingest(folder: Path, **options: object) -> lc.Dataset:
    """ingest_yolo of ``folder`` into a sibling ``ds`` folder without a progress bar."""
    return lc.ingest_yolo(folder, folder.parent / "ds", progressbar=False, **options)  # type: ignore[arg-type]


def _secret(tmp_path: Path) -> Path:
    """A folder outside the dataset, with an image and a label file in it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    Image.fromarray(np.full((8, 8, 3), 9, np.uint8)).save(outside / "x.jpg")
    (outside / "x.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    (outside / "data.yaml").write_text("names: [secret]\n")
    return outside


@pytest.mark.parametrize("kind", ["image", "label", "labels-folder", "data.yaml", "split"])
def test_ingest_yolo_refuses_links_out_of_the_folder(yolo_folder: Path, tmp_path: Path, kind: str) -> None:
    """An image file, a label file, the labels folder or data.yaml that is a symbolic link to somewhere
    outside the folder (or a split reaching out of it) is refused naming the entry; nothing outside is
    read."""
    outside = _secret(tmp_path)
    split = None
    if kind == "image":
        (yolo_folder / "images" / "train" / "z.jpg").symlink_to(outside / "x.jpg")
    elif kind == "label":
        (yolo_folder / "labels" / "train" / "a.txt").unlink()
        (yolo_folder / "labels" / "train" / "a.txt").symlink_to(outside / "x.txt")
    elif kind == "labels-folder":
        moved = tmp_path / "moved-labels"
        (yolo_folder / "labels").rename(moved)
        (yolo_folder / "labels").symlink_to(moved)
    elif kind == "data.yaml":
        (yolo_folder / "data.yaml").unlink()
        (yolo_folder / "data.yaml").symlink_to(outside / "data.yaml")
    else:
        split = "../../outside"
    with pytest.raises(lc.InvalidArgumentError, match=r"resolves outside the folder") as info:
        ingest(yolo_folder, split=split)
    assert str(yolo_folder) in str(info.value)
    assert not lc.exists(str(tmp_path / "ds"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("names: [car, person\n", r"Cannot read .*data\.yaml' as YAML"),
        ("names: !!python/object:os.system [x]\n", r"Cannot read .*data\.yaml' as YAML"),
        ("- car\n- person\n", r"expected 'names' as a list of class names"),
        ("names: {a: car, b: person}\n", r"expected 'names' as a list of class names or a dict 0: name"),
        ("names: {0: car, 2: dog}\n", r"a dict 0: name, 1: name"),
        ("names: [1, 2]\n", r"expected 'names' as a list of class names"),
        ("names: [car, car]\n", r"class names must be distinct.*'car'"),
        ("names: []\n", r"at least one class name"),
        ("nc: 3\n", r"expected 'names'"),
    ],
)
def test_data_yaml_errors_are_library_errors(yolo_folder: Path, text: str, message: str) -> None:
    """A data.yaml that is not YAML, uses Python tags, or whose names are not distinct strings (a list or a
    dict 0..n-1) is an InvalidArgumentError naming the file, never a raw yaml error."""
    (yolo_folder / "data.yaml").write_text(text)
    with pytest.raises(lc.InvalidArgumentError, match=message):
        ingest(yolo_folder)


def test_data_yaml_that_is_not_utf8_is_a_library_error(yolo_folder: Path) -> None:
    """Bytes that are not UTF-8 in data.yaml are an InvalidArgumentError naming it."""
    (yolo_folder / "data.yaml").write_bytes(b"names: [\xff\xfe]\n")
    with pytest.raises(lc.InvalidArgumentError, match=r"data\.yaml"):
        ingest(yolo_folder)


@pytest.mark.parametrize(
    ("line", "tensor", "message"),
    [
        ("0 nan 0.5 0.1 0.1", "boxes", r"finite numbers in 0\.\.1"),
        ("0 inf 0.5 0.1 0.1", "boxes", r"finite numbers in 0\.\.1"),
        ("0 1.5 0.5 0.1 0.1", "boxes", r"finite numbers in 0\.\.1"),
        ("0 0.5 0.5 -0.1 0.1", "boxes", r"finite numbers in 0\.\.1"),
        ("0 0.1 0.1 0.4 0.1 1.4 0.5", "polygons", r"finite numbers in 0\.\.1"),
        ("0 0.1 0.1 0.4 0.1 0.4", "labels", r"expected 'class cx cy w h'"),
        ("1.0 0.5 0.5 0.1 0.1", "labels", r"expected 'class cx cy w h'"),
        ("-1 0.5 0.5 0.1 0.1", "labels", r"with class in 0\.\.2"),
        ("0 0.5 0.5 0x1 0.1", "labels", r"expected 'class cx cy w h'"),
    ],
)
def test_bad_label_lines_name_the_file_and_line(
    yolo_folder: Path, line: str, tensor: str, message: str
) -> None:
    """A label line with values that are not finite, outside 0..1 (YOLO's coordinates are normalized), or
    not of the form 'class numbers...' is an InvalidSampleError on its tensor naming the file and line."""
    (yolo_folder / "labels" / "train" / "b.txt").write_text(f"1 0.5 0.5 0.2 0.2\n{line}\n")
    with pytest.raises(lc.InvalidSampleError, match=message) as info:
        ingest(yolo_folder)
    assert info.value.tensor == tensor
    assert "b.txt line 2" in str(info.value)
    assert "cannot read image file" not in str(info.value)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage\n", b"0 0.5 0.5 0.1 \xe9\n"])
def test_a_label_file_that_is_not_text_is_a_library_error(yolo_folder: Path, content: bytes) -> None:
    """A label file that is not UTF-8 text is an InvalidSampleError naming it (not a UnicodeDecodeError)."""
    (yolo_folder / "labels" / "train" / "b.txt").write_bytes(content)
    with pytest.raises(lc.InvalidSampleError, match=r"b\.txt.*not UTF-8 text") as info:
        ingest(yolo_folder)
    assert info.value.tensor == "labels"


def test_a_label_path_that_is_a_folder_is_a_library_error(yolo_folder: Path) -> None:
    """A folder where an image's label file should be is an InvalidSampleError naming it."""
    (yolo_folder / "labels" / "train" / "c.txt").mkdir()
    with pytest.raises(lc.InvalidSampleError, match=r"c\.txt.*cannot be read"):
        ingest(yolo_folder)


def test_skip_errors_skips_a_bad_label_file_with_its_reason(yolo_folder: Path) -> None:
    """skip_errors=True skips the image whose label file is malformed and says which line broke which rule."""
    (yolo_folder / "labels" / "train" / "b.txt").write_text("0 0.5 0.5 0.1 7\n")
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 1 of 4 images") as record:
        ds = ingest(yolo_folder, skip_errors=True)
    assert "b.txt line 1" in str(record[0].message)
    assert "finite numbers in 0..1" in str(record[0].message)
    assert ds.file_name.text() == ["train/a.jpg", "train/c.jpg", "val/d.jpg"]
