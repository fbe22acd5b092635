"""torchvision ``transforms.v2`` for `augment`: a row's targets as ``tv_tensors``, and back.

torchvision transforms a dict of ``tv_tensors`` together — an ``Image``, ``BoundingBoxes`` (with their
format and canvas size), a ``Mask`` and ``KeyPoints`` — and draws its randomness from torch's global
generator. `TorchVision.apply` builds that dict from a row, seeds the generator inside
``torch.random.fork_rng`` (so the caller's torch state is the same afterwards), and converts the result
back to the row's layout. The geometry is torchvision's.
"""

from __future__ import annotations

import enum
import json
from typing import Any, Literal

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.specs import BBOX_FORMATS
from lakecompute.vision._common import convert_boxes, require
from lakecompute.vision._targets import Moved, Targets, kept, outside_to_zero

__all__ = ["TorchVision"]

# Not in the vision extra: torch is large, and the user's torch decides which torchvision fits it.
_INSTALL = "pip install torch torchvision (a torchvision release made for your torch)"

BoxFormat = Literal["xyxy", "xywh", "cxcywh"]


class TorchVision:
    """A torchvision ``transforms.v2`` pipeline for `augment`, with the layout of the boxes it moves.

    The pipeline is called with one dict, ``{"image": Image, "boxes": BoundingBoxes, "masks": Mask,
    "keypoints": KeyPoints, "labels": positions}`` (the targets `augment` was asked to move):

    * ``image``: the row's image as a ``C x H x W`` ``tv_tensors.Image`` (uint8 as stored);
    * ``boxes``: ``tv_tensors.BoundingBoxes`` in ``box_format``, in pixels (normalized boxes are scaled by
      the image's size, and back by the new one), with the image's canvas size;
    * ``masks``: a ``k x H x W`` ``tv_tensors.Mask``, one channel per object;
    * ``keypoints``: ``(k, K, 2)`` ``tv_tensors.KeyPoints`` (the visibility stays with the row);
    * ``labels``: the objects' positions ``0..k-1``. ``v2.SanitizeBoundingBoxes()`` (its default
      ``labels_getter`` finds ``labels``) drops the entries of the boxes it removes, and so tells `augment`
      which objects survive: their masks, keypoints and ``objects`` columns are kept with them.

    While it runs, torch's global generator is seeded from the sample's ``rng`` (inside
    ``torch.random.fork_rng``: the caller's torch draws are unchanged) and torch uses one intra-op thread
    (put back afterwards), so that worker processes forked after torch ran threaded do not hang.

    Wrapping also gives the pipeline a fingerprint (torchvision's transforms and their parameters), which
    a checkpointed eval (``checkpoint_interval``) needs to recognise its rerun; a transform holding a
    function (``v2.Lambda``) has none and is refused there.

    Args:
        transform: a torchvision ``transforms.v2`` transform (``v2.Compose([...])``).
        box_format: the bbox tensor's ``info.format`` (``"xyxy"``, ``"xywh"`` or ``"cxcywh"``); needed
            to move boxes (COCO ingests ``"xywh"``, YOLO ``"cxcywh"``).
        normalized: the bbox tensor's ``info.normalized``.

    Raises:
        InvalidArgumentError: a ``box_format`` that is not one of the three.

    Example:
        >>> from torchvision.transforms import v2  # doctest: +SKIP
        >>> PIPELINE = lc.vision.TorchVision(  # doctest: +SKIP
        ...     v2.Compose([v2.RandomHorizontalFlip(), v2.SanitizeBoundingBoxes()]), box_format="xywh")
    """

    __slots__ = ("box_format", "normalized", "transform")

    def __init__(self, transform: Any, box_format: BoxFormat | None = None, normalized: bool = False) -> None:
        if box_format is not None and box_format not in BBOX_FORMATS:
            raise InvalidArgumentError(
                f"TorchVision(box_format=...) must be one of {list(BBOX_FORMATS)!r}, the bbox tensor's "
                f"info.format. Got {box_format!r}."
            )
        self.transform = transform
        self.box_format = box_format
        self.normalized = normalized

    def __lakecompute_fingerprint__(self) -> str:
        """The transforms' types and parameters, and the box layout, as JSON with sorted keys."""
        described = {
            "transform": _describe(self.transform, "transform"),
            "box_format": self.box_format,
            "normalized": self.normalized,
        }
        return json.dumps(described, sort_keys=True)

    def __repr__(self) -> str:
        return f"TorchVision({self.transform!r:.200}, box_format={self.box_format!r})"

    def apply(self, targets: Targets, seed: int) -> Moved:
        """Run the pipeline on one row's targets with torch's generator seeded by ``seed``."""
        torch = require("torch", "Augmenting with torchvision", _INSTALL)
        inputs = self._inputs(targets)
        # One intra-op thread: a process that ran torch on several threads and then forked (an eval with 0
        # workers, then one with processes) leaves its children a thread pool they cannot use, and their
        # first parallel torch op waits forever. One sample's image is too small to gain from threads; the
        # eval's workers are the parallelism. The caller's setting is put back afterwards.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            # fork_rng puts the caller's generator state back afterwards; devices=[]: only the CPU
            # generator (torchvision's CPU transforms draw from it), without touching (or starting) CUDA.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                out = self.transform(inputs)
        finally:
            torch.set_num_threads(threads)
        if not isinstance(out, dict) or "image" not in out:
            raise InvalidArgumentError(
                "augment: a torchvision pipeline must give back the dict it was given (v2 transforms do). "
                f"Got {type(out).__name__}."
            )
        return self._moved(targets, out)

    def _inputs(self, targets: Targets) -> dict[str, Any]:
        torch = require("torch", "Augmenting with torchvision", _INSTALL)
        tv_tensors = require("torchvision.tv_tensors", "Augmenting with torchvision", _INSTALL)
        image = np.ascontiguousarray(targets.image)
        height, width = image.shape[:2]
        chw = torch.from_numpy(image[:, :, None] if image.ndim == 2 else image).permute(2, 0, 1)
        inputs: dict[str, Any] = {"image": tv_tensors.Image(chw)}
        if targets.boxes is not None:
            if self.box_format is None:
                raise InvalidArgumentError(
                    "augment(..., boxes=...) with a torchvision pipeline needs the boxes' layout: wrap it as "
                    "lc.vision.TorchVision(transform, box_format=...) with the bbox tensor's info.format "
                    "('xywh' for COCO) and normalized=True for 0..1 boxes."
                )
            layout = (self.box_format, self.normalized)
            pixels = convert_boxes(targets.boxes, layout, (self.box_format, False), width, height)
            inputs["boxes"] = tv_tensors.BoundingBoxes(
                torch.from_numpy(np.ascontiguousarray(pixels)),
                format=self.box_format.upper(),
                canvas_size=(height, width),
            )
        if targets.masks is not None:
            kxy = np.ascontiguousarray(targets.masks.transpose(2, 0, 1))  # torchvision's k x H x W
            inputs["masks"] = tv_tensors.Mask(torch.from_numpy(kxy))
        if targets.keypoints is not None:
            xy = np.ascontiguousarray(targets.keypoints[..., :2])
            inputs["keypoints"] = tv_tensors.KeyPoints(torch.from_numpy(xy), canvas_size=(height, width))
        if targets.count is not None:
            inputs["labels"] = torch.arange(targets.count)
        return inputs

    def _moved(self, targets: Targets, out: dict[str, Any]) -> Moved:
        chw = out["image"].numpy(force=True)
        image = chw[0] if targets.image.ndim == 2 else chw.transpose(1, 2, 0)
        height, width = chw.shape[-2:]
        n = targets.count
        keep = np.asarray(out["labels"].numpy(force=True), dtype=np.int64) if n is not None else None
        boxes = masks = keypoints = None
        if targets.boxes is not None and self.box_format is not None:
            pixels = np.asarray(out["boxes"].numpy(force=True), dtype=np.float64).reshape(-1, 4)
            if keep is not None and len(pixels) != len(keep):
                raise InvalidArgumentError(
                    f"augment: the torchvision pipeline kept {len(pixels)} boxes but {len(keep)} labels. "
                    "Drop boxes with v2.SanitizeBoundingBoxes() and its default labels_getter, which drops "
                    "the 'labels' entries with them."
                )
            layout = (self.box_format, self.normalized)
            boxes = convert_boxes(pixels, (self.box_format, False), layout, width, height)
        if targets.masks is not None:
            m = np.asarray(out["masks"].numpy(force=True)).astype(bool)
            masks = kept(m, n, keep, "masks").transpose(1, 2, 0)
        if targets.keypoints is not None:
            xy = np.asarray(out["keypoints"].numpy(force=True), dtype=np.float64)
            if xy.shape != targets.keypoints[..., :2].shape:
                raise InvalidArgumentError(
                    f"augment: the torchvision pipeline gave keypoints of shape {xy.shape} for "
                    f"{targets.keypoints[..., :2].shape}. Leave v2.SanitizeKeyPoints out: points moved out "
                    "of the image come back as (0, 0, 0) in the row."
                )
            moved = outside_to_zero(xy, targets.keypoints, height, width)
            keypoints = kept(moved, n, keep, "keypoint groups") if moved.ndim == 3 else moved
        return Moved(image, boxes, masks, keypoints, keep)


