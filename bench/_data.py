"""Deterministic MNIST-like data: smooth strokes on a black background, not random noise.

Random bytes do not compress and would make zstd look slow and useless; real MNIST is ~80 %
zeros with smooth strokes. These images are a few Gaussian blobs along a random path, clipped,
with a little noise on the strokes only, so chunk and PNG compression behave realistically.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mnist_like"]


def mnist_like(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 28x28 uint8 images and their uint8 labels (0..9), the same for the same seed."""
    rng = np.random.default_rng(seed)
    images = np.empty((n, 28, 28), dtype=np.uint8)
    yy, xx = np.mgrid[0:28, 0:28].astype(np.float32)
    step = 4096
    for lo in range(0, n, step):
        m = min(step, n - lo)
        canvas = np.zeros((m, 28, 28), dtype=np.float32)
        # A stroke: 8 blobs along a random walk from a random start.
        pos = rng.uniform(8, 20, size=(m, 2)).astype(np.float32)
        for _ in range(8):
            pos += rng.normal(0, 2.8, size=(m, 2)).astype(np.float32)
            np.clip(pos, 5, 22, out=pos)
            sigma = rng.uniform(1.2, 2.0, size=(m, 1, 1)).astype(np.float32)
            d2 = (yy[None] - pos[:, 0, None, None]) ** 2 + (xx[None] - pos[:, 1, None, None]) ** 2
            canvas = np.maximum(canvas, np.exp(-d2 / (2 * sigma * sigma)))
        img = canvas * 320.0 - 40.0
        ink = img > 0
        img += rng.normal(0, 12, size=img.shape).astype(np.float32) * ink
        images[lo : lo + m] = np.clip(img, 0, 255).astype(np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    return images, labels
