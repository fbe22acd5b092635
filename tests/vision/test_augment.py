"""lc.vision.augment: an albumentations flip/crop/resize moves boxes, masks and keypoints with the image,
exactly as albumentations applied directly with the same seed, and identically for 0 and 2 workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.vision.augment_cases import (
    assert_kill_and_resume_equals_a_straight_run,
    assert_same,
    contents,
    new_output,
)

A = pytest.importorskip("albumentations")


def pipeline(label_fields: tuple[str, ...] = ()) -> Any:
    """Flip, crop and resize; boxes in COCO's xywh pixels (the boxes tensor's format), keypoints as xy."""
    return A.Compose(
        [A.HorizontalFlip(p=0.5), A.RandomCrop(28, 28), A.Resize(24, 24)],
        bbox_params=A.BboxParams(format="coco", min_visibility=0.2, label_fields=list(label_fields)),
        keypoint_params=A.KeypointParams(format="xy", remove_invisible=True),
    )


PIPELINE = lc.vision.Albumentations(pipeline())  # fingerprintable, so evals can checkpoint


def augmented(sample_in: Any, rng: np.random.Generator) -> dict[str, Any]:
    """The augmentation under test, for one row."""
    return lc.vision.augment(
        PIPELINE, sample_in, rng, boxes="boxes", masks="masks", keypoints="keypoints", objects=["categories"]
    )


@lc.compute
def flip_crop_resize(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    """The augmentation under test, as a compute function."""
    sample_out.append(augmented(sample_in, rng))


@lc.compute
def first_draw(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    """The seed `augment` gives albumentations for this sample: the first draw of the same rng."""
    sample_out.append({"seed": int(rng.integers(2**32))})


def test_augment_equals_albumentations_applied_directly(coco: lc.Dataset, tmp_path: Path) -> None:
    """Images, boxes, masks and labels after the eval equal albumentations run by hand with the same seed;
    a dropped box takes its label and mask channel with it."""
    out = new_output(tmp_path / "aug", coco)
    flip_crop_resize().eval(coco, out, seed=7, progressbar=False)
    seeds = lc.empty("mem://augment-seeds", overwrite=True)
    seeds.create_tensor("seed", dtype="int64")
    first_draw().eval(coco, seeds, seed=7, progressbar=False)

    direct = pipeline(label_fields=("object",))
    dropped = 0
    for i in range(len(coco)):
        direct.set_random_seed(int(seeds.seed[i].numpy()))
        boxes = coco.boxes[i].numpy()
        masks = coco.masks[i].numpy()
        expected = direct(
            image=coco.images[i].numpy(),
            bboxes=boxes,
            object=np.arange(len(boxes)),
            masks=[masks[:, :, j].astype(np.uint8) for j in range(masks.shape[2])],
            keypoints=coco.keypoints[i].numpy().reshape(-1, 3)[:, :2],
        )
        kept = np.asarray(expected["object"], dtype=np.int64)
        dropped += len(boxes) - len(kept)
        np.testing.assert_array_equal(out.images[i].numpy(), expected["image"])
        np.testing.assert_array_equal(out.boxes[i].numpy(), np.asarray(expected["bboxes"]).reshape(-1, 4))
        got_masks = out.masks[i].numpy()
        assert got_masks.shape == (24, 24, len(kept))
        for c, j in enumerate(kept.tolist()):
            np.testing.assert_array_equal(got_masks[:, :, c], np.asarray(expected["masks"][j], dtype=bool))
        assert out.categories[i].numpy().tolist() == coco.categories[i].numpy()[kept].tolist()
        assert out.keypoints[i].numpy().shape == (len(kept), 3, 3)
        assert out.images[i].numpy().shape == (24, 24, 3)
    assert dropped > 0  # the crop removed at least one object, so the filtering was exercised


def test_augment_is_the_same_for_any_workers(coco: lc.Dataset, tmp_path: Path) -> None:
    """The augmented dataset is identical with 0 and 2 worker processes."""
    results = []
    for workers in (0, 2):
        out = new_output(tmp_path / f"aug{workers}", coco)
        flip_crop_resize().eval(coco, out, seed=3, num_workers=workers, progressbar=False)
        results.append(contents(out))
    assert_same(*results)


@lc.compute
def flip_only(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    """A certain horizontal flip of image and keypoints."""
    flip = A.Compose([A.HorizontalFlip(p=1)], keypoint_params=A.KeypointParams(format="xy"))
    sample_out.append(lc.vision.augment(flip, sample_in, rng, keypoints="keypoints"))


def test_augment_moves_keypoints_and_keeps_unlabelled_ones_at_zero(coco: lc.Dataset) -> None:
    """A flip mirrors labelled keypoints (albumentations: x -> width - 1 - x) and leaves visibility-0 ones
    at (0, 0, 0)."""
    out = lc.empty("mem://augment-flip", overwrite=True)
    out.create_tensor("images", htype="image", sample_compression="png")
    out.create_tensor_like("keypoints", coco.keypoints)
    flip_only().eval(coco[0:1], out, seed=0, progressbar=False)
    # image a.jpg is 64 wide; person 0 has keypoints (10, 12, 2), (14, 12, 1), (0, 0, 0)
    assert out.keypoints[0].numpy()[0].tolist() == [[53, 12, 2], [49, 12, 1], [0, 0, 0]]


def test_augment_needs_bbox_params_for_boxes(coco: lc.Dataset) -> None:
    """Boxes given to a pipeline that cannot move them are refused with the fix."""
    bare = A.Compose([A.HorizontalFlip()])
    with pytest.raises(lc.InvalidArgumentError, match=r"Compose\(\[\.\.\.\], bbox_params=\.\.\.\)"):
        lc.vision.augment(bare, coco[0], np.random.default_rng(0), boxes="boxes")


@lc.compute
def crashes_once(sample_in: Any, sample_out: Any, rng: np.random.Generator, marker: str) -> None:
    """The augmentation under test, failing at input 2 while ``marker`` exists (then removing it)."""
    if sample_in.index == 2 and os.path.exists(marker):
        os.remove(marker)
        raise RuntimeError("crash at input 2")
    sample_out.append(augmented(sample_in, rng))


def test_augment_after_a_failure_and_resume_equals_an_uninterrupted_run(
    coco: lc.Dataset, tmp_path: Path
) -> None:
    """An augmentation that fails at input 2 and is run again resumes after its checkpoint and ends with
    exactly the dataset of a run that never failed (the rng is derived from the input, not the run)."""
    marker = tmp_path / "crash"
    marker.write_text("")
    resumed = new_output(tmp_path / "resumed", coco)
    with pytest.raises(lc.TransformError, match="crash at input 2"):
        crashes_once(marker=str(marker)).eval(coco, resumed, seed=5, checkpoint_interval=1, progressbar=False)
    assert len(lc.load(str(tmp_path / "resumed"))) == 2  # the kept prefix
    result = crashes_once(marker=str(marker)).eval(
        coco, resumed, seed=5, checkpoint_interval=1, progressbar=False
    )
    assert result.resumed_from == 2
    straight = new_output(tmp_path / "straight", coco)
    crashes_once(marker=str(marker)).eval(coco, straight, seed=5, checkpoint_interval=1, progressbar=False)
    assert_same(contents(lc.load(str(tmp_path / "resumed"))), contents(straight))


@lc.compute
def slow_flip_crop_resize(sample_in: Any, sample_out: Any, rng: np.random.Generator, pause: float) -> None:
    """The augmentation under test, taking ``pause`` seconds per sample (so a run can be killed midway)."""
    import time

    time.sleep(pause)
    sample_out.append(augmented(sample_in, rng))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_augment_after_a_kill_and_resume_equals_an_uninterrupted_run(
    coco: lc.Dataset, tmp_path: Path
) -> None:
    """The augmentation's process SIGKILLed after a checkpoint: the rerun (another worker count) resumes
    after it and ends with exactly the dataset of a run that was never killed."""
    assert_kill_and_resume_equals_a_straight_run("tests.vision.test_augment", coco, tmp_path, patience=60.0)


def _yolo_boxes(path: Path) -> lc.Dataset:
    """Four 40 x 100 images, each with one box written as YOLO writes them: cxcywh, normalized."""
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="cxcywh", normalized=True)
    image = np.zeros((40, 100, 3), np.uint8)
    ds.extend({"images": [image] * 4, "boxes": [[[0.1 + 0.1 * i, 0.5, 0.2, 0.4]] for i in range(4)]})
    return ds


@lc.compute
def flipped(sample_in: Any, sample_out: Any, rng: np.random.Generator, box_format: str) -> None:
    """A certain horizontal flip of the image and its boxes, with the pipeline's ``BboxParams.format``."""
    flip = A.Compose([A.HorizontalFlip(p=1)], bbox_params=A.BboxParams(format=box_format))
    sample_out.append(lc.vision.augment(flip, sample_in, rng, boxes="boxes"))


