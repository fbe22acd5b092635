"""Small synthetic datasets for tests, examples, benchmarks and the demo (deterministic by seed)."""

from __future__ import annotations

import numpy as np

__all__ = ["CLASS_NAMES", "make_images", "make_shapes_dataset"]

CLASS_NAMES = ["circle", "square", "triangle"]


def make_images(
    n: int, size: tuple[int, int] = (32, 32), rgb: bool = True, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images of a filled circle, square or triangle on a gradient, and their labels.

    Returns:
        ``(images, labels)``: uint8 ``(n, H, W, 3)`` (or ``(n, H, W)``) and int64 ``(n,)``.
    """
    rng = np.random.default_rng(seed)
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w]
    labels = rng.integers(0, len(CLASS_NAMES), n)
    shape = (n, h, w, 3) if rgb else (n, h, w)
    images = np.empty(shape, dtype=np.uint8)
    for i in range(n):
        cy, cx = rng.integers(h // 4, 3 * h // 4), rng.integers(w // 4, 3 * w // 4)
        r = rng.integers(max(2, min(h, w) // 8), max(3, min(h, w) // 3))
        if labels[i] == 0:
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        elif labels[i] == 1:
            mask = (abs(yy - cy) <= r) & (abs(xx - cx) <= r)
        else:
            mask = (yy >= cy - r) & (yy <= cy + r) & (abs(xx - cx) <= (yy - (cy - r)) / 2)
        background = (yy * 255 // max(1, h - 1)).astype(np.uint8) // 3
        if rgb:
            colour = rng.integers(120, 256, 3)
            img = np.stack([background, background[::-1], np.full_like(background, 40)], axis=-1)
            img[mask] = colour
        else:
            img = background.copy()
            img[mask] = rng.integers(160, 256)
        images[i] = img
    return images, labels


def make_shapes_dataset(
    path: str,
    n: int = 200,
    size: tuple[int, int] = (48, 48),
    sample_compression: str | None = "png",
    seed: int = 0,
    overwrite: bool = True,
) -> object:
    """A dataset of `make_images` with ``images`` (image) and ``labels`` (class_label)."""
    import lakecompute as lc

    images, labels = make_images(n, size, rgb=True, seed=seed)
    ds = lc.empty(path, overwrite=overwrite)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression=sample_compression)
        ds.create_tensor("labels", htype="class_label", class_names=CLASS_NAMES)
        ds.extend({"images": list(images), "labels": labels})
    return ds
