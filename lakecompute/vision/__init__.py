"""Detection and segmentation data: COCO and YOLO in and out (see docs/detection.md).

* `ingest_coco` / `export_coco`: an images folder and a COCO annotations JSON (boxes, categories,
  polygons, RLE, keypoints, ids) — one sample per image, annotations as ragged columns.
* `ingest_yolo` / `export_yolo`: the ``images/`` + ``labels/`` + ``data.yaml`` layout (boxes, polygons,
  and ultralytics' pose rows: boxes with keypoints).
* `augment`: an albumentations or torchvision ``transforms.v2`` pipeline applied to a row's image with its
  boxes, masks and keypoints, seeded by the eval's ``rng`` (`Albumentations`, `TorchVision`: the wrappers
  that give a pipeline a fingerprint); the boxes' layout is read from their tensor (`BoxLayout`).
* `DetectionCollate`: a loader's batch as torchvision's detection models take it, ``(images, targets)``.

pycocotools (masks), pyyaml (data.yaml) and albumentations come with ``pip install "lakecompute[vision]"``;
torchvision is installed with the torch it is made for (``pip install torch torchvision``).
"""

from lakecompute.boxes import BoxLayout
from lakecompute.vision._augment import Albumentations, augment
from lakecompute.vision._coco import coco_image, export_coco, ingest_coco
from lakecompute.vision._common import polygon_points
from lakecompute.vision._detection import DetectionCollate
from lakecompute.vision._torchvision import TorchVision
from lakecompute.vision._yolo import ingest_yolo, yolo_image
from lakecompute.vision._yolo_export import YoloExport, export_yolo, merge_parts

__all__ = [
    "Albumentations",
    "BoxLayout",
    "DetectionCollate",
    "TorchVision",
    "YoloExport",
    "augment",
    "coco_image",
    "export_coco",
    "export_yolo",
    "ingest_coco",
    "ingest_yolo",
    "merge_parts",
    "polygon_points",
    "yolo_image",
]
