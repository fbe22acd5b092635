"""lc.vision.augment with torchvision transforms.v2: a flip/crop/resize/colour-jitter pipeline moves boxes,
masks and keypoints with the image exactly as torchvision applied directly with the same seed, identically
for 0 and 2 workers (processes and threads) and after a kill and a resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.vision.augment_cases import (
    TENSORS,
    assert_kill_and_resume_equals_a_straight_run,
    assert_same,
    contents,
    new_output,
)

pytestmark = pytest.mark.needs("torchvision")
torch = pytest.importorskip("torch")
pytest.importorskip(
    "torchvision", reason="needs torchvision, which only the full lane installs (make test-full)"
)
from torchvision import tv_tensors  # noqa: E402  (after the skip: torchvision is optional)
from torchvision.transforms import v2  # noqa: E402


def pipeline() -> Any:
    """Flip, crop, resize and colour jitter; then boxes left too small are dropped with their labels."""
    return v2.Compose(
        [
            v2.RandomHorizontalFlip(p=0.5),
            v2.RandomCrop(28),
            v2.Resize((24, 24)),
            v2.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05),
            v2.SanitizeBoundingBoxes(min_size=2),
        ]
    )


PIPELINE = lc.vision.TorchVision(pipeline(), box_format="xywh")  # COCO's boxes; fingerprintable


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
    """The seed `augment` gives torch for this sample: the first draw of the same rng."""
    sample_out.append({"seed": int(rng.integers(2**32))})


def _direct(coco: lc.Dataset, i: int, seed: int) -> dict[str, Any]:
    """torchvision applied by hand to row ``i`` (tv_tensors built from the stored values), seeded."""
    image = coco.images[i].numpy()
    boxes, size = coco.boxes[i].numpy(), image.shape[:2]
    inputs = {
        "image": tv_tensors.Image(torch.from_numpy(image).permute(2, 0, 1)),
        # float32, as torchvision's own datasets give boxes (and as augment hands them over)
        "boxes": tv_tensors.BoundingBoxes(
            torch.from_numpy(boxes.astype(np.float32)), format="XYWH", canvas_size=size
        ),
        "masks": tv_tensors.Mask(torch.from_numpy(coco.masks[i].numpy().transpose(2, 0, 1).copy())),
        "labels": torch.arange(len(boxes)),
    }
    torch.manual_seed(seed)
    return pipeline()(inputs)  # type: ignore[no-any-return]


def test_torchvision_equals_torchvision_applied_directly(coco: lc.Dataset, tmp_path: Path) -> None:
    """Images, boxes, masks and labels after the eval equal torchvision run by hand with the same seed; a
    box SanitizeBoundingBoxes drops takes its label, mask channel and keypoints with it."""
    out = new_output(tmp_path / "aug", coco)
    flip_crop_resize().eval(coco, out, seed=7, progressbar=False)
    seeds = lc.empty("mem://torchvision-seeds", overwrite=True)
    seeds.create_tensor("seed", dtype="int64")
    first_draw().eval(coco, seeds, seed=7, progressbar=False)

    dropped = 0
    for i in range(len(coco)):
        expected = _direct(coco, i, int(seeds.seed[i].numpy()))
        kept = expected["labels"].numpy()
        dropped += len(coco.boxes[i].numpy()) - len(kept)
        np.testing.assert_array_equal(out.images[i].numpy(), expected["image"].numpy().transpose(1, 2, 0))
        np.testing.assert_array_equal(out.boxes[i].numpy(), expected["boxes"].numpy().reshape(-1, 4))
        np.testing.assert_array_equal(out.masks[i].numpy(), expected["masks"].numpy().transpose(1, 2, 0))
        assert out.categories[i].numpy().tolist() == coco.categories[i].numpy()[kept].tolist()
        assert out.keypoints[i].numpy().shape == (len(kept), 3, 3)
        assert out.images[i].numpy().shape == (24, 24, 3)
    assert dropped > 0  # the crop removed at least one object, so the filtering was exercised


def test_torchvision_leaves_the_callers_torch_generator_as_it_was(coco: lc.Dataset) -> None:
    """Seeding torch for the pipeline does not change what the caller's torch draws next."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    augmented(coco[0], np.random.default_rng(0))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("scheduler", ["processed", "threaded"])
def test_torchvision_is_the_same_for_any_workers(coco: lc.Dataset, tmp_path: Path, scheduler: str) -> None:
    """The augmented dataset is identical with 0 workers and with 2 worker processes (or threads, which
    share torch's generator)."""
    serial = new_output(tmp_path / "aug0", coco)
    flip_crop_resize().eval(coco, serial, seed=3, num_workers=0, progressbar=False)
    parallel = new_output(tmp_path / "aug2", coco)
    flip_crop_resize().eval(coco, parallel, seed=3, num_workers=2, scheduler=scheduler, progressbar=False)
    assert_same(contents(serial), contents(parallel))