@pytest.mark.parametrize("workers", [0, 2])
def test_augment_reads_the_box_layout_from_the_data_in_worker_processes(workers: int, tmp_path: Path) -> None:
    """In worker processes as in the parent, augment takes the boxes' layout from their tensor: a
    normalized cxcywh tensor flips with BboxParams(format="yolo") (cx -> 1 - cx), and a pipeline saying
    COCO's layout is refused naming the tensor's, with nothing stored."""
    ds = _yolo_boxes(tmp_path / "ds")
    out = lc.like(str(tmp_path / "out"), ds)
    flipped(box_format="yolo").eval(ds, out, num_workers=workers, scheduler="processed", progressbar=False)
    expected = [[[0.9 - 0.1 * i, 0.5, 0.2, 0.4]] for i in range(4)]
    np.testing.assert_allclose(np.stack(out.boxes.numpy(aslist=True)), expected, rtol=0, atol=1e-6)
    wrong = lc.like(str(tmp_path / "wrong"), ds)
    message = (
        r"BboxParams\(format='coco'\).*bbox tensor 'boxes' holds them 'cxcywh' normalized.*format='yolo'"
    )
    with pytest.raises(lc.TransformError, match=message) as caught:
        flipped(box_format="coco").eval(
            ds, wrong, num_workers=workers, scheduler="processed", progressbar=False
        )
    assert isinstance(caught.value.__cause__, lc.InvalidArgumentError)
    assert len(wrong) == 0


