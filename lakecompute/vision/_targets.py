"""One row's image and targets as every augmentation library takes them, and the row they give back.

`augment` reads a row once into `Targets` (checked: shapes that do not fit together are refused before any
library sees them), hands it to a library's wrapper (`Albumentations`, `TorchVision`), and writes the
wrapper's `Moved` back in the row's layout. Only the conversion between the row and a library's inputs
differs between libraries; reading, checking, seeding and writing back are here, once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from lakecompute.errors import InvalidArgumentError
from lakecompute.perprocess import PerProcess

__all__ = ["Moved", "Targets", "check_objects", "kept", "read_targets", "seeded", "write_back"]


@dataclass(frozen=True, slots=True)
class Targets:
    """One row's image and targets, as read (before any library sees them)."""

    image: np.ndarray
    """``H x W`` or ``H x W x C``."""
    boxes: np.ndarray | None
    """``(k, 4)`` float64, in the bbox tensor's own layout; None when not moved."""
    masks: np.ndarray | None
    """``H x W x k`` (a ``H x W`` mask is one object); None when not moved."""
    keypoints: np.ndarray | None
    """``(k, K, 3)`` or ``(K, 3)`` float64 rows of x, y, visibility; None when not moved."""
    count: int | None
    """The number of objects (boxes, else mask channels); None when neither is moved."""


@dataclass(frozen=True, slots=True)
class Moved:
    """What a library gave back, in the row's layout, with the objects it dropped already left out."""

    image: np.ndarray
    """The new image, ``H' x W'`` or ``H' x W' x C``."""
    boxes: np.ndarray | None
    """``(k', 4)`` in the bbox tensor's layout."""
    masks: np.ndarray | None
    """``H' x W' x k'`` bool."""
    keypoints: np.ndarray | None
    """The keypoints' layout with ``k'`` objects; a point out of the image or unlabelled is ``(0, 0, 0)``."""
    keep: np.ndarray | None
    """The positions (among the ``k`` given) of the ``k'`` objects kept; None when there are no objects."""


def _array(sample_in: Any, name: str) -> np.ndarray:
    return np.asarray(sample_in[name].numpy())


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidArgumentError(message)


def read_targets(
    sample_in: Any, image: str, boxes: str | None, masks: str | None, keypoints: str | None
) -> Targets:
    """Read the named tensors of one row, refusing shapes that do not fit together.

    Raises:
        InvalidArgumentError: an image that is not ``H x W (x C)``, boxes that are not ``(k, 4)``, masks
            that are not ``H x W (x k)`` of the image's size or not one per box, keypoints whose last axis
            is not 3 or that are not one group per box.
    """
    img = _array(sample_in, image)
    _check(img.ndim in (2, 3), f"augment: image {image!r} must be H x W or H x W x C. Got shape {img.shape}.")
    b = k = m = None
    if boxes:
        b = np.asarray(_array(sample_in, boxes), dtype=np.float64)
        b = b.reshape(0, 4) if b.size == 0 else b
        _check(
            b.ndim == 2 and b.shape[1] == 4,
            f"augment: boxes {boxes!r} must be (k, 4), one row per object. Got shape {b.shape}. "
            "Pass a bbox tensor's sample.",
        )
        k = len(b)
    if masks:
        m = _array(sample_in, masks)
        m = m[:, :, None] if m.ndim == 2 else m
        _check(
            m.ndim == 3 and m.shape[:2] == img.shape[:2],
            f"augment: masks {masks!r} must be H x W x k with the image's H x W {img.shape[:2]}. "
            f"Got shape {m.shape}. Pass a binary_mask tensor's sample of the same image.",
        )
        _check(
            k is None or m.shape[2] == k,
            f"augment: masks {masks!r} has {m.shape[2]} channels but boxes {boxes!r} has {k} boxes. "
            "Expected one mask channel per box.",
        )
        k = m.shape[2] if k is None else k
    kp = _keypoints(sample_in, keypoints, k) if keypoints else None
    return Targets(img, b, m, kp, k)