def keep_batch(batch: dict[str, Any]) -> dict[str, Any]:
    """A collate that keeps the loader's batch dict as it is (ragged boxes stay a list per image)."""
    return batch


def test_torchvision_in_a_loader_transform_is_the_same_for_any_workers(coco: lc.Dataset) -> None:
    """As a loader ``transform=``, the augmentation gives the same samples in the main process and in 2
    DataLoader worker processes, with 24 x 24 images and boxes inside them."""
    runs = []
    for workers in (0, 2):
        loader = coco.pytorch(
            1, tensors=list(TENSORS), transform=flip_crop_resize(), num_workers=workers, collate_fn=keep_batch
        )
        runs.append([{n: np.asarray(batch[n][0]) for n in TENSORS} for batch in loader])
    assert len(runs[0]) == len(runs[1]) == len(coco)
    for a, b in zip(*runs, strict=True):
        assert a["images"].shape == (24, 24, 3)
        assert (a["boxes"][:, :2] >= 0).all()
        assert (a["boxes"][:, :2] + a["boxes"][:, 2:] <= 24).all()
        for name in TENSORS:
            np.testing.assert_array_equal(a[name], b[name])


@lc.compute
def flip_only(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    """A certain horizontal flip of image, boxes and keypoints, with the boxes' layout of YOLO."""
    flip = lc.vision.TorchVision(v2.RandomHorizontalFlip(p=1), box_format="cxcywh", normalized=True)
    sample_out.append(lc.vision.augment(flip, sample_in, rng, boxes="boxes", keypoints="keypoints"))


def test_torchvision_moves_normalized_boxes_and_keypoints(tmp_path: Path) -> None:
    """A flip mirrors normalized cxcywh boxes (cx -> 1 - cx) and keypoints (torchvision: x -> width - 1 - x),
    and leaves unlabelled keypoints at (0, 0, 0)."""
    src = lc.empty(str(tmp_path / "yolo-like"), overwrite=True)
    with src:
        src.create_tensor("images", htype="image", sample_compression="png")
        src.create_tensor("boxes", htype="bbox", format="cxcywh", normalized=True)
        src.create_tensor("keypoints", htype="keypoints", keypoint_names=["a", "b"])
    image = np.arange(20 * 40 * 3, dtype=np.uint8).reshape(20, 40, 3)
    src.append({"images": image, "boxes": [[0.25, 0.5, 0.25, 0.5]], "keypoints": [[[10, 5, 2], [0, 0, 0]]]})
    out = lc.like(str(tmp_path / "flipped"), src, overwrite=True)
    flip_only().eval(src, out, seed=0, progressbar=False)
    np.testing.assert_array_equal(out.images[0].numpy(), image[:, ::-1])
    np.testing.assert_allclose(out.boxes[0].numpy(), [[0.75, 0.5, 0.25, 0.5]])
    assert out.keypoints[0].numpy().tolist() == [[[29, 5, 2], [0, 0, 0]]]


@lc.compute
def bare_boxes(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    """A bare torchvision pipeline moving boxes."""
    sample_out.append(lc.vision.augment(pipeline(), sample_in, rng, boxes="boxes"))


def test_torchvision_needs_the_box_format_for_rows_not_read_from_a_tensor() -> None:
    """Boxes of a row not read from a dataset's bbox tensor (a dict handed to a transform) have no layout:
    a bare pipeline moving them is refused with the fix."""
    from lakecompute.compute import SampleRunner

    runner = SampleRunner(bare_boxes(), seed=0)
    row = {"images": np.zeros((8, 10, 3), dtype=np.uint8), "boxes": np.zeros((1, 4))}
    with pytest.raises(lc.TransformError, match=r"TorchVision\(transform, box_format=\.\.\., normalized"):
        runner.run(row, index=0)


@lc.compute
def flip_targets(sample_in: Any, sample_out: Any, rng: np.random.Generator, names: tuple[str, ...]) -> None:
    """A torchvision flip of the image and the targets ``names`` (each tensor named as its argument)."""
    flip = lc.vision.TorchVision(v2.RandomHorizontalFlip(), box_format="xyxy")
    sample_out.append(lc.vision.augment(flip, sample_in, rng, **{n: n for n in names}))


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ({"boxes": np.zeros((2, 5))}, r"boxes 'boxes' must be \(k, 4\).*Got shape \(2, 5\)"),
        ({"masks": np.zeros((8, 9, 1), bool)}, r"masks 'masks' must be H x W x k .*\(8, 10\).*\(8, 9, 1\)"),
        (
            {"boxes": np.zeros((2, 4)), "masks": np.zeros((8, 10, 3), bool)},
            r"masks 'masks' has 3 channels but boxes 'boxes' has 2 boxes",
        ),
        ({"keypoints": np.zeros((1, 2, 2))}, r"keypoints 'keypoints' must be \(k, K, 3\)"),
        (
            {"boxes": np.zeros((2, 4)), "keypoints": np.zeros((3, 2, 3))},
            r"keypoints 'keypoints' has 3 groups but the row has 2 objects",
        ),
    ],
)
def test_torchvision_refuses_malformed_targets(targets: dict[str, np.ndarray], message: str) -> None:
    """Boxes that are not (k, 4), masks of another size or count, and keypoints not (..., 3) or not one
    group per box are refused, naming the tensor and the shapes, before torchvision sees them."""
    from lakecompute.compute import SampleRunner

    runner = SampleRunner(flip_targets(names=tuple(targets)), seed=0)
    with pytest.raises(lc.TransformError, match=message) as caught:
        runner.run({"images": np.zeros((8, 10, 3), dtype=np.uint8), **targets}, index=0)
    assert isinstance(caught.value.__cause__, lc.InvalidArgumentError)


