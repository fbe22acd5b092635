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
from typing import Any

import numpy as np

from lakecompute.boxes import BBOX_FORMATS, BoxFormat, BoxLayout
from lakecompute.errors import InvalidArgumentError
from lakecompute.vision._common import require
from lakecompute.vision._targets import Moved, Targets, kept, outside_to_zero

__all__ = ["TorchVision"]

# Not in the vision extra: torch is large, and the user's torch decides which torchvision fits it.
_INSTALL = "pip install torch torchvision (a torchvision release made for your torch)"


class TorchVision:
    """A torchvision ``transforms.v2`` pipeline for `augment`.

    The pipeline is called with one dict, ``{"image": Image, "boxes": BoundingBoxes, "masks": Mask,
    "keypoints": KeyPoints, "labels": positions}`` (the targets `augment` was asked to move):

    * ``image``: the row's image as a ``C x H x W`` ``tv_tensors.Image`` (uint8 as stored);
    * ``boxes``: ``tv_tensors.BoundingBoxes`` in the bbox tensor's format (its info's ``format``), in
      pixels (normalized boxes are scaled by the image's size, and back by the new one), float32 as in
      torchvision's own datasets (so that a box on the image's edge stays on it after a resize), with
      the image's canvas size;
    * ``masks``: a ``k x H x W`` ``tv_tensors.Mask``, one channel per object;
    * ``keypoints``: ``(k, K, 2)`` ``tv_tensors.KeyPoints`` (the visibility stays with the row);
    * ``labels``: the objects' positions ``0..k-1``. ``v2.SanitizeBoundingBoxes()`` (its default
      ``labels_getter`` finds ``labels``) drops the entries of the boxes it removes, and so tells `augment`
      which objects survive: their masks, keypoints and ``objects`` columns are kept with them.

    The boxes' layout is the bbox tensor's own (`lakecompute.boxes.BoxLayout`): nothing needs saying.
    ``box_format`` / ``normalized`` may still be given, as a check: a layout other than the tensor's is
    refused, naming both. They are needed only for rows whose values do not come from a dataset's
    tensor (a plain dict handed to a transform).

    While it runs, torch's global generator is seeded from the sample's ``rng`` (inside
    ``torch.random.fork_rng``: the caller's torch draws are unchanged) and torch uses one intra-op thread
    (put back afterwards), so that worker processes forked after torch ran threaded do not hang.

    Wrapping also gives the pipeline a fingerprint (torchvision's transforms and their parameters), which
    a checkpointed eval (``checkpoint_interval``) needs to recognise its rerun; a transform holding a
    function (``v2.Lambda``) has none and is refused there.

    Args:
        transform: a torchvision ``transforms.v2`` transform (``v2.Compose([...])``).
        box_format: optional: the layout the boxes are expected in (``"xyxy"``, ``"xywh"`` or
            ``"cxcywh"``), checked against the bbox tensor's ``info.format``.
        normalized: optional: likewise, checked against the tensor's ``info.normalized``.

    Raises:
        InvalidArgumentError: a ``box_format`` that is not one of the three, or ``normalized`` without it.

    Example:
        >>> from torchvision.transforms import v2  # doctest: +SKIP
        >>> PIPELINE = lc.vision.TorchVision(  # doctest: +SKIP
        ...     v2.Compose([v2.RandomHorizontalFlip(), v2.SanitizeBoundingBoxes()]))
    """

    __slots__ = ("box_format", "normalized", "transform")

    def __init__(
        self, transform: Any, box_format: BoxFormat | None = None, normalized: bool | None = None
    ) -> None:
        if box_format is not None and box_format not in BBOX_FORMATS:
            raise InvalidArgumentError(
                f"TorchVision(box_format=...) must be one of {list(BBOX_FORMATS)!r}, the bbox tensor's "
                f"info.format. Got {box_format!r}."
            )
        if box_format is None and normalized is not None:
            raise InvalidArgumentError(
                "TorchVision(normalized=...) is a check of the bbox tensor's layout, given with its "
                "box_format. Give both, or neither (the layout is read from the tensor)."
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

    def layout(self, tensor: BoxLayout | None, boxes: str) -> BoxLayout:
        """The layout the boxes of tensor ``boxes`` move in: the tensor's (``tensor``, None when the row
        does not say), checked against ``box_format`` / ``normalized`` when they are given.

        Raises:
            InvalidArgumentError: a given layout other than the tensor's (both named), or neither known.
        """
        if tensor is None:
            if self.box_format is None:
                raise InvalidArgumentError(
                    f"augment(..., boxes={boxes!r}): the row does not say its boxes' layout (its values do "
                    "not come from a dataset's bbox tensor). Wrap the pipeline as lc.vision.TorchVision("
                    "transform, box_format=..., normalized=...) with the boxes' layout."
                )
            return BoxLayout(self.box_format, bool(self.normalized))
        declared_normalized = tensor.normalized if self.normalized is None else self.normalized
        if self.box_format not in (None, tensor.format) or declared_normalized != tensor.normalized:
            declared = BoxLayout(self.box_format or tensor.format, declared_normalized)
            raise InvalidArgumentError(
                f"augment(..., boxes={boxes!r}): the pipeline says the boxes are {declared.describe()}, but "
                f"the bbox tensor {boxes!r} holds them {tensor.describe()}. Leave box_format and "
                "normalized out of lc.vision.TorchVision (the tensor's layout is used), or fix them."
            )
        return tensor

    def apply(self, targets: Targets, seed: int, layout: BoxLayout | None) -> Moved:
        """Run the pipeline on one row's targets (boxes in ``layout``) with torch's generator seeded by
        ``seed``."""
        torch = require("torch", "Augmenting with torchvision", _INSTALL)
        inputs = self._inputs(targets, layout)
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
        return _moved(targets, out, layout)

    def _inputs(self, targets: Targets, layout: BoxLayout | None) -> dict[str, Any]:
        torch = require("torch", "Augmenting with torchvision", _INSTALL)
        tv_tensors = require("torchvision.tv_tensors", "Augmenting with torchvision", _INSTALL)
        image = np.ascontiguousarray(targets.image)
        canvas = image.shape[:2]
        chw = torch.from_numpy(image[:, :, None] if image.ndim == 2 else image).permute(2, 0, 1)
        inputs: dict[str, Any] = {"image": tv_tensors.Image(chw)}
        if targets.boxes is not None and layout is not None:
            pixels = layout.convert(targets.boxes, BoxLayout(layout.format), canvas)
            inputs["boxes"] = tv_tensors.BoundingBoxes(
                torch.from_numpy(np.ascontiguousarray(pixels, dtype=np.float32)),
                format=layout.format.upper(),
                canvas_size=canvas,
            )
        if targets.masks is not None:
            kxy = np.ascontiguousarray(targets.masks.transpose(2, 0, 1))  # torchvision's k x H x W
            inputs["masks"] = tv_tensors.Mask(torch.from_numpy(kxy))
        if targets.keypoints is not None:
            xy = np.ascontiguousarray(targets.keypoints[..., :2])
            inputs["keypoints"] = tv_tensors.KeyPoints(torch.from_numpy(xy), canvas_size=canvas)
        if targets.count is not None:
            inputs["labels"] = torch.arange(targets.count)
        return inputs


def _moved(targets: Targets, out: dict[str, Any], layout: BoxLayout | None) -> Moved:
    """What the pipeline gave back, in the row's layout (boxes in ``layout``)."""
    chw = out["image"].numpy(force=True)
    image = chw[0] if targets.image.ndim == 2 else chw.transpose(1, 2, 0)
    canvas = (int(chw.shape[-2]), int(chw.shape[-1]))
    n = targets.count
    keep = np.asarray(out["labels"].numpy(force=True), dtype=np.int64) if n is not None else None
    boxes = masks = keypoints = None
    if targets.boxes is not None and layout is not None:
        pixels = np.asarray(out["boxes"].numpy(force=True), dtype=np.float64).reshape(-1, 4)
        if keep is not None and len(pixels) != len(keep):
            raise InvalidArgumentError(
                f"augment: the torchvision pipeline kept {len(pixels)} boxes but {len(keep)} labels. "
                "Drop boxes with v2.SanitizeBoundingBoxes() and its default labels_getter, which drops "
                "the 'labels' entries with them."
            )
        boxes = BoxLayout(layout.format).convert(pixels, layout, canvas)
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
        moved = outside_to_zero(xy, targets.keypoints, canvas[0], canvas[1])
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
