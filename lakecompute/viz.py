"""Pictures of data: contact sheets of image samples with their labels, and the HTML view of a dataset
in a notebook.

Which samples to show is decided by `sample_indices`: spread over the whole dataset, and over every
class when there is a class_label tensor, so that data stored class by class does not show one class only.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lakecompute.boxes import BoxLayout
from lakecompute.errors import (
    InvalidArgumentError,
    LakeComputeError,
    RaggedShapeError,
    TensorDoesNotExistError,
)
from lakecompute.specs import HType, Target, htype_declaration

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "MAX_CELLS",
    "class_label_tensors",
    "contact_sheet",
    "dataset_html",
    "draw_targets",
    "image_tensors",
    "sample_indices",
    "target_tensors",
    "to_pil",
]

MAX_CELLS = 1024
"""The most images one contact sheet holds (1024 cells of 96 px are a 30-megapixel PNG)."""

Positions = Sequence[int] | np.ndarray
"""Sample positions: a range, a list, or an integer array (a view's ``positions``)."""

_CAPTION = 14  # pixels of caption under each image (Pillow's default bitmap font is 11 px high)
_AUTO = "auto"


def image_tensors(ds: Any) -> list[str]:
    """The names of the tensors of ``ds`` whose samples are images.

    That is htype ``image``, or uint8 samples of shape HxW or HxWxC (C of 1, 3 or 4).
    """
    return [name for name, t in ds.tensors.items() if _is_image(t)]


def _htype(t: Any) -> str:
    """A tensor's htype; "generic" for a view's tensor, which does not know its htype."""
    return str(getattr(t, "htype", "generic"))


def _declared(t: Any) -> HType:
    """What a tensor's htype declares (a view's tensor: generic)."""
    return htype_declaration(_htype(t))


def _is_image(t: Any) -> bool:
    declared = _declared(t)
    if declared.image:
        return True
    if declared.dtype is not None or t.dtype != np.uint8:
        return False  # only a tensor whose dtype is the data's (generic) holds images it does not declare
    sample_shape = t.shape[1:]
    return len(sample_shape) == 2 or (len(sample_shape) == 3 and sample_shape[2] in (1, 3, 4, None))


def _check_image_tensor(ds: Any, tensor: str) -> None:
    if tensor not in ds.tensors:
        raise TensorDoesNotExistError(tensor, list(ds.tensors))
    t = ds.tensors[tensor]
    if not _is_image(t):
        raise InvalidArgumentError(
            f"Expected an image tensor. Got tensor={tensor!r}, a {_htype(t)} tensor of {t.dtype} samples "
            f"shaped {tuple(t.shape[1:])!r}. Image tensors of this dataset: {image_tensors(ds)!r}."
        )


def class_label_tensors(ds: Any) -> list[str]:
    """The names of the tensors of ``ds`` of a class_label htype (their values index class names)."""
    return [name for name, t in ds.tensors.items() if _declared(t).labels]


def _resolve_labels(ds: Any, label_tensor: str | None) -> str | None:
    """The class_label tensor to caption with: ``"auto"`` picks ``labels`` or the first one there is."""
    if label_tensor is None:
        return None
    choices = class_label_tensors(ds)
    if label_tensor == _AUTO:
        return "labels" if "labels" in choices else (choices[0] if choices else None)
    tensors = ds.tensors
    if label_tensor in choices or (label_tensor in tensors and not hasattr(tensors[label_tensor], "htype")):
        return label_tensor  # the second case: a view's tensor, which cannot tell (its values are shown)
    what = f"of htype {_htype(tensors[label_tensor])!r}" if label_tensor in tensors else "not in the dataset"
    raise InvalidArgumentError(
        f"Expected a class_label tensor for the captions. Got label_tensor={label_tensor!r}, which is "
        f"{what}; class_label tensors here: {choices!r}. Pass one of them, or label_tensor=None for "
        "captions without class names."
    )


def _spread(positions: Positions, count: int) -> list[int]:
    """``count`` of ``positions`` evenly spaced over them (the middle of ``count`` equal parts)."""
    n = len(positions)
    return [int(positions[(2 * j + 1) * n // (2 * count)]) for j in range(count)]


def _quotas(sizes: list[int], count: int) -> list[int]:
    """Share ``count`` picks between groups of ``sizes`` as evenly as their sizes allow."""
    quotas = [0] * len(sizes)
    left = min(count, sum(sizes))
    while left:
        for k, size in enumerate(sizes):
            if left and quotas[k] < size:
                quotas[k] += 1
                left -= 1
    return quotas


def _label_values(ds: Any, name: str) -> np.ndarray | None:
    """The labels of ``name`` as a 1-D array, or None when samples hold several labels (or none)."""
    try:
        values = np.asarray(ds[name].numpy())
    except RaggedShapeError:
        return None
    return values if values.ndim == 1 else None


def sample_indices(
    ds: Any, count: int, label_tensor: str | None = _AUTO, positions: Positions | None = None
) -> list[int]:
    """Up to ``count`` sample indices of ``ds`` spread over it, the same every time.

    With a class_label tensor, every class present gets an equal share (as far as it has samples), spread
    over that class's samples; the indices come class by class, in index order within a class.

    Args:
        ds: a dataset.
        count: how many indices at most.
        label_tensor: the class_label tensor to group by; ``"auto"`` takes ``labels`` (or the first
            class_label tensor), None spreads over the samples without grouping.
        positions: choose among these samples only (a view's positions); default: all.

    Returns:
        Indices of ``ds``; all of the candidates (class by class) when there are at most ``count``.
    """
    pool = np.asarray(range(len(ds)) if positions is None else positions, dtype=np.int64)
    name = _resolve_labels(ds, label_tensor)
    labels = None if name is None else _label_values(ds, name)
    if labels is None or len(labels) < len(ds):
        return _spread(pool, min(count, len(pool)))
    pool_labels = labels[pool]
    groups = [pool[pool_labels == c] for c in np.unique(pool_labels)]
    quotas = _quotas([len(g) for g in groups], count)
    return [i for g, q in zip(groups, quotas, strict=True) if q for i in _spread(g, q)]


def _grid(count: int, cols: int, rows: int | None) -> tuple[int, int]:
    """Columns and rows for ``count`` images, at most ``cols`` wide (and ``rows`` high)."""
    cols = max(1, min(cols, count))
    needed = math.ceil(count / cols)
    return cols, needed if rows is None else min(rows, needed)


def _check_grid(cols: int, rows: int | None, cell: int) -> None:
    if cols < 1 or (rows is not None and rows < 1) or cell < 8:
        raise InvalidArgumentError(
            f"Expected cols >= 1, rows >= 1 and cell >= 8. Got {cols=}, {rows=}, {cell=}."
        )
    if cols * (rows or 1) > MAX_CELLS:
        raise InvalidArgumentError(
            f"A contact sheet holds at most {MAX_CELLS} images. Got cols * rows = {cols * (rows or 1)}; "
            "ask for fewer rows or cols."
        )


def _choose(ds: Any, n: int, indices: Sequence[int] | str, count: int, labels: str | None) -> list[int]:
    """The indices to show: ``indices`` checked, or ``count`` of them, the first or spread."""
    if indices == "first":
        return list(range(min(n, count)))
    if indices == "spread":
        return sample_indices(ds, count, labels)
    if isinstance(indices, str):
        raise InvalidArgumentError(f'Expected indices to be a list, "first" or "spread". Got {indices!r}.')
    bad = [i for i in indices if not 0 <= i < n]
    if bad:
        raise InvalidArgumentError(f"Sample indices {bad!r} are out of range for {n} samples.")
    if not indices:
        raise InvalidArgumentError("Expected at least one sample index to show. Got none.")
    if len(indices) > MAX_CELLS:
        raise InvalidArgumentError(
            f"A contact sheet holds at most {MAX_CELLS} images. Got {len(indices)} indices."
        )
    return [int(i) for i in indices]


def to_pil(arr: np.ndarray) -> Image.Image:
    """An RGB Pillow image of an HxW or HxWxC uint8 sample.

    Raises:
        InvalidArgumentError: the array is not shaped as an image.
    """
    from PIL import Image

    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (3, 4)):
        raise InvalidArgumentError(f"Expected an HxW or HxWxC image (C of 1, 3 or 4). Got shape {arr.shape}.")
    return Image.fromarray(arr.astype(np.uint8)).convert("RGB")


def _captions(ds: Any, indices: list[int], labels: str | None) -> list[str]:
    """``"i"`` or ``"i: class name"`` for each index."""
    if labels is None:
        return [str(i) for i in indices]
    names = list(getattr(ds[labels], "info", {}).get("class_names") or [])
    length = len(ds[labels])
    out = []
    for i in indices:
        text = str(i)
        value = np.asarray(ds[labels][i].numpy()).reshape(-1) if i < length else np.empty(0)
        if value.size == 1:  # one label per sample; per-object labels are drawn on the boxes instead
            v = int(value[0])
            text += f": {names[v] if 0 <= v < len(names) else v}"
        out.append(text)
    return out


def contact_sheet(
    ds: Any,
    tensor: str = "images",
    label_tensor: str | None = _AUTO,
    indices: Sequence[int] | Literal["first", "spread"] = "first",
    cols: int = 8,
    rows: int | None = None,
    cell: int = 96,
    title: str | None = None,
    targets: bool = True,
) -> Image.Image:
    """A grid of image samples, each captioned with its index and class name.

    With ``targets``, the dataset's boxes, masks and keypoints (tensors of htype ``bbox``,
    ``binary_mask``, ``segment_mask``, ``keypoints``) are drawn over their images (see `draw_targets`).

    Images smaller than a cell are shown at their own size (so a resize is visible); larger ones
    are shrunk to fit. The grid is no wider than the number of images.

    Args:
        ds: a dataset or view.
        tensor: the image tensor.
        label_tensor: the class_label tensor to caption with; ``"auto"`` takes ``labels`` (or the first
            class_label tensor) if there is one, None captions with the index only.
        indices: which samples: a list of indices, ``"first"`` (the first ``cols * rows``) or
            ``"spread"`` (``cols * rows`` spread over the dataset and its classes, see `sample_indices`).
        cols: columns of the grid.
        rows: rows of the grid (default: as many as a list of ``indices`` needs, or 4).
        cell: the size in pixels of each image's square.
        title: a line of text above the grid.
        targets: draw boxes, masks and keypoints over the images.

    Returns:
        The sheet as an RGB Pillow image; ``.save("grid.png")`` writes it.

    Raises:
        InvalidArgumentError: ``tensor`` holds no images, ``label_tensor`` is not a class_label tensor,
            the tensor has no samples, an index is out of range, or the grid is too large.
        TensorDoesNotExistError: ``tensor`` is not in the dataset.
    """
    from PIL import Image, ImageDraw

    _check_grid(cols, rows, cell)
    _check_image_tensor(ds, tensor)
    labels = _resolve_labels(ds, label_tensor)
    t = ds[tensor]
    if len(t) == 0:
        raise InvalidArgumentError(f"Tensor {tensor!r} has no samples to show.")
    chosen = _choose(ds, len(t), indices, cols * (rows or 4), labels)
    cols, rows = _grid(len(chosen), cols, rows)
    chosen = chosen[: cols * rows]
    top = _CAPTION + 4 if title else 0
    sheet = Image.new("RGB", (cols * cell, top + rows * (cell + _CAPTION)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    if title:
        draw.text((4, 2), title, fill=(0, 0, 0))
    overlays = target_tensors(ds, tensor) if targets else []
    for k, (i, caption) in enumerate(zip(chosen, _captions(ds, chosen, labels), strict=True)):
        img = draw_targets(ds, i, to_pil(np.asarray(t[i].numpy())), overlays)
        img.thumbnail((cell - 4, cell - 4))
        x, y = (k % cols) * cell, top + (k // cols) * (cell + _CAPTION)
        sheet.paste(img, (x + (cell - img.width) // 2, y + (cell - img.height) // 2))
        draw.text((x + 3, y + cell), caption, fill=(0, 0, 0))
    return sheet


# -- boxes, masks and keypoints over images ----------------------------------------------------------

_DRAWN: tuple[Target, ...] = ("class_mask", "mask", "polygons", "boxes", "keypoints")  # masks first
_PALETTE = (
    (230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
    (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (0, 128, 128),
)  # fmt: skip


def target_tensors(ds: Any, tensor: str = "images") -> list[str]:
    """The tensors of ``ds`` drawn over the images of ``tensor``: its boxes, masks, polygons and keypoints
    (those of htype ``bbox``, ``binary_mask``, ``segment_mask``, ``polygon``, ``keypoints`` with a sample
    per image)."""
    n = len(ds[tensor])
    found = [(name, _declared(t).target) for name, t in ds.tensors.items()]
    ordered = sorted(((n, t) for n, t in found if t in _DRAWN), key=lambda nt: _DRAWN.index(nt[1]))
    return [name for name, _ in ordered if len(ds[name]) >= n]


def _box_classes(ds: Any, i: int, k: int) -> tuple[np.ndarray | None, list[str]]:
    """Per-box class ids of sample ``i`` (a class_label tensor with ``k`` values there), and their names."""
    for name in sorted(class_label_tensors(ds), key=lambda n: n not in ("categories", "labels")):
        if i < len(ds[name]):
            values = np.asarray(ds[name][i].numpy()).reshape(-1)
            if values.size == k:
                return values.astype(np.int64), list(ds.tensors[name].info.get("class_names") or [])
    return None, []


def _colour(k: int) -> tuple[int, int, int]:
    return _PALETTE[k % len(_PALETTE)]


def _blend(arr: np.ndarray, where: np.ndarray, colour: tuple[int, int, int]) -> None:
    arr[where] = (arr[where] * 0.5 + np.array(colour) * 0.5).astype(np.uint8)


def _draw_masks(arr: np.ndarray, sample: np.ndarray, target: Target | None) -> None:
    if sample.shape[:2] != arr.shape[:2]:
        return  # a mask of another size than its image: nothing sensible to draw
    if target == "class_mask":
        for c in np.unique(sample):
            if c:  # class 0 is background
                _blend(arr, sample == c, _colour(int(c)))
        return
    channels = sample[:, :, None] if sample.ndim == 2 else sample
    for j in range(channels.shape[2]):
        _blend(arr, channels[:, :, j].astype(bool), _colour(j))


def _draw_boxes(ds: Any, i: int, name: str, img: Image.Image) -> None:
    from PIL import ImageDraw

    layout = BoxLayout.of(ds.tensors[name])
    boxes = np.asarray(ds[name][i].numpy(), dtype=np.float64).reshape(-1, 4)
    xyxy = layout.convert(boxes, BoxLayout("xyxy"), canvas=(img.height, img.width))
    classes, names = _box_classes(ds, i, len(xyxy))
    draw = ImageDraw.Draw(img)
    width = max(1, round(max(img.size) / 128))
    for j, (x1, y1, x2, y2) in enumerate(xyxy.tolist()):
        c = int(classes[j]) if classes is not None else j
        draw.rectangle((x1, y1, x2, y2), outline=_colour(c), width=width)
        if classes is not None and 0 <= c < len(names):
            draw.text((x1 + 2, y1 + 1), names[c], fill=_colour(c))


def _draw_polygons(ds: Any, i: int, name: str, img: Image.Image) -> None:
    from PIL import ImageDraw

    from lakecompute.vision import polygon_points

    objects = ds[name][i].numpy(aslist=True)
    info = ds.tensors[name].info
    classes, names = _box_classes(ds, i, len(objects))
    draw = ImageDraw.Draw(img)
    width = max(1, round(max(img.size) / 128))
    for j, parts in enumerate(objects):
        c = int(classes[j]) if classes is not None else j
        for part in parts:
            points = polygon_points(part, info, False, (img.height, img.width))
            if len(points) >= 2:
                xy = [(float(x), float(y)) for x, y in points]
                draw.line([*xy, xy[0]], fill=_colour(c), width=width)
        if classes is not None and 0 <= c < len(names) and parts:
            x, y = polygon_points(parts[0], info, False, (img.height, img.width))[0]
            draw.text((float(x) + 2, float(y) + 1), names[c], fill=_colour(c))


def _draw_keypoints(ds: Any, i: int, name: str, img: Image.Image) -> None:
    from PIL import ImageDraw

    kp = np.asarray(ds[name][i].numpy(), dtype=np.float64)
    objects = kp.reshape(-1, *kp.shape[-2:]) if kp.ndim >= 2 else kp.reshape(0, 0, 3)
    skeleton = ds.tensors[name].info.get("skeleton") or []
    draw = ImageDraw.Draw(img)
    r = max(1, round(max(img.size) / 100))
    for j, points in enumerate(objects):
        for a, b in skeleton:
            pa, pb = points[a - 1], points[b - 1]
            if pa[2] > 0 and pb[2] > 0:
                draw.line((pa[0], pa[1], pb[0], pb[1]), fill=_colour(j), width=max(1, r // 2))
        for x, y, v in points.tolist():
            if v > 0:
                draw.ellipse((x - r, y - r, x + r, y + r), fill=_colour(j), outline=(255, 255, 255))


def draw_targets(ds: Any, i: int, img: Image.Image, tensors: Sequence[str]) -> Image.Image:
    """Sample ``i``'s boxes, masks, polygons and keypoints (the ``tensors``, see `target_tensors`) drawn
    over ``img``: masks as coloured tints, boxes as outlines coloured (and named) by class when a
    class_label tensor has one label per box, polygons as outlines coloured so too, keypoints as dots
    joined by the tensor's ``skeleton``.

    Returns:
        A new RGB image; ``img`` is not changed.
    """
    from PIL import Image

    targets = {name: _declared(ds.tensors[name]).target for name in tensors}
    masks = [n for n in tensors if targets[n] in ("mask", "class_mask")]
    arr = np.array(img.convert("RGB"))
    for name in masks:
        _draw_masks(arr, np.asarray(ds[name][i].numpy()), targets[name])
    out = Image.fromarray(arr)
    for name in tensors:
        if targets[name] == "boxes":
            _draw_boxes(ds, i, name, out)
        elif targets[name] == "polygons":
            _draw_polygons(ds, i, name, out)
        elif targets[name] == "keypoints":
            _draw_keypoints(ds, i, name, out)
    return out


# -- the notebook view ----------------------------------------------------------------------------

_STYLE = (
    "<style>"
    ".lc-ds table{border-collapse:collapse;margin:4px 0}"
    ".lc-ds th,.lc-ds td{padding:2px 10px;text-align:left;font-family:monospace}"
    ".lc-ds figure{display:inline-block;margin:0 6px 6px 0;text-align:center}"
    ".lc-ds figcaption{font-size:11px;font-family:monospace}"
    ".lc-ds img{image-rendering:pixelated;border:1px solid #ddd}"
    "</style>"
)


def _esc(value: object) -> str:
    return html.escape(str(value))


def _shape_text(shape: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")"


def _table(ds: Any, length: int | None) -> str:
    """The summary as an HTML table; ``length`` overrides the tensors' lengths (for a view)."""
    head = "".join(f"<th>{h}</th>" for h in ("tensor", "htype", "dtype", "shape", "compression", "length"))
    rows = [f"<tr>{head}</tr>"]
    for name, t in ds.tensors.items():
        n = len(t) if length is None else length
        comp = t.sample_compression or t.chunk_compression or "None"
        cells = (name, t.htype, t.dtype, _shape_text((n, *t.shape[1:])), comp, n)
        rows.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _class_names(ds: Any) -> str:
    parts = []
    for name in class_label_tensors(ds):
        names = list(ds.tensors[name].info.get("class_names") or [])
        shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
        parts.append(f"<div>{_esc(name)}: {_esc(shown)}</div>")
    return "".join(parts)


def _png_data_uri(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _strip(ds: Any, tensor: str, positions: Positions, count: int, size: int) -> str:
    """A row of thumbnails of ``tensor``, spread over ``positions`` and their classes."""
    chosen = sample_indices(ds, count, positions=positions)
    figures = []
    overlays = target_tensors(ds, tensor)
    for i, caption in zip(chosen, _captions(ds, chosen, _resolve_labels(ds, _AUTO)), strict=True):
        img = draw_targets(ds, i, to_pil(np.asarray(ds[tensor][i].numpy())), overlays)
        img.thumbnail((size, size))
        scale = size / max(img.width, img.height)  # small images are shown larger, pixels kept sharp
        width, height = round(img.width * scale), round(img.height * scale)
        figures.append(
            f'<figure><img src="{_png_data_uri(img)}" width="{width}" height="{height}" '
            f'alt="{_esc(tensor)}[{i}]"><figcaption>{_esc(caption)}</figcaption></figure>'
        )
    return f"<div><b>{_esc(tensor)}</b></div><div>{''.join(figures)}</div>"


def dataset_html(ds: Any, positions: Positions | None = None, thumbnails: int = 8, size: int = 64) -> str:
    """The notebook view of a dataset or view: the summary table, the class names, and a strip of
    thumbnails per image tensor captioned with index and class name, with boxes, masks and keypoints
    drawn over them (what ``ds._repr_html_`` shows).

    Args:
        ds: a dataset.
        positions: the samples of a view of ``ds`` (``view.positions``); default: all of ``ds``.
        thumbnails: images per strip, spread over the samples and their classes.
        size: the largest side of a thumbnail, in pixels.

    Returns:
        A self-contained HTML fragment (the images inline, as PNG data URIs).
    """
    pool = range(len(ds)) if positions is None else positions
    kind = "Dataset" if positions is None else "DatasetView"
    on = f", branch={ds.branch!r}" if ds.branch not in (None, "main") else ""
    header = f"{kind}(path={ds.path!r}, version={ds.version}{on}, samples={len(pool)})"
    parts = [_STYLE, '<div class="lc-ds">', f"<div><b>{_esc(header)}</b></div>"]
    parts.append(_table(ds, None if positions is None else len(pool)))
    parts.append(_class_names(ds))
    for tensor in image_tensors(ds) if len(pool) else []:
        try:
            parts.append(_strip(ds, tensor, pool, thumbnails, size))
        except LakeComputeError as exc:  # damaged data: say so rather than break the notebook's output
            parts.append(f"<div><b>{_esc(tensor)}</b>: cannot show samples ({_esc(exc)})</div>")
    parts.append("</div>")
    return "".join(parts)
