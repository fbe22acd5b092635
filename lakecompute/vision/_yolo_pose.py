"""YOLO pose rows, as ultralytics reads and writes them: ``class cx cy w h`` then, per keypoint, ``x y``
and (with ``kpt_shape: [K, 3]``) a visibility, every coordinate normalized by the image's size.

``data.yaml`` says how many keypoints a row has (``kpt_shape: [K, 2 or 3]``), which keypoint a
horizontal flip turns each into (``flip_idx``, a permutation of ``0..K-1``: left eye <-> right eye), and
optionally their names per class (``kpt_names: {0: [nose, left_eye, ...]}``). All three are untrusted
input here, checked before any row is read; a row is checked against them token by token.

A dataset holds keypoints in pixels (the keypoints htype has one layout: COCO's ``x, y, visibility``);
`ingest_yolo` scales a row's points by its decoded image's size, `export_yolo` divides them back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError
from lakecompute.specs import htype_declaration

if TYPE_CHECKING:
    from lakecompute.datasets import Dataset, DatasetView

__all__ = ["PoseLayout", "mirrored"]

#: The data.yaml keys of a pose dataset.
POSE_KEYS = ("kpt_shape", "flip_idx", "kpt_names")


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def mirrored(names: Sequence[str]) -> list[int]:
    """``flip_idx`` from keypoint names: each name's mirror image (``left`` and ``right`` swapped, any
    case: ``left_eye`` <-> ``right_eye``, ``LeftHand`` <-> ``RightHand``), itself when there is none.

    Example:
        >>> mirrored(["nose", "left_eye", "right_eye"])
        [0, 2, 1]
    """

    def swap(m: re.Match[str]) -> str:
        word = m.group(0)
        other = "right" if word.lower() == "left" else "left"
        return other.upper() if word.isupper() else other.capitalize() if word[0].isupper() else other

    position = {n: k for k, n in enumerate(names)}
    return [position.get(re.sub(r"(?i)left|right", swap, n), k) for k, n in enumerate(names)]


@dataclass(frozen=True, slots=True)
class PoseLayout:
    """How many keypoints a pose row has, with how many values each, their flip and names."""

    count: int
    """Keypoints per object (``kpt_shape[0]``)."""
    dims: int
    """Values per keypoint: 3 (``x y visibility``) or 2 (``x y``, every point visible)."""
    flip_idx: tuple[int, ...] | None
    """The keypoint a horizontal flip turns each keypoint into (a permutation of ``0..count-1``); None:
    each keypoint its own (not spelled out: a declared count is not believed before rows hold it)."""
    names: tuple[str, ...] | None
    """The keypoints' names, when known."""

    # -- data.yaml in ----------------------------------------------------------------------------

    @classmethod
    def read(cls, path: str, config: dict[str, Any], n_classes: int) -> PoseLayout | None:
        """The pose layout ``data.yaml`` (at ``path``, parsed as ``config``) declares; None without
        ``kpt_shape`` (a detection or segmentation dataset).

        Raises:
            InvalidArgumentError: ``kpt_shape``, ``flip_idx`` or ``kpt_names`` is not what ultralytics
                takes (the key and the file named).
        """
        shape = config.get("kpt_shape")
        if shape is None:
            return None
        if not (
            isinstance(shape, list) and len(shape) == 2 and all(_integer(v) for v in shape) and shape[0] >= 1
        ) or shape[1] not in (2, 3):
            raise InvalidArgumentError(
                f"{path}: expected 'kpt_shape' as [number of keypoints, 2 or 3] (3: each keypoint has a "
                f"visibility). Got {shape!r:.120}. Fix the file."
            )
        count = int(shape[0])
        names = _read_names(path, config.get("kpt_names"), count, n_classes)
        flip = config.get("flip_idx")
        flip_idx = check_flip(flip, count, f"{path}: 'flip_idx'") if flip is not None else None
        if flip_idx is None and names:
            flip_idx = tuple(mirrored(names))
        return cls(count, int(shape[1]), flip_idx, names)

    def tensor_info(self) -> dict[str, Any]:
        """What `ingest_yolo`'s ``keypoints`` tensor is created with: the names and ``flip_idx``."""
        info: dict[str, Any] = {}
        if self.flip_idx is not None:
            info["flip_idx"] = list(self.flip_idx)
        if self.names is not None:
            info["keypoint_names"] = list(self.names)
        return info

    def parse(self, values: np.ndarray, where: str, fix: str) -> np.ndarray:
        """``(count, 3)`` normalized ``x, y, visibility`` of one row's keypoint values (visibility 2 for
        ``x y`` points).

        Raises:
            InvalidSampleError: a coordinate that is not a finite number in 0..1, or a visibility other
                than 0, 1 or 2 (on ``keypoints``, naming ``where``).
        """
        points = values.reshape(self.count, self.dims)
        xy = points[:, :2]
        if not (np.isfinite(xy).all() and xy.min() >= 0 and xy.max() <= 1):
            raise InvalidSampleError(
                "keypoints",
                f"{where}: expected keypoint coordinates as finite numbers in 0..1 (normalized by the "
                f"image's width and height). Got {' '.join(_plain(points.reshape(-1)))!r:.120}. {fix}",
                source=where,
            )
        if self.dims == 2:
            return np.concatenate([xy, np.full((self.count, 1), 2.0)], axis=1)
        if not np.isin(points[:, 2], (0.0, 1.0, 2.0)).all():
            raise InvalidSampleError(
                "keypoints",
                f"{where}: expected each keypoint's visibility (every third value after the box) as 0 "
                f"(not labelled), 1 (hidden) or 2 (visible). Got {_plain(points[:, 2])!r:.120}. {fix}",
                source=where,
            )
        return points

    def rule(self) -> str:
        """A pose row, for messages."""
        point = "x y v" if self.dims == 3 else "x y"
        return (
            f"'class cx cy w h' and {self.count} keypoints of '{point}' ({4 + self.count * self.dims} "
            f"numbers after the class: data.yaml's kpt_shape [{self.count}, {self.dims}])"
        )

    # -- export ----------------------------------------------------------------------------------

    @classmethod
    def of(cls, data: Dataset | DatasetView, flip_idx: Sequence[int] | None) -> PoseLayout:
        """The layout `export_yolo` writes for ``data``'s ``keypoints`` tensor: ``x y v`` points, as many
        as its ``keypoint_names`` (else as its samples hold); ``flip_idx`` given, else the tensor's (an
        `ingest_yolo`'s), else from the names (`mirrored`), else each keypoint its own.

        Raises:
            InvalidArgumentError: no ``keypoints`` tensor of htype keypoints; no way to tell how many
                keypoints; a ``flip_idx`` that is not a permutation of the keypoints.
        """
        tensor = data.tensors.get("keypoints") if "keypoints" in data.tensors else None
        if tensor is None or htype_declaration(tensor.htype).target != "keypoints":
            raise InvalidArgumentError(
                "export_yolo(task='pose') needs a tensor 'keypoints' of htype keypoints, one group per box "
                "(as lc.ingest_coco makes from person_keypoints files); the dataset has "
                f"{sorted(data.tensors)!r}."
            )
        info = tensor.info
        names = info.get("keypoint_names")
        count = len(names) if names else _count_in(tensor)
        if flip_idx is not None:
            flip = check_flip(list(flip_idx), count, "export_yolo's flip_idx")
        elif info.get("flip_idx") is not None:
            flip = check_flip(info.get("flip_idx"), count, "the keypoints tensor's info.flip_idx")
        else:
            flip = tuple(mirrored(names)) if names else tuple(range(count))
        return cls(count, 3, flip, tuple(names) if names else None)

    def config(self, n_classes: int) -> dict[str, Any]:
        """The pose keys of ``data.yaml``: ``kpt_shape``, ``flip_idx`` and (with names) ``kpt_names`` for
        every class, as ultralytics defaults them."""
        flip = list(self.flip_idx) if self.flip_idx is not None else list(range(self.count))
        out: dict[str, Any] = {"kpt_shape": [self.count, self.dims], "flip_idx": flip}
        if self.names is not None:
            out["kpt_names"] = {c: list(self.names) for c in range(n_classes)}
        return out

    def normalized(self, points: np.ndarray, canvas: tuple[int, int]) -> tuple[np.ndarray, int]:
        """``(k, count, 3)`` pixel keypoints of ``k`` objects as normalized rows, and how many labelled
        points lay off the image: those (and unlabelled points off it) become ``0 0 0``, as a pose row
        holds only coordinates in 0..1."""
        height, width = canvas
        out = np.asarray(points, dtype=np.float64).reshape(-1, self.count, 3).copy()
        out[..., 0] /= width
        out[..., 1] /= height
        xy = out[..., :2]
        off = ~(np.isfinite(xy) & (xy >= 0) & (xy <= 1)).all(axis=-1)
        lost = int((off & (out[..., 2] > 0)).sum())
        out[off] = 0.0
        return out, lost


