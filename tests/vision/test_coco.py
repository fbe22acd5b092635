"""COCO in and out: ingest a real-format fixture, export it, and compare with pycocotools loading both."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.specs import htype_declaration
from lakecompute.vision._coco_annotations import AnnotationRules
from tests.vision.conftest import SIZES

pycocotools_coco = pytest.importorskip("pycocotools.coco")

# pycocotools 2.0's decode returns through an __array__ without numpy 2's copy keyword (numpy warns, then
# copies); our own calls silence it (lakecompute/vision/_common.py), the tests' direct calls do here.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept:DeprecationWarning")


def _load(path: Path) -> Any:
    with contextlib.redirect_stdout(io.StringIO()):  # COCO() prints progress
        return pycocotools_coco.COCO(str(path))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_coco_round_trip_is_exact_for_pycocotools(
    coco_files: tuple[Path, Path], tmp_path: Path, num_workers: int
) -> None:
    """Every annotation (box, category, area, crowd flag, polygons, RLE, keypoints, ids) and every image
    entry reads the same through pycocotools before and after ingest + export; masks are identical."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", num_workers=num_workers, progressbar=False)
    out = tmp_path / "export"
    ds.export_coco(out / "instances.json", out / "images")
    before, after = _load(annotations), _load(out / "instances.json")

    assert sorted(after.anns) == sorted(before.anns) == [101, 102, 103, 104, 105]
    for ann_id, ann in before.anns.items():
        got = after.anns[ann_id]
        assert got == ann, ann_id  # every field, segmentation included (RLE kept as in the file)
        np.testing.assert_array_equal(after.annToMask(got), before.annToMask(ann))
    for img_id, img in before.imgs.items():
        assert after.imgs[img_id] == {k: img[k] for k in ("id", "file_name", "height", "width")}
    assert after.cats == before.cats
    for name in SIZES:
        assert (out / "images" / name).read_bytes() == (images / name).read_bytes()


def test_coco_ingest_columns(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    """A sample holds its image's annotations as ragged columns; masks are pycocotools' own masks."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    coco = _load(annotations)
    assert len(ds) == 4
    assert ds.image_id.numpy().tolist() == [10, 11, 12, 13]
    assert ds.file_name.text() == list(SIZES)
    assert ds.categories.info.class_names == ["person", "car", "dog"]  # sorted by category id
    assert ds.boxes.info.format == "xywh"
    assert ds.boxes[0].numpy().tolist() == [[5.5, 6.25, 20.0, 30.75], [30.0, 4.0, 20.0, 12.0]]
    assert ds.categories[0].numpy().tolist() == [0, 1]
    assert ds.boxes[2].numpy().shape == (0, 4)
    assert ds.masks[2].numpy().shape == (32, 32, 0)
    assert ds.keypoints.info.keypoint_names == ["nose", "left_eye", "right_eye"]
    assert ds.keypoints[0].numpy()[0].tolist() == [[10, 12, 2], [14, 12, 1], [0, 0, 0]]
    polygons = ds.polygons[0].numpy()
    assert [p.shape for p in polygons[1]] == [(3, 2), (4, 2)]
    assert ds.images.sample_compression == "jpeg"
    assert ds.images[0].tobytes() == (images / "a.jpg").read_bytes()
    for i, img_id in enumerate([10, 11, 12, 13]):
        anns = coco.imgToAnns[img_id]
        for j, ann in enumerate(anns):
            np.testing.assert_array_equal(ds.masks[i].numpy()[:, :, j], coco.annToMask(ann).astype(bool))


def test_coco_ingest_without_masks(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    """masks=False stores no mask tensor and the export is still exact."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", masks=False, progressbar=False)
    assert "masks" not in ds.tensors
    coco = ds.export_coco(tmp_path / "out.json")
    original = json.loads(annotations.read_text())
    assert coco["annotations"] == original["annotations"]
    assert ds.info["coco_info"] == original["info"] == coco["info"]


def test_export_coco_converts_other_box_formats(tmp_path: Path) -> None:
    """A hand-made dataset with normalized cxcywh boxes exports COCO xywh pixels, ids made up."""
    ds = lc.empty(str(tmp_path / "hand"), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="cxcywh", normalized=True)
        ds.create_tensor("categories", htype="class_label", class_names=["cat", "dog"])
    ds.append(
        {"images": np.zeros((20, 40, 3), np.uint8), "boxes": [[0.5, 0.5, 0.5, 0.25]], "categories": [1]}
    )
    coco = ds.export_coco(tmp_path / "out.json", tmp_path / "images")
    assert coco["annotations"] == [
        {"id": 1, "image_id": 1, "category_id": 2, "bbox": [10, 7.5, 20, 5], "area": 100, "iscrowd": 0}
    ]  # fmt: skip
    assert coco["categories"] == [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]
    assert coco["images"] == [{"id": 1, "file_name": "1.png", "height": 20, "width": 40}]
    assert (tmp_path / "images" / "1.png").exists()


