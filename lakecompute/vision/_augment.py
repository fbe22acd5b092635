"""Augmenting an image together with its targets: the library does the geometry, we do the plumbing.

`augment` hands one row's image, boxes, masks and keypoints to an albumentations or torchvision
``transforms.v2`` pipeline seeded from the eval's per-sample ``rng``, and gives back the row's new values
with every per-object column kept in step: a box the crop drops takes its label, its mask channel and its
keypoints with it. Reading and checking the row, seeding, and writing back are shared (`_targets`); each
library's wrapper (`Albumentations` here, `TorchVision` in `_torchvision`) only converts to and from its
library's inputs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from lakecompute.boxes import BoxLayout
from lakecompute.compute import describe_for_fingerprints
from lakecompute.errors import InvalidArgumentError
from lakecompute.specs import HTYPES
from lakecompute.vision._common import require
from lakecompute.vision._targets import Moved, Targets, check_objects, read_targets, seeded, write_back
from lakecompute.vision._torchvision import TorchVision

__all__ = ["Albumentations", "augment"]

_SEED_RANGE = 2**32


class Albumentations:
    """An albumentations pipeline that an eval can fingerprint, so that it can be checkpointed and resumed.

    A checkpointed eval (``checkpoint_interval``) recognises its rerun by a fingerprint of the code and of
    every value the compute function reads; an ``albumentations.Compose`` has no stable identity of its
    own, so wrap it: ``PIPELINE = lc.vision.Albumentations(A.Compose([...], bbox_params=...))``. Its
    fingerprint is albumentations' own description of the pipeline (``A.to_dict``): changing a transform
    or a probability makes a different eval. `augment` takes it as it takes the bare pipeline.

    Attributes:
        transform: the ``albumentations.Compose``.
    """

    __slots__ = ("transform",)

    def __init__(self, transform: Any) -> None:
        self.transform = transform

    def __lakecompute_fingerprint__(self) -> str:
        """albumentations' description of the pipeline, as JSON with sorted keys."""
        albumentations = require("albumentations", "Fingerprinting an albumentations pipeline")
        try:
            description = albumentations.to_dict(self.transform)
        except Exception as exc:  # albumentations raises NotImplementedError or ValueError (Lambda, ...)
            raise InvalidArgumentError(
                f"The albumentations pipeline cannot describe itself (A.to_dict: {exc}), so a checkpointed "
                "eval cannot recognise it. Use transforms albumentations can serialise (not A.Lambda), or "
                "run without checkpoint_interval."
            ) from exc
        return json.dumps(description, sort_keys=True, default=repr)

    def __repr__(self) -> str:
        return f"Albumentations({self.transform!r:.200})"

    def layout(self, tensor: BoxLayout | None, boxes: str) -> BoxLayout:
        """The layout the boxes of tensor ``boxes`` move in: the tensor's (``tensor``; None when the row
        does not say), which must be the one the pipeline's ``BboxParams.format`` names.

        Raises:
            InvalidArgumentError: no ``bbox_params``, or a ``BboxParams.format`` other than the tensor's
                layout (both named, with the format that fits).
        """
        fmt = getattr(_processor(self.transform, "bboxes", "boxes", "bbox_params").params, "format", None)
        declared = _ALBUMENTATIONS_LAYOUTS.get(str(fmt))
        if declared is None:
            raise InvalidArgumentError(
                f"augment(..., boxes={boxes!r}) takes an albumentations BboxParams.format of "
                f"{sorted(_ALBUMENTATIONS_LAYOUTS)!r}. Got {fmt!r}."
            )
        if tensor is None or tensor == declared:
            return declared
        fits = [name for name, layout in _ALBUMENTATIONS_LAYOUTS.items() if layout == tensor]
        fix = (
            f"use BboxParams(format={fits[0]!r})"
            if fits
            else "albumentations has no format for that layout; store the boxes in one it has (ds.create_"
            "tensor(..., htype='bbox', format='xywh'))"
        )
        raise InvalidArgumentError(
            f"augment(..., boxes={boxes!r}): the pipeline's BboxParams(format={fmt!r}) says the boxes are "
            f"{declared.describe()}, but the bbox tensor {boxes!r} holds them {tensor.describe()}. To move "
            f"them as they are, {fix}."
        )

    def apply(self, targets: Targets, seed: int, layout: BoxLayout | None) -> Moved:
        """Run the pipeline on one row's targets with albumentations seeded by ``seed`` (the boxes are in
        the pipeline's format, ``layout``)."""
        transform = self.transform
        transform.set_random_seed(seed)
        out = transform(**_inputs(transform, targets))
        keep = np.arange(targets.count) if targets.count is not None else None
        boxes = None
        if targets.boxes is not None:
            boxes_kept = np.asarray(out["bboxes"], dtype=np.float64).reshape(-1, 5)
            keep = boxes_kept[:, 4].astype(np.int64)
            boxes = boxes_kept[:, :4]
        masks = None
        if targets.masks is not None:
            height, width = np.asarray(out["image"]).shape[:2]
            channels = [np.asarray(c, dtype=bool) for c in out["masks"]]
            m = np.stack(channels, axis=-1) if channels else np.zeros((height, width, 0), dtype=bool)
            masks = m[:, :, keep] if keep is not None else m
        keypoints = None
        if targets.keypoints is not None:
            given = targets.keypoints
            moved = _keypoints(out["keypoints"], given.shape, given)
            keypoints = moved[keep] if keep is not None and moved.ndim == 3 else moved
        return Moved(np.asarray(out["image"]), boxes, masks, keypoints, keep)


