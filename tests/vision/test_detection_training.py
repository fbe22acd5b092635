"""Training torchvision's detection models straight from ds.pytorch(): DetectionCollate hands over images
and targets as the models take them, and Faster R-CNN trains on them with no other glue."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc

pytestmark = pytest.mark.needs("torchvision")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip(
    "torchvision", reason="needs torchvision, which only the full lane installs (make test-full)"
)


def test_detection_collate_gives_what_torchvision_models_take(coco: lc.Dataset) -> None:
    """Per image: float C x H x W in 0..1, xyxy float32 boxes converted from the tensor's xywh, int64
    labels shifted past the background, uint8 k x H x W masks; crowd regions left out with their mask.
    It runs in a loader worker process (it pickles)."""
    collate = lc.vision.DetectionCollate(coco, masks="masks", label_offset=1)
    tensors = ["images", "boxes", "categories", "masks", "iscrowd"]
    images, targets = next(iter(coco.pytorch(4, tensors=tensors, collate_fn=collate, num_workers=1)))
    assert len(images) == len(targets) == 4
    for i, (image, target) in enumerate(zip(images, targets, strict=True)):
        stored = coco.images[i].numpy()
        assert image.dtype == torch.float32
        np.testing.assert_allclose(image.numpy(), stored.transpose(2, 0, 1) / 255, rtol=0, atol=1e-7)
        keep = coco.iscrowd[i].numpy() == 0
        x, y, w, h = coco.boxes[i].numpy()[keep].reshape(-1, 4).T
        assert target["boxes"].dtype == torch.float32
        np.testing.assert_allclose(target["boxes"].numpy(), np.stack([x, y, x + w, y + h], axis=1), rtol=1e-6)
        assert target["labels"].dtype == torch.int64
        assert target["labels"].tolist() == (coco.categories[i].numpy()[keep] + 1).tolist()
        assert target["masks"].dtype == torch.uint8
        masks = coco.masks[i].numpy().transpose(2, 0, 1)[keep]
        np.testing.assert_array_equal(target["masks"].numpy(), masks.astype(np.uint8))
    assert [len(t["labels"]) for t in targets] == [2, 1, 0, 0]  # b.jpg and d.jpg lose a crowd region each


def test_detection_collate_reads_normalized_layouts_and_numpy_batches(tmp_path: Path) -> None:
    """Normalized cxcywh boxes (a YOLO ingest's) become xyxy pixels of their image, from a numpy batch;
    labels take the offset the caller chose; a box without area is left out."""
    ds = lc.empty(str(tmp_path / "ds"))
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="cxcywh", normalized=True)
        ds.create_tensor("labels", htype="class_label", class_names=["a", "b"])
    ds.append(
        {
            "images": np.zeros((20, 40), np.uint8),
            "boxes": [[0.5, 0.5, 0.5, 0.5], [0.2, 0.2, 0, 0.1]],
            "labels": [1, 0],
        }
    )
    collate = lc.vision.DetectionCollate(ds, labels="labels", label_offset=0)
    images, targets = collate(next(ds.batches(1)))
    assert tuple(images[0].shape) == (1, 20, 40)
    assert targets[0]["boxes"].tolist() == [[10.0, 5.0, 30.0, 15.0]]
    assert targets[0]["labels"].tolist() == [1]


def test_detection_collate_names_what_the_batch_lacks(coco: lc.Dataset) -> None:
    """A batch read without a tensor the collate needs is refused with the tensors= to read."""
    collate = lc.vision.DetectionCollate(coco)
    with pytest.raises(lc.InvalidArgumentError, match=r"lacks \['boxes'\]"):
        collate(next(coco.batches(2, tensors=["images", "categories", "iscrowd"])))
    with pytest.raises(lc.TensorDoesNotExistError):
        lc.vision.DetectionCollate(coco, masks="no-such-tensor")


def test_faster_rcnn_trains_from_ds_pytorch_with_detection_collate(coco: lc.Dataset) -> None:
    """torchvision's Faster R-CNN (no pretrained weights) trains 3 steps on batches of ds.pytorch() with
    DetectionCollate and nothing else: every loss is finite and the parameters change."""
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn

    torch.manual_seed(0)
    classes = coco.categories.info.class_names
    model = fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=len(classes) + 1, min_size=64, max_size=96
    )
    model.train()
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    collate = lc.vision.DetectionCollate(coco)
    loader = coco.pytorch(2, tensors=["images", "boxes", "categories", "iscrowd"], collate_fn=collate)
    losses = []
    # Two images a step (of different sizes; one batch has no object left, only a crowd region), two
    # steps an epoch: three steps run into the second epoch.
    for images, targets in itertools.islice(itertools.chain(loader, loader), 3):
        loss = sum(model(images, targets).values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert len(losses) == 3
    assert all(np.isfinite(losses))
    after = [p.detach() for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