def test_ingest_coco_refuses_a_file_that_is_not_coco(tmp_path: Path) -> None:
    """A JSON without images/annotations/categories lists is refused, naming the key."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"images": []}))
    (tmp_path / "imgs").mkdir()
    with pytest.raises(lc.InvalidArgumentError, match=r"expected a list under 'categories'"):
        lc.ingest_coco(tmp_path / "imgs", bad, tmp_path / "ds", progressbar=False)
    assert not lc.exists(str(tmp_path / "ds"))


def test_ingest_coco_names_a_missing_image(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    """An image listed in the JSON but missing on disk raises InvalidSampleError naming the file;
    nothing is left at the destination."""
    images, annotations = coco_files
    (images / "b.jpg").unlink()
    with pytest.raises(lc.InvalidSampleError, match=r"b\.jpg"):
        lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    assert not lc.exists(str(tmp_path / "ds"))


def test_coco_ingest_resumes_after_a_failure(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    """With checkpoint_interval, a failed ingest keeps its checkpointed images; the same call with
    resume=True continues after them and ends with the dataset a straight ingest makes."""
    images, annotations = coco_files
    aside = tmp_path / "b.jpg"
    (images / "b.jpg").rename(aside)  # the second image is missing: the ingest fails there
    dest = tmp_path / "ds"
    with pytest.raises(lc.InvalidSampleError, match=r"b\.jpg"):
        lc.ingest_coco(images, annotations, dest, checkpoint_interval=1, progressbar=False)
    assert len(lc.load(str(dest))) == 1  # the first image, checkpointed
    aside.rename(images / "b.jpg")
    ds = lc.ingest_coco(images, annotations, dest, checkpoint_interval=1, resume=True, progressbar=False)
    log = [entry["eval"] for entry in ds.log() if "eval" in entry]
    assert [(e["status"], e["done"]) for e in log][:1] == [("running", 1)]
    assert (log[-1]["status"], log[-1]["done"]) == ("done", 4)
    straight = lc.ingest_coco(images, annotations, tmp_path / "straight", progressbar=False)
    for name, tensor in straight.tensors.items():
        declared = htype_declaration(tensor.htype)
        if not declared.numeric:
            assert ds[name].data() == tensor.data(), name
        elif not declared.stacks:
            assert str(ds[name].numpy()) == str(tensor.numpy()), name
        else:
            for a, b in zip(ds[name].numpy(aslist=True), tensor.numpy(aslist=True), strict=True):
                np.testing.assert_array_equal(a, b)


def test_coco_image_rasterises_every_annotation_into_its_own_channel(tmp_path: Path) -> None:
    """coco_image's masks: one bool channel per annotation, pycocotools' own mask for each (polygons of
    one and two parts, an RLE), and all False for an annotation without a segmentation."""
    from PIL import Image
    from pycocotools import mask as mask_utils

    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(tmp_path / "x.jpg")
    crowd = np.zeros((30, 40), np.uint8)
    crowd[3:9, 20:35] = 1
    rle = mask_utils.encode(np.asfortranarray(crowd))
    counts = rle["counts"].decode()
    square = [[1.0, 2.0, 11.0, 2.0, 11.0, 12.0]]
    two_parts = [[2.0, 15.0, 12.0, 15.0, 12.0, 28.0], [20.0, 16.0, 31.0, 16.0, 25.0, 29.0]]
    anns = [
        {"id": 1, "category_id": 1, "bbox": [1, 2, 10, 10], "segmentation": square},
        {"id": 2, "category_id": 1, "bbox": [0, 0, 1, 1]},
        {
            "id": 3,
            "category_id": 1,
            "bbox": [20, 3, 15, 6],
            "segmentation": {"size": [30, 40], "counts": counts},
        },
        {"id": 4, "category_id": 1, "bbox": [2, 15, 30, 14], "segmentation": two_parts},
    ]
    image = {"id": 7, "file_name": "x.jpg", "height": 30, "width": 40}
    rows: list[dict[str, Any]] = []
    sample_in = json.dumps([str(tmp_path / "x.jpg"), image, anns]).encode()
    rules = AnnotationRules("x.json", {1: 0}, 0, frozenset())
    lc.vision.coco_image(sample_in, rows, "RGB", "jpeg", rules, True)
    masks = rows[0]["masks"]
    assert masks.dtype == np.bool_
    assert masks.shape == (30, 40, 4)
    coco = pycocotools_coco.COCO()
    coco.imgs = {7: image}
    for j, ann in enumerate(anns):
        expected = coco.annToMask({**ann, "image_id": 7}) if "segmentation" in ann else np.zeros((30, 40))
        np.testing.assert_array_equal(masks[:, :, j], expected.astype(bool))
    assert not masks[:, :, 1].any()
    stored = lc.empty(str(tmp_path / "ds"), overwrite=True)
    stored.create_tensor("masks", htype="binary_mask")
    stored.masks.append(masks)
    np.testing.assert_array_equal(lc.load(str(tmp_path / "ds")).masks[0].numpy(), masks)