_PLAIN = (bool, int, float, str, type(None))


def _describe(value: Any, what: str) -> Any:
    """A transform (recursively: its public parameters and sub-transforms) as plain JSON values."""
    torch = require("torch", "Fingerprinting a torchvision pipeline", _INSTALL)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return [_describe(v, f"{what}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): _describe(v, f"{what}[{k!r}]") for k, v in value.items()}
    if isinstance(value, torch.nn.Module):
        return _describe_module(value, what)
    if isinstance(value, (enum.Enum, torch.dtype, torch.Tensor)):
        # An interpolation mode, a dtype to convert to, a Normalize's mean: values, named by their text.
        return value.tolist() if isinstance(value, torch.Tensor) else str(value)
    raise InvalidArgumentError(
        f"The torchvision pipeline cannot be fingerprinted: {what} is a {type(value).__name__} "
        f"({value!r:.60}), which has no stable description, so a checkpointed eval cannot recognise it. Use "
        "torchvision's own transforms (not v2.Lambda), or run without checkpoint_interval."
    )


def _describe_module(module: Any, what: str) -> dict[str, Any]:
    """A transform's type, public attributes (its parameters) and sub-modules."""
    kind = type(module)
    described: dict[str, Any] = {"type": f"{kind.__module__}.{kind.__qualname__}"}
    for name, v in vars(module).items():
        if not name.startswith("_") and name != "training":
            described[name] = _describe(v, f"{what}.{name}")
    for name, child in module.named_children():
        described[name] = _describe(child, f"{what}.{name}")
    return described
