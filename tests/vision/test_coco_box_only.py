"""Box-only COCO files store no masks: ``masks=True`` (the default) rasterises the file's segmentations, and a
file with none gets no ``masks`` tensor (one all-zero H x W channel per box was all it stored). An export
writes no ``segmentation`` for an annotation that had none, and pycocotools reads it, boxes scoring AP 1.0."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc

pycocotools_coco = pytest.importorskip("pycocotools.coco")
pycocotools_eval = pytest.importorskip("pycocotools.cocoeval")

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept:DeprecationWarning")


def _quiet(fn: Any, *args: Any) -> Any:
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        return fn(*args)


def _write(root: Path, annotations: list[dict[str, Any]]) -> tuple[Path, Path]:
    """Two 40 x 60 JPEG images and a COCO file with ``annotations`` on them."""
    images = root / "images"
    images.mkdir(parents=True)
    for i in (1, 2):
        pixels = np.random.default_rng(i).integers(0, 256, (40, 60, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(images / f"{i}.jpg", quality=90)
    doc = {
        "images": [{"id": i, "file_name": f"{i}.jpg", "height": 40, "width": 60} for i in (1, 2)],
        "annotations": annotations,
        "categories": [{"id": 1, "name": "car"}, {"id": 2, "name": "truck"}],
    }
    path = root / "instances.json"
    path.write_text(json.dumps(doc))
    return images, path


def _box(ann_id: int, image_id: int, box: list[float], **extra: Any) -> dict[str, Any]:
    area = box[2] * box[3]
    return {"id": ann_id, "image_id": image_id, "category_id": 1 + ann_id % 2, "bbox": box, "area": area,
            "iscrowd": 0, **extra}  # fmt: skip


BOX_ONLY = [
    _box(1, 1, [1, 2, 10, 12]),
    _box(2, 1, [20, 5, 30, 20], segmentation=[]),  # an empty list: no segmentation either
    _box(3, 2, [0, 0, 60, 40]),
]


def _ap(truth_file: Path, exported: Path) -> float:
    """COCOeval's box AP of the exported annotations, as detections scored 1, on the source file."""
    truth = _quiet(pycocotools_coco.COCO, str(truth_file))
    export = _quiet(pycocotools_coco.COCO, str(exported))
    results = [
        {"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 1.0}
        for a in export.dataset["annotations"]
    ]
    evaluation = pycocotools_eval.COCOeval(truth, _quiet(truth.loadRes, results), "bbox")
    _quiet(evaluation.evaluate)
    _quiet(evaluation.accumulate)
    _quiet(evaluation.summarize)
    return float(evaluation.stats[0])


def test_a_box_only_file_gets_no_masks_and_exports_no_segmentation(tmp_path: Path) -> None:
    images, annotations = _write(tmp_path / "src", BOX_ONLY)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    assert "masks" not in ds.tensors
    assert ds.boxes[0].numpy().tolist() == [[1, 2, 10, 12], [20, 5, 30, 20]]
    out = tmp_path / "out" / "instances.json"
    coco = ds.export_coco(out, tmp_path / "out" / "images")
    assert [a.get("segmentation", "none") for a in coco["annotations"]] == ["none"] * 3
    written = json.loads(out.read_text())["annotations"]
    assert all("segmentation" not in a for a in written)
    assert [(a["id"], a["bbox"], a["area"]) for a in written] == [
        (a["id"], a["bbox"], a["area"]) for a in BOX_ONLY
    ]
    assert _ap(annotations, out) == pytest.approx(1.0)


def test_a_mixed_file_keeps_masks_only_for_annotations_that_have_them(tmp_path: Path) -> None:
    """A file where some annotations have polygons: the masks tensor is there, one channel per box, empty
    for the box-only annotation; the export writes a segmentation for exactly those that had one."""
    polygon = [[30.0, 10.0, 50.0, 10.0, 50.0, 30.0, 30.0, 30.0]]
    anns = [
        _box(1, 1, [1, 2, 10, 12]),
        _box(2, 1, [30, 10, 20, 20], segmentation=polygon),
        _box(3, 2, [0, 0, 5, 5]),
    ]
    images, annotations = _write(tmp_path / "src", anns)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    masks = ds.masks[0].numpy()
    assert masks.shape == (40, 60, 2)
    assert not masks[:, :, 0].any()
    assert masks[:, :, 1].sum() > 0
    assert ds.masks[1].numpy().shape == (40, 60, 1)
    out = tmp_path / "out.json"
    coco = ds.export_coco(out)
    assert ["segmentation" in a for a in coco["annotations"]] == [False, True, False]
    assert coco["annotations"][1]["segmentation"] == polygon
    loaded = _quiet(pycocotools_coco.COCO, str(out))
    assert loaded.annToMask(loaded.anns[2]).sum() == masks[:, :, 1].sum()
    assert _ap(annotations, out) == pytest.approx(1.0)


def test_masks_false_on_a_box_only_file_exports_the_same(tmp_path: Path) -> None:
    images, annotations = _write(tmp_path / "src", BOX_ONLY)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False, masks=False)
    assert "masks" not in ds.tensors
    assert all("segmentation" not in a for a in ds.export_coco(tmp_path / "out.json")["annotations"])


def test_a_hand_made_mask_is_exported_and_an_empty_one_is_not(tmp_path: Path) -> None:
    """A dataset built by hand with masks and no polygons: a non-empty channel is written as its RLE; an
    empty channel means no segmentation."""
    ds = lc.empty(tmp_path / "hand")
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="xywh")
        ds.create_tensor("categories", htype="class_label", class_names=["a"])
        ds.create_tensor("masks", htype="binary_mask")
    mask = np.zeros((10, 10, 2), bool)
    mask[2:5, 3:7, 0] = True
    ds.append({"images": np.zeros((10, 10, 3), np.uint8), "boxes": [[3, 2, 4, 3], [0, 0, 1, 1]],
               "categories": [0, 0], "masks": mask})  # fmt: skip
    coco = ds.export_coco(tmp_path / "out.json")
    first, second = coco["annotations"]
    assert "segmentation" not in second
    loaded = _quiet(pycocotools_coco.COCO, str(tmp_path / "out.json"))
    np.testing.assert_array_equal(loaded.annToMask(loaded.anns[first["id"]]), mask[:, :, 0])