@lc.compute
def flipped_by(sample_in: Any, sample_out: Any, rng: np.random.Generator, transform: Any) -> None:
    """A bare (unwrapped) albumentations pipeline given as an argument."""
    sample_out.append(lc.vision.augment(transform, sample_in, rng, boxes="boxes", objects=["categories"]))


def _flip(p: float) -> Any:
    return A.Compose([A.HorizontalFlip(p=p)], bbox_params=A.BboxParams(format="coco", label_fields=[]))


def test_a_bare_pipeline_is_fingerprinted_by_its_transforms(coco: lc.Dataset, tmp_path: Path) -> None:
    """A bare albumentations pipeline as an argument is identified by A.to_dict, as its wrapper is: no
    warning that it cannot be fingerprinted, the same pipeline again is the no-op rerun, and one with
    another probability is another eval that writes."""
    out = lc.like(str(tmp_path / "out"), coco, overwrite=True)
    opts: dict[str, Any] = {"seed": 0, "progressbar": False, "skip_ok": True}
    first = flipped_by(transform=_flip(1.0)).eval(coco, out, **opts)  # a warning would fail the test
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        again = flipped_by(transform=_flip(1.0)).eval(coco, out, **opts)
    other = flipped_by(transform=_flip(0.0)).eval(coco, out, **opts)
    assert again.version == first.version < other.version
    assert len(out.images) == 2 * len(coco)