#: albumentations' box formats, as layouts.
_ALBUMENTATIONS_LAYOUTS = {
    "coco": BoxLayout("xywh"),
    "pascal_voc": BoxLayout("xyxy"),
    "albumentations": BoxLayout("xyxy", normalized=True),
    "yolo": BoxLayout("cxcywh", normalized=True),
}


def _processor(transform: Any, target: str, what: str, params: str) -> Any:
    processors = getattr(transform, "processors", None)
    if not isinstance(processors, dict) or target not in processors:
        raise InvalidArgumentError(
            f"augment(..., {what}=...) needs a transform that moves {target}: build it with "
            f"albumentations.Compose([...], {params}=...)."
        )
    return processors[target]


def _inputs(transform: Any, targets: Targets) -> dict[str, Any]:
    """albumentations' keyword arguments for one row."""
    inputs: dict[str, Any] = {"image": targets.image}
    if targets.boxes is not None:
        params = _processor(transform, "bboxes", "boxes", "bbox_params").params
        b = targets.boxes
        # A last column carries each box's index through the transform, so that the boxes it keeps
        # say which objects survive (albumentations keeps extra columns as they are).
        inputs["bboxes"] = np.column_stack([b, np.arange(len(b), dtype=np.float64)])
        # BboxParams(label_fields=[...]) makes albumentations want those fields: the objects' positions,
        # which it drops with their boxes (the row's own per-object columns follow the index column).
        for field in getattr(params, "label_fields", None) or ():
            inputs[field] = np.arange(len(b))
    if targets.masks is not None:
        m = targets.masks.astype(np.uint8)
        # One mask per object (albumentations' ``masks``): any number of objects, none included, where
        # one H x W x k array would meet OpenCV's limits on channels.
        inputs["masks"] = [m[:, :, j] for j in range(m.shape[2])]
    if targets.keypoints is not None:
        fmt = getattr(
            _processor(transform, "keypoints", "keypoints", "keypoint_params").params, "format", None
        )
        if fmt != "xy":
            raise InvalidArgumentError(
                "augment(..., keypoints=...) needs keypoint_params=A.KeypointParams(format='xy'). "
                f"Got format {fmt!r}."
            )
        flat = targets.keypoints.reshape(-1, 3)
        inputs["keypoints"] = np.column_stack([flat, np.arange(len(flat), dtype=np.float64)])
    return inputs


def _keypoints(out: np.ndarray, shape: tuple[int, ...], given: np.ndarray) -> np.ndarray:
    """The transformed keypoints in the row's ``(n, K, 3)`` layout; those the transform dropped (outside
    the image) and those never labelled (visibility 0) become ``(0, 0, 0)``, as COCO writes them."""
    flat = np.zeros((int(np.prod(shape[:-1])), 3), dtype=np.float64)
    out = np.asarray(out, dtype=np.float64).reshape(-1, 4)
    idx = out[:, 3].astype(np.int64)
    flat[idx] = out[:, :3]
    flat[given.reshape(-1, 3)[:, 2] == 0] = 0
    return flat.reshape(shape)


def _tensor_layout(sample_in: Any, boxes: str) -> BoxLayout | None:
    """The layout of the row's boxes, as the tensor they were read from states it: its htype's declaration
    says it holds boxes, its info how they are written. None when the row does not say (a value not read
    from a dataset's box tensor: a plain array, a generic tensor)."""
    value = sample_in[boxes]
    declared = HTYPES.get(getattr(value, "htype", None) or "")
    return BoxLayout.of(value) if declared is not None and declared.target == "boxes" else None


def _pipeline(transform: Any) -> Albumentations | TorchVision:
    """The wrapper of a pipeline: as given, or a bare one wrapped by the library that made it."""
    if isinstance(transform, (Albumentations, TorchVision)):
        return transform
    torch = sys.modules.get("torch")  # a torch module (a v2 transform, or the user's own) imported torch
    if torch is not None and isinstance(transform, torch.nn.Module):
        return TorchVision(transform)
    if not callable(getattr(transform, "set_random_seed", None)):
        raise InvalidArgumentError(
            "augment() takes an albumentations.Compose or a torchvision transforms.v2 transform (or either "
            f"wrapped in lc.vision.Albumentations / lc.vision.TorchVision). Got {type(transform).__name__}."
        )
    return Albumentations(transform)


