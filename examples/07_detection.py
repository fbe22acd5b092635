"""COCO-style detection data -> a random flip / crop / resize / colour-jitter pipeline (albumentations, seeded
by the eval) -> a new dataset -> torchvision's Faster R-CNN trained from ds.pytorch() through
lc.vision.DetectionCollate (images and targets as torchvision's detection models take them).
The same augmentation with torchvision's transforms.v2 takes one more pipeline (TV_PIPELINE)."""

import albumentations as A
import numpy as np
import torch
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn
from torchvision.transforms import v2

import lakecompute as lc
from lakecompute.testing.detection import write_coco_folder

# Boxes stay in COCO's xywh pixels, the layout ingest_coco stores (augment checks that BboxParams says
# so: "coco"); keypoints move as (x, y). Wrapped in lc.vision.Albumentations so that evals can fingerprint
# it (needed with checkpoint_interval, to resume).
PIPELINE = lc.vision.Albumentations(
    A.Compose(
        [
            A.HorizontalFlip(p=0.5),
            A.RandomSizedBBoxSafeCrop(height=64, width=80),  # a random crop that keeps every box, resized
            A.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05, p=0.8),
        ],
        bbox_params=A.BboxParams(format="coco", min_visibility=0.3),
        keypoint_params=A.KeypointParams(format="xy"),
    )
)
TARGETS = ["images", "boxes", "categories", "masks", "keypoints"]

# The torchvision variant: augment reads the boxes' layout from their tensor, nothing to say;
# SanitizeBoundingBoxes drops boxes the crop left too small, with their masks, keypoints and categories.
TV_PIPELINE = lc.vision.TorchVision(
    v2.Compose(
        [
            v2.RandomHorizontalFlip(p=0.5),
            v2.RandomResizedCrop((64, 80), scale=(0.5, 1.0)),
            v2.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05),
            v2.SanitizeBoundingBoxes(),
        ]
    )
)


@lc.compute
def augment(sample_in, sample_out, rng, pipeline=PIPELINE):
    """Two augmented copies of every image; boxes, masks and keypoints move with it."""
    for _ in range(2):
        sample_out.append(
            lc.vision.augment(
                pipeline,
                sample_in,
                rng,
                boxes="boxes",
                masks="masks",
                keypoints="keypoints",
                objects=["categories"],
            )
        )


def main():
    images_dir, annotations = write_coco_folder("./shapes-coco", n=12, size=(96, 128))
    coco = lc.ingest_coco(images_dir, annotations, "./shapes", overwrite=True, progressbar=False)
    print(coco.summary_table())

    out = lc.empty("./shapes-augmented", overwrite=True)
    with out:
        out.create_tensor("images", htype="image", sample_compression="png")
        for name in TARGETS[1:]:
            out.create_tensor_like(name, coco[name])
    result = augment().eval(coco, out, num_workers=2, seed=0, checkpoint_interval=4, progressbar=False)
    print(f"{len(out)} augmented samples from {result.inputs} images (seed {result.seed})")

    # The same seed gives the same dataset with any number of workers.
    again = lc.like("./shapes-augmented-again", out, overwrite=True)
    augment().eval(coco, again, num_workers=0, seed=0, progressbar=False)
    for name in ("boxes", "masks"):
        for a, b in zip(out[name].numpy(aslist=True), again[name].numpy(aslist=True), strict=True):
            assert np.array_equal(a, b)

    # The same with torchvision: only the pipeline differs.
    tv_out = lc.like("./shapes-augmented-tv", out, overwrite=True)
    augment(pipeline=TV_PIPELINE).eval(coco, tv_out, num_workers=2, seed=0, progressbar=False)
    counts = [len(b) for b in tv_out.boxes.numpy(aslist=True)]
    print(f"torchvision: {len(tv_out)} augmented samples, boxes per image {counts}")

    train(out)


def train(out):
    # Training torchvision's Faster R-CNN: DetectionCollate hands each batch over as the model takes it
    # (float CxHxW images, xyxy float32 boxes, labels + 1 since the model's class 0 is the background).
    torch.manual_seed(0)
    classes = out.categories.info.class_names
    model = fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=len(classes) + 1, min_size=64, max_size=80
    )
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.005)
    collate = lc.vision.DetectionCollate(out, label_offset=1)
    loader = out.pytorch(4, tensors=["images", "boxes", "categories"], shuffle=True, collate_fn=collate)
    model.train()
    for step, (images, targets) in enumerate(loader):
        counts = [len(t["boxes"]) for t in targets]
        shape = (len(images), *images[0].shape)
        for t in targets:
            boxes = t["boxes"]
            assert (boxes[:, 2] > boxes[:, 0]).all()
            assert (boxes[:, 3] > boxes[:, 1]).all()
            assert (boxes[:, 2] <= 80).all()
            assert (boxes[:, 3] <= 64).all()
            assert t["labels"].min() >= 1  # class 0 of the dataset is the model's 1
        loss = sum(model(images, targets).values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"batch {step}: images {shape}, boxes per image {counts}, loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