def check_flip(value: object, count: int, what: str) -> tuple[int, ...]:
    """``value`` as a flip_idx of ``count`` keypoints: a permutation of ``0..count-1``.

    Raises:
        InvalidArgumentError: anything else (``what`` named).
    """
    if not (
        isinstance(value, (list, tuple))
        and len(value) == count  # before range(count): a declared count is not yet backed by anything
        and all(_integer(v) for v in value)
        and sorted(value) == list(range(count))
    ):
        raise InvalidArgumentError(
            f"{what} must list, for each of the {count} keypoints, the keypoint a horizontal flip turns it "
            f"into (a permutation of 0..{count - 1}, e.g. left eye <-> right eye). Got {value!r:.120}."
        )
    return tuple(int(v) for v in value)


def _read_names(path: str, value: object, count: int, n_classes: int) -> tuple[str, ...] | None:
    """data.yaml's ``kpt_names`` (``{class: [names]}``) as the one list of keypoint names it gives every
    class, or None when absent."""
    if value is None:
        return None
    lists = value.values() if isinstance(value, dict) else []
    ok = (
        isinstance(value, dict)
        and value
        and all(_integer(c) and 0 <= c < n_classes for c in value)
        and all(_distinct_names(n, count) for n in lists)
    )
    if not ok:
        raise InvalidArgumentError(
            f"{path}: expected 'kpt_names' as {{class index: [{count} distinct keypoint names]}}. "
            f"Got {value!r:.160}. Fix or remove it."
        )
    distinct = {tuple(n) for n in lists}
    if len(distinct) > 1:
        raise InvalidArgumentError(
            f"{path}: 'kpt_names' names other keypoints for some classes than for others; a dataset holds "
            "one keypoint schema (keypoints.info.keypoint_names). Give every class the same names, or "
            "split the dataset by class."
        )
    return next(iter(distinct))


def _distinct_names(names: object, count: int) -> bool:
    return (
        isinstance(names, list)
        and len(names) == count
        and all(isinstance(s, str) for s in names)
        and len(set(names)) == count
    )


def _count_in(tensor: Any) -> int:
    """How many keypoints the samples of a tensor without ``keypoint_names`` hold per object."""
    for i in range(len(tensor)):
        shape = tensor[i].shape
        if len(shape) >= 2 and shape[-1] == 3 and int(np.prod(shape)) > 0:
            return int(shape[-2])
    raise InvalidArgumentError(
        "export_yolo(task='pose') cannot tell how many keypoints an object has: the keypoints tensor has "
        "no keypoint_names and no sample holds keypoints. Create it with keypoint_names=[...]."
    )


def _plain(values: np.ndarray) -> list[str]:
    return [f"{v:g}" for v in np.asarray(values).reshape(-1).tolist()]