def check_objects(sample_in: Any, objects: Sequence[str], count: int | None, by: str) -> None:
    """Refuse an ``objects`` column whose first axis is not one entry per object (``count``, from the
    tensor ``by``): kept in step with the boxes, its entries would go to the wrong objects.

    Raises:
        InvalidArgumentError: naming the column, the row (``sample_in.index``, when it has one), the
            entries and the objects.
    """
    if count is None:
        return
    row = getattr(sample_in, "index", None)
    where = f" in row {row}" if isinstance(row, (int, np.integer)) else ""
    for name in objects:
        values = _array(sample_in, name)
        entries = len(values) if values.ndim else None
        if entries != count:
            got = "a single value" if entries is None else f"{entries} entries"
            raise InvalidArgumentError(
                f"augment: objects column {name!r} has {got}{where}, but {by!r} has {count} objects. "
                f"Expected one entry per object (its first axis), kept in step with {by!r}: fix the row, "
                "or leave the column out of objects=."
            )


def _keypoints(sample_in: Any, name: str, count: int | None) -> np.ndarray:
    kp = np.asarray(_array(sample_in, name), dtype=np.float64)
    _check(
        kp.ndim in (2, 3) and kp.shape[-1] == 3,
        f"augment: keypoints {name!r} must be (k, K, 3) or (K, 3) rows of x, y, visibility. "
        f"Got shape {kp.shape}. Pass a keypoints tensor's sample.",
    )
    _check(
        kp.ndim == 2 or count is None or len(kp) == count,
        f"augment: keypoints {name!r} has {len(kp)} groups but the row has {count} objects. "
        "Expected one group of keypoints per box.",
    )
    return kp


def kept(value: np.ndarray, count: int | None, keep: np.ndarray | None, what: str) -> np.ndarray:
    """A per-object output (first axis: objects) with only the kept objects: a library may already have
    left the dropped ones out (then it has ``len(keep)`` entries) or not (then it has all ``count``)."""
    if keep is None or count is None or len(value) == len(keep):
        return value
    if len(value) == count:
        return np.asarray(value[keep])
    raise InvalidArgumentError(
        f"augment: the pipeline gave {len(value)} {what} for {count} objects of which it kept {len(keep)}. "
        f"Expected {count} or {len(keep)}: a transform dropped {what} without their objects."
    )


def outside_to_zero(xy: np.ndarray, given: np.ndarray, height: int, width: int) -> np.ndarray:
    """Moved ``(..., 2)`` points joined with their given visibility; a point out of the image, or never
    labelled (visibility 0), becomes ``(0, 0, 0)`` as COCO writes it."""
    out = np.concatenate([np.asarray(xy, dtype=np.float64), given[..., 2:3]], axis=-1)
    x, y = out[..., 0], out[..., 1]
    gone = (x < 0) | (x >= width) | (y < 0) | (y >= height) | (given[..., 2] == 0)
    out[gone] = 0
    return out


def write_back(
    moved: Moved, names: dict[str, str | None], sample_in: Any, objects: Sequence[str]
) -> dict[str, Any]:
    """The row's new values by tensor name: the moved targets, and the ``objects`` tensors' kept entries."""
    result: dict[str, Any] = {str(names["image"]): moved.image}
    for key, value in (("boxes", moved.boxes), ("masks", moved.masks), ("keypoints", moved.keypoints)):
        name = names[key]
        if name:
            result[name] = value
    for name in objects:
        values = _array(sample_in, name)
        result[name] = values[moved.keep] if moved.keep is not None else values
    return result


# Each library draws from a generator shared by the whole process (torch's global one; the one an
# albumentations pipeline keeps on itself), so seeding it and drawing from it must not interleave between
# threads (the threaded scheduler, a loader's threads): the lock makes seed-then-transform one step. A
# child forked while another thread held it gets a new one.
_SEEDED = PerProcess(threading.Lock)


@contextmanager
def seeded() -> Iterator[None]:
    """Hold this process's augmentation lock: seeding a library and drawing from it is one step."""
    with _SEEDED.get():
        yield
