"""An ingest's error about one input file says each fact once: the file and entry the reader names (never
again prefixed with the image's path), one way to fix it, and skip_errors only where it is not already on;
a problem the reader did not name a file for is still given the sample's file."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.ingest import IngestOptions, run_ingest
from tests.vision.conftest import write_yolo
from tests.vision.test_coco_trust import base_document, write_folder

pytest.importorskip("pycocotools")
pytest.importorskip("yaml")
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept:DeprecationWarning")


def _coco_error(tmp_path: Path, doc: dict[str, Any], num_workers: int = 0) -> lc.InvalidSampleError:
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidSampleError) as info:
        lc.ingest_coco(
            tmp_path / "images", tmp_path / "instances.json", tmp_path / "ds",
            progressbar=False, num_workers=num_workers,
        )  # fmt: skip
    return info.value


def _once(text: str, *facts: str) -> None:
    for fact in facts:
        assert text.count(fact) == 1, (fact, text)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_coco_annotation_error_names_its_file_and_entry_once(tmp_path: Path, num_workers: int) -> None:
    """A malformed annotation's error names the annotations file, the annotation and its image once each,
    with no 'the sample of <image path>' before it, and says how to fix or skip once."""
    doc = base_document()
    doc["annotations"][2]["bbox"] = [1, 2, 3]
    error = _coco_error(tmp_path, doc, num_workers)
    text = str(error)
    assert text == (
        f"Cannot store sample in tensor 'boxes': annotation 3 of image 2 ('b.png') in "
        f"{str(tmp_path / 'instances.json')!r}: expected 'bbox' as 4 numbers [x, y, width, height], finite, "
        "with width >= 0 and height >= 0. Got [1, 2, 3]. Fix the annotation, or pass skip_errors=True to "
        "skip the images whose annotations break a rule."
    )
    assert str(tmp_path / "images") not in text
    assert error.source == str(tmp_path / "instances.json")


def test_a_declared_size_error_says_one_fix(tmp_path: Path) -> None:
    """An image entry declaring another size than its file says 'Fix' once (not 'Fix the entry... Fix the
    annotation')."""
    doc = base_document()
    doc["images"][0].update(height=50)
    text = str(_coco_error(tmp_path, doc))
    _once(text, "Fix", "skip_errors=True", "instances.json", "'a.png'")
    assert "the sample of" not in text
    assert (
        "Fix the entry (or the file), or pass skip_errors=True to skip the images whose annotations" in text
    )


def test_a_yolo_label_error_names_the_label_file_and_line_once(tmp_path: Path) -> None:
    """A malformed label line's error names the label file and line once, not the image's path, and says
    how to fix or skip once."""
    root = write_yolo(tmp_path / "yolo")
    (root / "labels" / "train" / "b.txt").write_text("0 0.5 0.5 0.1 7\n")
    with pytest.raises(lc.InvalidSampleError) as info:
        lc.ingest_yolo(root, tmp_path / "ds", progressbar=False)
    text = str(info.value)
    label = str(root / "labels" / "train" / "b.txt")
    assert text.startswith(f"Cannot store sample in tensor 'boxes': {label} line 1: expected coordinates")
    _once(text, label, "Fix the file", "skip_errors=True")
    assert str(root / "images") not in text


def test_an_unreadable_image_is_named_once_without_pillows_buffer(tmp_path: Path) -> None:
    """An image file that does not decode is named once; Pillow's '<_io.BytesIO object at 0x...>' (the
    buffer, not the file) is left out."""
    write_folder(tmp_path, base_document())
    (tmp_path / "images" / "b.png").write_bytes(b"not a png")
    with pytest.raises(lc.InvalidSampleError) as info:
        lc.ingest_coco(tmp_path / "images", tmp_path / "instances.json", tmp_path / "ds", progressbar=False)
    text = str(info.value)
    bad = tmp_path / "images" / "b.png"
    _once(text, str(bad), "skip_errors=True")
    assert "BytesIO" not in text
    assert "0x" not in text
    assert text.startswith(f"Cannot store sample in tensor 'images': cannot read image file {str(bad)!r} (")


def test_the_skip_warning_lists_reasons_without_advising_skip_errors(tmp_path: Path) -> None:
    """With skip_errors=True, each skipped image's reason ends with how to fix it, not with the advice to
    pass skip_errors=True (it is on); the image and the annotation are each named once."""
    doc = base_document()
    doc["annotations"][2]["bbox"] = [1, 2, 3]
    write_folder(tmp_path, doc)
    (tmp_path / "images" / "a.png").write_bytes(b"broken")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", lc.LakeComputeWarning)
        lc.ingest_coco(
            tmp_path / "images", tmp_path / "instances.json", tmp_path / "ds",
            progressbar=False, skip_errors=True, num_workers=0,
        )  # fmt: skip
    (warning,) = [w for w in caught if issubclass(w.category, lc.LakeComputeWarning)]
    text = str(warning.message)
    assert text.count("skip_errors=True") == 1  # "Skipped 2 of 2 images in ... (skip_errors=True)"
    assert "Fix or remove the file.\n" in text
    assert text.endswith("Got [1, 2, 3]. Fix the annotation.")
    _once(text, str(tmp_path / "images" / "a.png"), str(tmp_path / "images" / "b.png"))


def test_a_problem_no_reader_named_is_given_the_samples_file(tmp_path: Path) -> None:
    """An InvalidSampleError raised by the dataset's own checks (it names no input file) is given the
    sample's file by run_ingest, once."""
    source = tmp_path / "a.png"
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(source)

    def setup(ds: lc.Dataset, compression: str | None) -> None:
        ds.create_tensor("x", dtype="int64")

    def store(sample_in: str, sample_out: Any, mode: str, compression: str | None) -> None:
        sample_out.x.append("not a number")

    options = IngestOptions.parse("test", {}, None, False)
    with pytest.raises(lc.InvalidSampleError) as info:
        run_ingest(tmp_path / "ds", setup, store, [str(source)], [str(source)], str(tmp_path), options)
    text = str(info.value)
    assert text.startswith(f"Cannot store sample in tensor 'x': the sample of {str(source)!r}: ")
    _once(text, str(source))
    assert info.value.source == str(source)
