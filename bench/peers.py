"""The peers the transform workloads W1-W3 run beside: Hugging Face ``datasets.map`` (one fused map, and
W2's two steps as two maps) and Deep Lake 3's ``@deeplake.compute``, where they install.

Each peer reads its own copy of the input, stored its own way (Arrow on disk for ``datasets``; PNG bytes
in an ``Image`` column for W2, as its users store images), built before timing, and writes its output
the way its users do (``map`` writes an Arrow cache file; W2's images are encoded back to PNG by the
``Image`` feature). A peer that is not installed gives no rows, and says why once.

* ``datasets`` is in the dev extra (``pip install datasets``).
* Deep Lake 3 (``deeplake<4``) pins Pillow 10.4 and an old ``numpy``; it does not install beside this
  project's Pillow 13 and numpy 2 on Python 3.11, so its rows are skipped (the note says so).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["deeplake3_note", "hf_available", "hf_variants"]


def hf_available() -> str | None:
    """None when Hugging Face ``datasets`` can be imported, else why not."""
    try:
        import datasets  # noqa: F401
    except ImportError as exc:
        return f"HF datasets not installed ({exc}); pip install datasets"
    return None


def deeplake3_note() -> str:
    """Why Deep Lake 3 has no rows here (or that it would have, if it were installed)."""
    try:
        import deeplake
    except ImportError:
        return (
            "Deep Lake 3 not installed: deeplake<4 pins pillow~=10.4 and numpy<2, which conflict with this "
            "project's Pillow 13 and numpy 2 on Python 3.11 (skipped)"
        )
    version = getattr(deeplake, "__version__", "?")
    return f"deeplake {version} is installed, but only Deep Lake 3 (<4) has @deeplake.compute (skipped)"


def _quiet() -> Any:
    import warnings

    import datasets

    # The Image feature says so for every image it encodes from an array; the arrays are uint8 already.
    warnings.filterwarnings("ignore", message="Downcasting array dtype")
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


Step = Callable[[dict[str, Any]], dict[str, Any]]


def _timed_map(ds: Any, fn: Step, out: str, workers: int, **kw: Any) -> Any:
    return ds.map(fn, num_proc=workers or None, cache_file_name=out, load_from_cache_file=False, **kw)


def _run(tmp: str, ds: Any, steps: list[Step], workers: int, name: str) -> float:
    """Seconds of ``steps`` as chained maps (their cache files are the output, removed after timing)."""
    t0 = time.perf_counter()
    current = ds
    for k, step in enumerate(steps):
        out = f"{tmp}/hf-{name}-{workers}-{k}-{os.getpid()}.arrow"
        current = _timed_map(current, step, out, workers, features=current.features).with_format("numpy")
    seconds = time.perf_counter() - t0
    for f in os.listdir(tmp):
        if f.startswith(f"hf-{name}-{workers}-"):
            os.remove(os.path.join(tmp, f))
    return seconds


def hf_variants(
    tmp: str, w1: tuple[np.ndarray, np.ndarray], w2: tuple[list[bytes], np.ndarray], w3: np.ndarray,
    weights: np.ndarray, rounds: int, size: tuple[int, int], unfused: int,
) -> dict[str, dict[str, Callable[[], float]]]:  # fmt: skip
    """Timed runs of W1-W3 through ``datasets.map`` at 0 and 2 processes (``hf0``, ``hf2``; W2 also as
    two maps over its first ``unfused`` images, ``hfu0``, ``hfu2``), their inputs saved to disk first."""
    datasets = _quiet()
    from datasets import Array2D, Features, Sequence, Value
    from datasets import Image as HFImage

    images, labels = w1
    f1 = Features({"images": Array2D((28, 28), "uint8"), "labels": Value("uint8")})
    datasets.Dataset.from_dict({"images": images, "labels": labels}, features=f1).save_to_disk(f"{tmp}/hf-w1")
    blobs, pic_labels = w2
    f2 = Features({"images": HFImage(), "labels": Value("uint8")})
    rows2 = {"images": [{"bytes": b, "path": None} for b in blobs], "labels": pic_labels}
    datasets.Dataset.from_dict(rows2, features=f2).save_to_disk(f"{tmp}/hf-w2")
    f3 = Features({"vectors": Sequence(Value("float32"), length=256)})
    datasets.Dataset.from_dict({"vectors": w3}, features=f3).save_to_disk(f"{tmp}/hf-w3")
    d1 = datasets.load_from_disk(f"{tmp}/hf-w1").with_format("numpy")
    d2 = datasets.load_from_disk(f"{tmp}/hf-w2").with_format("numpy")
    d2u = d2.select(range(min(unfused, len(d2))))
    d3 = datasets.load_from_disk(f"{tmp}/hf-w3").with_format("numpy")

    def flip(ex: dict[str, Any]) -> dict[str, Any]:
        return {"images": np.flip(ex["images"], axis=0), "labels": ex["labels"]}

    def flip_resize(ex: dict[str, Any]) -> dict[str, Any]:
        from PIL import Image

        a = np.flip(ex["images"], axis=0)
        small = np.asarray(Image.fromarray(a).resize(size, Image.Resampling.BILINEAR))
        return {"images": small, "labels": ex["labels"]}

    def resize(ex: dict[str, Any]) -> dict[str, Any]:
        from PIL import Image

        small = np.asarray(Image.fromarray(ex["images"]).resize(size, Image.Resampling.BILINEAR))
        return {"images": small, "labels": ex["labels"]}

    def mlp(ex: dict[str, Any]) -> dict[str, Any]:
        x = ex["vectors"]
        for _ in range(rounds):
            x = np.tanh(x @ weights)
        return {"vectors": x}

    def run(ds: Any, steps: list[Step], workers: int, name: str) -> float:
        return _run(tmp, ds, steps, workers, name)

    return {
        "W1": {f"hf{w}": (lambda w=w: run(d1, [flip], w, "w1")) for w in (0, 2)},
        "W2": {
            **{f"hf{w}": (lambda w=w: run(d2, [flip_resize], w, "w2")) for w in (0, 2)},
            **{f"hfu{w}": (lambda w=w: run(d2u, [flip, resize], w, "w2u")) for w in (0, 2)},
        },
        "W3": {f"hf{w}": (lambda w=w: run(d3, [mlp], w, "w3")) for w in (0, 2)},
    }


def png_bytes(a: np.ndarray, level: int) -> bytes:
    """``a`` as PNG at zlib level ``level``, as Pillow writes it."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", compress_level=level)
    return buf.getvalue()
