"""Training torchvision's detection models from a loader: a batch as ``(images, targets)``.

torchvision's detection models (Faster R-CNN, Mask R-CNN, RetinaNet, FCOS, SSD) take a list of float
``C x H x W`` images in 0..1 and a list of target dicts (``boxes`` ``xyxy`` float32 pixels, ``labels``
int64 with 0 the background, ``masks`` uint8 ``N x H x W``). `DetectionCollate` turns a batch of
``ds.pytorch()`` (or ``ds.batches()``) into exactly that, reading the boxes' layout from their tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.boxes import BoxLayout
from lakecompute.errors import InvalidArgumentError, TensorDoesNotExistError
from lakecompute.vision._common import require

if TYPE_CHECKING:
    from lakecompute.datasets import Dataset, DatasetView

__all__ = ["DetectionCollate"]

_INSTALL = "pip install torch torchvision (a torchvision release made for your torch)"
_CORNERS = BoxLayout("xyxy")


@dataclass(frozen=True, slots=True)
class _Names:
    """The tensors a batch's objects are read from."""

    image: str
    boxes: str
    labels: str
    masks: str | None
    crowd: str | None


class DetectionCollate:
    """A detection batch as torchvision's detection models take it: ``(images, targets)``.

    Give it to ``ds.pytorch(collate_fn=...)`` (it pickles, so loader workers run it) or call it on a
    batch. For each image of the batch:

    * the image: a float32 ``C x H x W`` tensor in 0..1 (a stored ``H x W x C`` uint8 image / 255);
    * ``boxes``: ``(k, 4)`` float32 ``xyxy`` pixels, converted from the bbox tensor's own layout (its
      info's ``format`` and ``normalized``, `lakecompute.boxes.BoxLayout`);
    * ``labels``: ``(k,)`` int64, the class index plus ``label_offset``: torchvision's models keep 0 for
      the background, so with the default 1 the dataset's class ``c`` is the model's ``c + 1`` (build
      the model with ``num_classes=len(class_names) + 1``);
    * ``masks`` (when a binary_mask tensor is named): ``(k, H, W)`` uint8, one channel per object.

    Crowd regions (``iscrowd`` 1, when the batch has that tensor) are left out, as torchvision's own
    COCO reference does: they mark areas to ignore, not objects to learn. So are boxes without area
    (``x2 <= x1`` or ``y2 <= y1``), which the models refuse while training.

    Args:
        data: the dataset or view the loader reads (its tensors' layouts are read here, once).
        image: the image tensor.
        boxes: the bbox tensor.
        labels: the class_label tensor, one label per box (``categories`` after `ingest_coco`).
        masks: a binary_mask tensor (``H x W x k``) to hand over as ``masks`` (Mask R-CNN), or None.
        crowd: the per-object crowd flags; left out objects are those flagged. None: keep every object.
        label_offset: added to every class index (1: class 0 becomes the model's 1, after background).

    Raises:
        TensorDoesNotExistError: a named tensor is not in ``data``.
        InvalidArgumentError: ``boxes`` is not a bbox tensor.

    Example:
        >>> import torchvision  # doctest: +SKIP
        >>> collate = lc.vision.DetectionCollate(ds)  # doctest: +SKIP
        >>> model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(  # doctest: +SKIP
        ...     weights=None, weights_backbone=None, num_classes=len(ds.categories.info.class_names) + 1)
        >>> for images, targets in ds.pytorch(4, collate_fn=collate):  # doctest: +SKIP
        ...     loss = sum(model(images, targets).values())
    """

    __slots__ = ("label_offset", "layout", "names")

    def __init__(
        self,
        data: Dataset | DatasetView,
        *,
        image: str = "images",
        boxes: str = "boxes",
        labels: str = "categories",
        masks: str | None = None,
        crowd: str | None = "iscrowd",
        label_offset: int = 1,
    ) -> None:
        tensors = data.tensors
        for name in (image, boxes, labels, masks):
            if name is not None and name not in tensors:
                raise TensorDoesNotExistError(name, list(tensors))
        self.layout = BoxLayout.of(tensors[boxes])
        self.names = _Names(image, boxes, labels, masks, crowd if crowd in tensors else None)
        self.label_offset = int(label_offset)

    def __call__(self, batch: dict[str, Any]) -> tuple[list[Any], list[dict[str, Any]]]:
        """``(images, targets)`` of one batch (a dict of stacked arrays or tensors, or lists of them)."""
        names = self.names
        wanted = [n for n in (names.image, names.boxes, names.labels, names.masks, names.crowd) if n]
        missing = [n for n in wanted if n not in batch]
        if missing:
            raise InvalidArgumentError(
                f"DetectionCollate needs the tensors {wanted!r} in the batch; it lacks {missing!r}. "
                f"Read them: ds.pytorch(..., tensors={wanted!r})."
            )
        images, targets = [], []
        for j in range(len(batch[names.image])):
            image, target = self._one(batch, j)
            images.append(image)
            targets.append(target)
        return images, targets

    def _one(self, batch: dict[str, Any], j: int) -> tuple[Any, dict[str, Any]]:
        torch = require("torch", "DetectionCollate", _INSTALL)
        names = self.names
        pixels = _numpy(batch[names.image][j])
        chw = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
        image = torch.from_numpy(np.ascontiguousarray(chw)).float().div_(255.0)
        canvas = (int(chw.shape[1]), int(chw.shape[2]))
        boxes = self.layout.convert(_numpy(batch[names.boxes][j]).reshape(-1, 4), _CORNERS, canvas)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        if names.crowd is not None:
            keep &= _numpy(batch[names.crowd][j]).reshape(-1) == 0
        labels = _numpy(batch[names.labels][j]).reshape(-1).astype(np.int64) + self.label_offset
        target: dict[str, Any] = {
            "boxes": torch.from_numpy(np.ascontiguousarray(boxes[keep], dtype=np.float32)),
            "labels": torch.from_numpy(labels[keep]),
        }
        if names.masks is not None:
            m = _numpy(batch[names.masks][j])
            m = m[:, :, None] if m.ndim == 2 else m
            target["masks"] = torch.from_numpy(
                np.ascontiguousarray(m.transpose(2, 0, 1)[keep], dtype=np.uint8)
            )
        return image, target

    def __repr__(self) -> str:
        layout, offset = self.layout.describe(), self.label_offset
        return f"DetectionCollate({self.names}, boxes {layout}, label_offset={offset})"


def _numpy(value: Any) -> np.ndarray:
    """A batch entry (numpy array, torch tensor) as numpy."""
    to_numpy = getattr(value, "numpy", None)
    return np.asarray(to_numpy() if callable(to_numpy) and not isinstance(value, np.ndarray) else value)
