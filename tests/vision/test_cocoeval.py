"""pycocotools' COCOeval, the field's detection metric, scores export_coco's annotations as detections
against the source file at AP 1.0 for boxes, masks and keypoints: straight after ingest, and after an
identity augmentation by either library (every box, mask and keypoint goes through the library and back)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

pycocotools_coco = pytest.importorskip("pycocotools.coco")
pycocotools_eval = pytest.importorskip("pycocotools.cocoeval")
A = pytest.importorskip("albumentations")
torch = pytest.importorskip("torch")
pytest.importorskip(
    "torchvision", reason="needs torchvision, which only the full lane installs (make test-full)"
)
from torchvision.transforms import v2  # noqa: E402  (after the skip: torchvision is optional)

pytestmark = [
    pytest.mark.needs("torchvision"),
    pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept:DeprecationWarning"),
]


def _quiet(fn: Any, *args: Any) -> Any:
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        return fn(*args)


def _average_precision(truth: Any, exported: Path, iou_type: str) -> float:
    """COCOeval's AP (IoU 0.50:0.95) of the exported annotations, as detections scored 1, on the truth."""
    coco = _quiet(pycocotools_coco.COCO, str(exported))
    results = []
    for ann in coco.dataset["annotations"]:
        if iou_type == "keypoints" and not ann.get("num_keypoints"):
            continue
        result = {"image_id": ann["image_id"], "category_id": ann["category_id"], "score": 1.0}
        if iou_type == "bbox":
            result["bbox"] = ann["bbox"]
        elif iou_type == "segm":
            rle = coco.annToRLE(ann)
            result["segmentation"] = {"size": rle["size"], "counts": rle["counts"]}
        else:
            result["keypoints"] = ann["keypoints"]
        results.append(result)
    detections = _quiet(truth.loadRes, results)
    evaluation = pycocotools_eval.COCOeval(truth, detections, iou_type)
    if iou_type == "keypoints":
        evaluation.params.kpt_oks_sigmas = np.full(3, 0.05)  # the fixture's persons have 3 keypoints
        evaluation.params.catIds = [c["id"] for c in truth.dataset["categories"] if c.get("keypoints")]
    _quiet(evaluation.evaluate)
    _quiet(evaluation.accumulate)
    _quiet(evaluation.summarize)
    return float(evaluation.stats[0])


IOU_TYPES = ["bbox", "segm", "keypoints"]


def test_cocoeval_scores_an_export_at_ap_1(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    """Ingest, export: COCOeval gives AP 1.0 for boxes, masks and keypoints."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    ds.export_coco(tmp_path / "export.json")
    truth = _quiet(pycocotools_coco.COCO, str(annotations))
    assert [_average_precision(truth, tmp_path / "export.json", t) for t in IOU_TYPES] == [1.0, 1.0, 1.0]


OBJECTS = ["categories", "annotation_ids", "iscrowd", "areas", "num_keypoints"]
IDENTITY = {
    "albumentations": lambda: A.Compose(
        [A.NoOp()],
        bbox_params=A.BboxParams(format="coco"),
        keypoint_params=A.KeypointParams(format="xy", remove_invisible=False),
    ),
    "torchvision": lambda: v2.Identity(),
}


@lc.compute
def identity(sample_in: Any, sample_out: Any, rng: np.random.Generator, library: str) -> None:
    """An augmentation that moves nothing, through the library: boxes, masks and keypoints go and return."""
    row = lc.vision.augment(
        IDENTITY[library](),
        sample_in,
        rng,
        boxes="boxes",
        masks="masks",
        keypoints="keypoints",
        objects=OBJECTS,
    )
    row.update({"image_id": sample_in["image_id"].numpy(), "file_name": sample_in["file_name"].text()})
    sample_out.append(row)


@pytest.mark.parametrize("library", sorted(IDENTITY))
def test_cocoeval_scores_an_identity_augmentation_at_ap_1(
    coco_files: tuple[Path, Path], tmp_path: Path, library: str
) -> None:
    """Ingest, augment with an identity pipeline (masks, not polygons, carry the shapes), export: COCOeval
    gives AP 1.0 for boxes, masks and keypoints."""
    images, annotations = coco_files
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    out = lc.empty(str(tmp_path / "augmented"))
    with out:
        out.create_tensor("images", htype="image", sample_compression="png")
        for name in ["boxes", "masks", "keypoints", "image_id", "file_name", *OBJECTS]:
            out.create_tensor_like(name, ds.tensors[name])
    identity(library=library).eval(ds, out, seed=0, progressbar=False)
    out.export_coco(tmp_path / "export.json")
    exported = json.loads((tmp_path / "export.json").read_text())["annotations"]
    assert all(isinstance(ann["segmentation"], dict) for ann in exported)  # masks, encoded as RLE
    truth = _quiet(pycocotools_coco.COCO, str(annotations))
    assert [_average_precision(truth, tmp_path / "export.json", t) for t in IOU_TYPES] == [1.0, 1.0, 1.0]
