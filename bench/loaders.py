"""Training loaders (issue 11): ``ds.pytorch()`` and token blocks against plain torch / numpy loops.

Every row reads one shuffled epoch of MNIST-like data (:func:`bench._data.mnist_like`, 60,000 28x28
uint8 images and uint8 labels), batch 256, and is compared with a plain torch ``DataLoader`` doing the
same: a map-style dataset over an ``np.memmap`` of the same arrays (the floor for raw tensors), or
over one PNG file per image decoded with Pillow (the floor for PNG tensors). Worker start-up is part
of every epoch, on both sides. Token blocks compare ``blocks.batches()`` with slicing a memmap of the
same 10M-token stream block by block; ``ds.batches`` with 2 loader workers (our worker pool) is compared
with ``ds.pytorch`` with 2 workers (torch's). Each row is the median of ``--runs`` epochs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from bench import Row, Timer, median_of, rate, scratch_dir, suite

N = 60_000
BATCH = 256
TOKENS = 10_000_000
SEQ_LEN = 128
BLOCK_BATCH = 64


class _MemmapImages:
    """A map-style torch dataset over memmaps: what a user writes by hand around ``np.memmap``."""

    def __init__(self, root: str, n: int) -> None:
        self.images = np.memmap(f"{root}/images.u8", dtype=np.uint8, mode="r", shape=(n, 28, 28))
        self.labels = np.memmap(f"{root}/labels.u8", dtype=np.uint8, mode="r", shape=(n,))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"images": self.images[i], "labels": self.labels[i]}


class _PngFiles:
    """A map-style torch dataset over one PNG file per image, decoded with Pillow."""

    def __init__(self, root: str, labels: np.ndarray) -> None:
        self.root = root
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from PIL import Image

        with Image.open(f"{self.root}/{i}.png") as im:
            return {"images": np.asarray(im), "labels": self.labels[i]}


def _epoch(loader: Any) -> float:
    """Seconds to iterate ``loader`` once (it is built lazily: workers start inside)."""
    with Timer() as t:
        count = sum(len(b["labels"]) for b in loader)
    assert count > 0
    return t.seconds


def _write_inputs(tmp: str, images: np.ndarray, labels: np.ndarray) -> None:
    from PIL import Image

    import lakecompute as lc

    images.tofile(f"{tmp}/images.u8")
    labels.tofile(f"{tmp}/labels.u8")
    os.makedirs(f"{tmp}/pngfiles", exist_ok=True)
    for i, img in enumerate(images):
        Image.fromarray(img).save(f"{tmp}/pngfiles/{i}.png", compress_level=1)
    for name, compression in (("raw", None), ("png", "png")):
        ds = lc.empty(f"{tmp}/{name}", overwrite=True)
        with ds:
            ds.create_tensor("images", htype="image", sample_compression=compression)
            ds.create_tensor("labels", htype="class_label")
        with ds:
            ds.images.extend(images)
            ds.labels.extend(labels)


def _loader_rows(tmp: str, n: int, runs: int, labels: np.ndarray) -> list[Row]:
    import warnings

    import torch

    import lakecompute as lc

    # The memmap floor hands torch read-only arrays, as a hand-written loader would; torch says so once.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

    rows: list[Row] = []
    floors = {
        "raw": lambda: _MemmapImages(tmp, n),
        "png": lambda: _PngFiles(f"{tmp}/pngfiles", labels),
    }
    names = {"raw": "np.memmap", "png": "PNG files + Pillow"}
    for kind in ("raw", "png"):
        ds = lc.load(f"{tmp}/{kind}", read_only=True)
        for workers in (0, 2):

            def ours(kind: str = kind, workers: int = workers, ds: Any = ds) -> float:
                return _epoch(ds.pytorch(BATCH, shuffle=True, num_workers=workers))

            def floor(kind: str = kind, workers: int = workers) -> float:
                dataset = floors[kind]()
                return _epoch(torch.utils.data.DataLoader(dataset, BATCH, shuffle=True, num_workers=workers))

            ours_s, _ = median_of(runs, ours)
            base_s, _ = median_of(runs, floor)
            target = 0.7 if kind == "raw" else 0.9
            r = Row(
                f"ds.pytorch {'PNG' if kind == 'png' else 'uint8'} tensors, {workers} workers",
                rate(n, ours_s),
                rate(n, base_s),
                "samples/s",
                f">= {target}x baseline" if workers == 0 else "",
                baseline_name=f"torch DataLoader over {names[kind]}, {workers} workers",
                note=f"{n:,} samples, batch {BATCH}, shuffled; median of {runs}",
            )
            if workers == 0:
                r.ok = (r.ratio or 0) >= target
            rows.append(r)
    return rows


def _batches_rows(tmp: str, n: int, runs: int) -> list[Row]:
    """``ds.batches`` with 2 loader workers (the processed scheduler's pool) next to ``ds.pytorch`` with
    2 workers (torch's pool) over the same dataset: what reading through our pool costs."""
    import lakecompute as lc

    rows: list[Row] = []
    for kind in ("raw", "png"):
        ds = lc.load(f"{tmp}/{kind}", read_only=True)

        def ours(ds: Any = ds) -> float:
            return _epoch(ds.batches(BATCH, shuffle=True, num_workers=2))

        def torch_pool(ds: Any = ds) -> float:
            return _epoch(ds.pytorch(BATCH, shuffle=True, num_workers=2))

        ours_s, _ = median_of(runs, ours)
        base_s, _ = median_of(runs, torch_pool)
        rows.append(
            Row(
                f"ds.batches {'PNG' if kind == 'png' else 'uint8'} tensors, 2 workers",
                rate(n, ours_s),
                rate(n, base_s),
                "samples/s",
                "",
                baseline_name="ds.pytorch, 2 workers (torch's worker pool)",
                note=f"{n:,} samples, batch {BATCH}, shuffled; median of {runs}",
            )
        )
    return rows


def _first_batch(ds: Any, step: int) -> float:
    with Timer() as t:
        next(iter(ds.pytorch(BATCH, shuffle=True, start_from_step=step)))
    return t.seconds


def _resume_row(tmp: str, n: int, runs: int) -> Row:
    import lakecompute as lc

    ds = lc.load(f"{tmp}/raw", read_only=True)
    k = (n // BATCH) * 4 // 5
    diffs = []
    for _ in range(max(5, runs)):
        at_zero = _first_batch(ds, 0)
        diffs.append(_first_batch(ds, k) - at_zero)
    skip = float(np.median(diffs))

    def k_batches() -> float:
        with Timer() as t:
            for step, _ in enumerate(ds.pytorch(BATCH, shuffle=True)):
                if step + 1 == k:
                    break
        return t.seconds

    base_s, _ = median_of(runs, k_batches)
    r = Row(
        f"resume at step {k}: extra time to the first batch",
        max(skip, 0.0) * 1000,
        base_s * 1000,
        "ms",
        "< 1% of reading k batches",
        baseline_name=f"reading the first {k} batches",
        note=f"first batch at k minus at 0, median of {len(diffs)} pairs (raw: {skip * 1000:.2f} ms)",
    )
    r.ok = skip < 0.01 * base_s
    return r


def _first_batch_from_state(ds: Any, state: dict[str, Any] | None) -> float:
    with Timer() as t:
        loader = ds.pytorch(BATCH, shuffle=True)
        if state is not None:
            loader.load_state_dict(state)
        next(iter(loader))
    return t.seconds


def _state_resume_row(tmp: str, runs: int) -> Row:
    """Issue 18: resuming from ``loader.state_dict()`` costs < 1% of an epoch (nothing skipped is read)."""
    import lakecompute as lc

    ds = lc.load(f"{tmp}/raw", read_only=True)
    loader = ds.pytorch(BATCH, shuffle=True)
    k = len(loader) * 4 // 5
    state = {**loader.state_dict(), "step": k}
    diffs = []
    for _ in range(max(5, runs)):
        at_zero = _first_batch_from_state(ds, None)
        diffs.append(_first_batch_from_state(ds, state) - at_zero)
    skip = float(np.median(diffs))
    epoch_s, _ = median_of(runs, lambda: _epoch(ds.pytorch(BATCH, shuffle=True)))
    r = Row(
        f"resume from a loader state at step {k}: extra time to the first batch",
        max(skip, 0.0) * 1000,
        epoch_s * 1000,
        "ms",
        "< 1% of an epoch",
        baseline_name="one shuffled epoch",
        note=f"load_state_dict + first batch minus a fresh first batch, median of {len(diffs)} pairs "
        f"(raw: {skip * 1000:.2f} ms)",
    )
    r.ok = skip < 0.01 * epoch_s
    return r


def _token_rows(tmp: str, total: int, runs: int) -> list[Row]:
    import lakecompute as lc

    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 500, size=2 * total // 260)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), total)) + 1]
    stream = rng.integers(0, 50_000, size=int(lengths.sum()), dtype=np.int32)
    stream.tofile(f"{tmp}/tokens.i32")
    ds = lc.empty(f"{tmp}/tokens", overwrite=True)
    ds.create_tensor("tokens", dtype="int32")
    ds.tokens.extend(np.split(stream, np.cumsum(lengths)[:-1]))
    rows: list[Row] = []
    for compacted in (False, True):
        if compacted:
            ds.compact()
        blocks = lc.load(f"{tmp}/tokens", read_only=True).tokens.blocks(SEQ_LEN)
        count = len(blocks)

        def ours(blocks: Any = blocks) -> float:
            with Timer() as t:
                for batch in blocks.batches(BLOCK_BATCH, shuffle=True):
                    assert batch["x"].shape[1] == SEQ_LEN
            return t.seconds

        def floor(count: int = count) -> float:
            mm = np.memmap(f"{tmp}/tokens.i32", dtype=np.int32, mode="r")
            order = np.random.default_rng(0).permutation(count)
            with Timer() as t:
                for lo in range(0, count, BLOCK_BATCH):
                    starts = order[lo : lo + BLOCK_BATCH] * SEQ_LEN
                    x = np.stack([mm[s : s + SEQ_LEN] for s in starts])
                    y = np.stack([mm[s + 1 : s + SEQ_LEN + 1] for s in starts])
                    assert x.shape[1] == y.shape[1] == SEQ_LEN
            return t.seconds

        ours_s, _ = median_of(runs, ours)
        base_s, _ = median_of(runs, floor)
        r = Row(
            f"token blocks of {SEQ_LEN} ({'compacted' if compacted else 'as written'})",
            rate(count, ours_s),
            rate(count, base_s),
            "blocks/s",
            ">= 0.7x baseline",
            baseline_name="slicing a memmap of the stream, block by block",
            note=f"{len(stream) / 1e6:.1f}M tokens, {len(lengths):,} docs, batch {BLOCK_BATCH}, shuffled",
        )
        r.ok = (r.ratio or 0) >= 0.7
        rows.append(r)
    return rows


@suite("loaders")
def loaders(opts: Any) -> list[Row]:
    """ds.pytorch() and token blocks vs plain torch DataLoaders (memmap, PNG files) and memmap slicing."""
    from bench._data import mnist_like

    n = 10_000 if opts.quick else N
    total = 1_000_000 if opts.quick else TOKENS
    runs: int = opts.runs
    images, labels = mnist_like(n, seed=0)
    with scratch_dir() as tmp:
        _write_inputs(tmp, images, labels)
        steps: list[Callable[[], list[Row]]] = [
            lambda: _loader_rows(tmp, n, runs, labels),
            lambda: _batches_rows(tmp, n, runs),
            lambda: [_resume_row(tmp, n, runs)],
            lambda: [_state_resume_row(tmp, runs)],
            lambda: _token_rows(tmp, total, runs),
        ]
        return [row for step in steps for row in step()]