def augment(
    transform: Any,
    sample_in: Any,
    rng: np.random.Generator,
    *,
    image: str = "images",
    boxes: str | None = None,
    masks: str | None = None,
    keypoints: str | None = None,
    objects: Sequence[str] = (),
) -> dict[str, Any]:
    """Apply an albumentations or torchvision pipeline to one row's image and targets, seeded by ``rng``.

    Call it inside a compute function that takes ``rng`` (an eval, or a loader's ``transform=``). The
    pipeline's seed is the first draw of ``rng`` (``rng.integers(2**32)``), so a run gives the same images
    and targets for any workers and scheduler, and after a resume. Nothing here computes geometry: the
    library moves the boxes, masks and keypoints; this function feeds it the row and puts its output back
    in the row's layout:

    * ``boxes``: ``(k', 4)`` in the tensor's own layout, which `augment` reads from the bbox tensor
      (its info's ``format`` and ``normalized``; `lakecompute.boxes.BoxLayout`). albumentations: the
      pipeline's ``BboxParams.format`` must name that layout (``coco`` for ``xywh`` pixels,
      ``pascal_voc`` for ``xyxy`` pixels, ``albumentations`` for ``xyxy`` normalized, ``yolo`` for
      ``cxcywh`` normalized), else it is refused naming both; ``label_fields`` may be given (they get
      the objects' positions). torchvision: nothing to say (`TorchVision`'s ``box_format`` is only a
      check); the boxes reach it in pixels, float32. Boxes the pipeline drops are gone, and so are
      their entries in every per-object column: ``masks`` channels, ``keypoints`` and the ``objects``.
    * ``masks``: a ``binary_mask`` ``H x W x k`` (or ``H x W``, which comes back as ``H x W x 1``),
      transformed like the image (nearest neighbour).
    * ``keypoints``: ``(k, K, 3)`` COCO rows; a keypoint the transform moves out of the image, or one
      never labelled (visibility 0), comes back as ``(0, 0, 0)``.

    Args:
        transform: an ``albumentations.Compose`` or a torchvision ``transforms.v2`` transform, or one
            wrapped in `Albumentations` or `TorchVision` (needed for checkpointed evals; for torchvision,
            also to move boxes).
        sample_in: the compute function's ``sample_in`` (a dataset row).
        rng: the compute function's ``rng``.
        image: the image tensor.
        boxes: the bbox tensor to move with the image.
        masks: the binary_mask tensor to move with the image.
        keypoints: the keypoints tensor to move with the image.
        objects: other per-object tensors (first axis one entry per box: labels, ids, areas) to keep in
            step with the boxes.

    Returns:
        The new values by tensor name: append them (with any tensors you copy) to ``sample_out``.

    Raises:
        InvalidArgumentError: targets whose shapes do not fit together (boxes not ``(k, 4)``, masks not of
            the image's size or not one per box, keypoints not ``(..., 3)``); boxes or keypoints given to an
            albumentations pipeline without ``bbox_params`` or ``keypoint_params`` (format ``"xy"``); a
            layout said by the pipeline (``BboxParams.format``, ``TorchVision(box_format=...)``) other
            than the bbox tensor's; boxes whose layout nobody says (a row not read from a dataset, and
            a torchvision pipeline without ``box_format``); an ``objects`` column that is not one entry
            per box (naming the column and the row).

    Example:
        >>> import albumentations as A  # doctest: +SKIP
        >>> flip = A.Compose([A.HorizontalFlip()], bbox_params=A.BboxParams(format="coco"))  # doctest: +SKIP
        >>> @lc.compute  # doctest: +SKIP
        ... def augmented(sample_in, sample_out, rng):
        ...     row = lc.vision.augment(flip, sample_in, rng, boxes="boxes", objects=["categories"])
        ...     sample_out.append(row)
    """
    pipeline = _pipeline(transform)
    layout = pipeline.layout(_tensor_layout(sample_in, boxes), boxes) if boxes else None
    targets = read_targets(sample_in, image, boxes, masks, keypoints)
    check_objects(sample_in, objects, targets.count, str(boxes or masks))
    seed = int(rng.integers(_SEED_RANGE))
    with seeded():
        moved = pipeline.apply(targets, seed, layout)
    names = {"image": image, "boxes": boxes, "masks": masks, "keypoints": keypoints}
    return write_back(moved, names, sample_in, objects)


def _bare_pipeline(value: Any) -> Any:
    """What identifies a bare albumentations or torchvision ``v2`` pipeline given to a compute function
    (as its wrapper, `Albumentations` or `TorchVision`, would say), so that it is fingerprinted by its
    transforms and parameters; ``NotImplemented`` for anything else, or a pipeline that cannot describe
    itself (``A.Lambda``: the eval then warns that it is identified by its type alone). Neither library is
    imported here: a value of one exists only once its program imported it."""
    albumentations = sys.modules.get("albumentations")
    if albumentations is not None and isinstance(value, albumentations.core.serialization.Serializable):
        wrapped: Albumentations | TorchVision = Albumentations(value)
    else:
        v2 = sys.modules.get("torchvision.transforms.v2")
        if v2 is None or not isinstance(value, v2.Transform):
            return NotImplemented
        wrapped = TorchVision(value)
    try:
        return wrapped.__lakecompute_fingerprint__()
    except InvalidArgumentError:
        return NotImplemented


describe_for_fingerprints(_bare_pipeline)