def test_torchvision_pipeline_with_a_function_cannot_be_fingerprinted() -> None:
    """A v2.Lambda has no stable description: the fingerprint is refused with the way out."""
    wrapped = lc.vision.TorchVision(v2.Compose([v2.Lambda(lambda x: x)]))
    with pytest.raises(lc.InvalidArgumentError, match=r"transform\.transforms\[0\]\.lambd is a function"):
        wrapped.__lakecompute_fingerprint__()
    same = lc.vision.TorchVision(pipeline(), box_format="xywh").__lakecompute_fingerprint__()
    assert same == PIPELINE.__lakecompute_fingerprint__()
    other = lc.vision.TorchVision(pipeline(), box_format="xyxy").__lakecompute_fingerprint__()
    assert other != same
    smaller = lc.vision.TorchVision(v2.Compose([v2.RandomCrop(26)]), box_format="xywh")
    larger = lc.vision.TorchVision(v2.Compose([v2.RandomCrop(28)]), box_format="xywh")
    assert smaller.__lakecompute_fingerprint__() != larger.__lakecompute_fingerprint__()


def test_augment_refuses_what_is_not_a_pipeline(coco: lc.Dataset) -> None:
    """Something neither albumentations nor torchvision is refused, naming what augment takes."""
    with pytest.raises(lc.InvalidArgumentError, match=r"albumentations\.Compose or a torchvision .*Got dict"):
        lc.vision.augment({}, coco[0], np.random.default_rng(0))


@lc.compute
def bare_flip(sample_in: Any, sample_out: Any, rng: np.random.Generator) -> None:
    """A bare (unwrapped) torchvision flip of the image and its masks: no boxes, so no layout needed."""
    sample_out.append(lc.vision.augment(v2.RandomHorizontalFlip(p=1), sample_in, rng, masks="masks"))


def test_torchvision_bare_transform_moves_masks(coco: lc.Dataset) -> None:
    """A bare v2 transform is recognised as torchvision; the masks are flipped with the image."""
    out = lc.empty("mem://torchvision-bare", overwrite=True)
    out.create_tensor("images", htype="image", sample_compression="png")
    out.create_tensor_like("masks", coco.masks)
    bare_flip().eval(coco[0:1], out, seed=0, progressbar=False)
    np.testing.assert_array_equal(out.masks[0].numpy(), coco.masks[0].numpy()[:, ::-1])


@lc.compute
def slow_flip_crop_resize(sample_in: Any, sample_out: Any, rng: np.random.Generator, pause: float) -> None:
    """The augmentation under test, taking ``pause`` seconds per sample (so a run can be killed midway)."""
    import time

    time.sleep(pause)
    sample_out.append(augmented(sample_in, rng))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_torchvision_after_a_kill_and_resume_equals_an_uninterrupted_run(
    coco: lc.Dataset, tmp_path: Path
) -> None:
    """The augmentation's process SIGKILLed after a checkpoint: the rerun (another worker count) resumes
    after it and ends with exactly the dataset of a run that was never killed."""
    assert_kill_and_resume_equals_a_straight_run(
        "tests.vision.test_torchvision", coco, tmp_path, patience=120.0
    )
