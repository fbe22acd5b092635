"""Loader floors and peers (issue 29): ``ds.batches`` epochs next to the one-slice-per-batch memmap floor
and the loaders of the field, on the same 60,000 MNIST-size samples, batch 256.

* The slice floor: the images and labels in two ``np.memmap`` files, each batch one slice of each
  (``mm[a:b]``, copied out: a batch is the caller's own, as ours are); shuffled, one fancy-indexed read
  of the batch's sorted positions. In-process, and with 2 workers: a torch ``DataLoader`` over a
  dataset whose items are whole batches (one slice each), so batches move between processes the way
  torch moves them (shared memory).
* Ours: one ``ds.batches(256)`` loader, iterated epoch after epoch as training does (the first epoch,
  which decodes the chunks, is reported apart); unshuffled, shuffled, and shuffled by blocks of
  ``BLOCK`` samples (``shuffle_block``).
* Peers, shuffled: litdata's ``StreamingDataset`` (written with ``litdata.optimize``) through its
  ``StreamingDataLoader``; torchdata's ``StatefulDataLoader`` over the memmap; MosaicML Streaming is
  skipped (it needs numpy < 2.2).

Each row is the median of ``--runs`` epochs, interleaved; rates are samples per second.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench import Row, scratch_dir, suite

BATCH = 256
BLOCK = 2_048  # shuffle_block: about one 1 MiB chunk of 28x28 images and a bit more


class _SliceBatches:
    """A torch map-style dataset whose item ``k`` is batch ``k``: one slice of each memmap."""

    def __init__(self, root: str, n: int) -> None:
        self.root, self.n = root, n
        self._mm: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return -(-self.n // BATCH)

    def __getitem__(self, k: int) -> dict[str, Any]:
        import torch

        if self._mm is None:  # opened in the worker
            self._mm = _memmaps(self.root, self.n)
        images, labels = self._mm
        a, b = k * BATCH, min(self.n, (k + 1) * BATCH)
        return {
            "images": torch.from_numpy(np.array(images[a:b])),
            "labels": torch.from_numpy(np.array(labels[a:b])),
        }


class _Samples:
    """A torch map-style dataset of single samples over the memmaps (what torchdata's loader reads)."""

    def __init__(self, root: str, n: int) -> None:
        self.root, self.n = root, n
        self._mm: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._mm is None:
            self._mm = _memmaps(self.root, self.n)
        return {"images": self._mm[0][i], "labels": self._mm[1][i]}


def _memmaps(root: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.memmap(f"{root}/images.u8", dtype=np.uint8, mode="r", shape=(n, 28, 28)),
        np.memmap(f"{root}/labels.u8", dtype=np.uint8, mode="r", shape=(n,)),
    )


def _count(batches: Any) -> int:
    return sum(len(b["labels"]) for b in batches)


def _timed(fn: Callable[[], int]) -> float:
    t0 = time.perf_counter()
    assert fn() > 0
    return time.perf_counter() - t0


def _slice_floor(root: str, n: int, shuffle: bool, epoch: list[int]) -> int:
    images, labels = _memmaps(root, n)
    if not shuffle:
        for a in range(0, n, BATCH):
            np.array(images[a : a + BATCH]), np.array(labels[a : a + BATCH])
        return n
    epoch[0] += 1
    order = np.random.default_rng(epoch[0]).permutation(n)
    for a in range(0, n, BATCH):
        idx = np.sort(order[a : a + BATCH])
        images[idx], labels[idx]
    return n


def _torch_slices(root: str, n: int) -> int:
    import torch

    loader = torch.utils.data.DataLoader(_SliceBatches(root, n), batch_size=None, num_workers=2)
    return _count(loader)


def _variants(tmp: str, n: int) -> dict[str, Callable[[], int]]:
    import lakecompute as lc

    ds = lc.load(f"{tmp}/raw", read_only=True)
    loaders = {
        "ours": ds.batches(BATCH),
        "ours shuffled": ds.batches(BATCH, shuffle=True),
        "ours shuffle_block": ds.batches(BATCH, shuffle=True, shuffle_block=BLOCK),
    }
    epochs = [0]
    variants: dict[str, Callable[[], int]] = {
        "floor": lambda: _slice_floor(tmp, n, False, epochs),
        "floor shuffled": lambda: _slice_floor(tmp, n, True, epochs),
        "floor 2 workers": lambda: _torch_slices(tmp, n),
        "ours 2 workers": lambda: _count(ds.batches(BATCH, num_workers=2)),
        "ours shuffled 2 workers": lambda: _count(ds.batches(BATCH, shuffle=True, num_workers=2)),
    }
    for name, loader in loaders.items():
        variants[name] = lambda loader=loader: _count(loader)
    variants.update(_peers(tmp, n))
    return variants


def _peers(tmp: str, n: int) -> dict[str, Callable[[], int]]:
    out: dict[str, Callable[[], int]] = {}
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader

        out["torchdata shuffled"] = lambda: _count(StatefulDataLoader(_Samples(tmp, n), BATCH, shuffle=True))
    except ImportError as exc:
        _NOTES.append(f"torchdata skipped ({exc})")
    try:
        import litdata

        litdata.optimize(
            fn=functools.partial(_lit_sample, tmp, n), inputs=list(range(n)), output_dir=f"{tmp}/litdata",
            chunk_bytes="1MB", num_workers=1, verbose=False, storage_options={},
        )  # fmt: skip
        ds = litdata.StreamingDataset(f"{tmp}/litdata", shuffle=True)
        out["litdata shuffled"] = lambda: _count(litdata.StreamingDataLoader(ds, batch_size=BATCH))
    except Exception as exc:  # litdata missing, or failing to write: the row is left out, said why
        _NOTES.append(f"litdata skipped ({type(exc).__name__}: {exc})")
    _NOTES.append("MosaicML Streaming skipped: mosaicml-streaming needs numpy<2.2 (this project: numpy 2)")
    return out


_NOTES: list[str] = []


def _lit_sample(root: str, n: int, i: int) -> dict[str, Any]:
    """Sample ``i`` as litdata.optimize writes it (run in its worker processes)."""
    images, labels = _memmaps(root, n)
    return {"images": np.array(images[i]), "labels": int(labels[i])}


def _rows(med: dict[str, float], first: dict[str, float], n: int) -> list[Row]:
    def rate(name: str) -> float:
        return n / med[name]

    rows = [
        Row("ds.batches unshuffled, in-process", rate("ours"), rate("floor"), "samples/s", ">= 0.5x",
            rate("ours") >= 0.5 * rate("floor"), "memmap, one slice per batch",
            f"epochs after the first; the first: {n / first['ours']:,.0f}/s"),
        Row("ds.batches shuffled, in-process", rate("ours shuffled"), rate("floor shuffled"), "samples/s", "",
            None, "memmap, one sorted fancy-indexed read per batch"),
        Row(f"ds.batches shuffle_block={BLOCK}, in-process", rate("ours shuffle_block"),
            rate("floor shuffled"), "samples/s", "", None, "memmap, one sorted fancy-indexed read per batch"),
        Row("ds.batches unshuffled, 2 workers", rate("ours 2 workers"), rate("floor 2 workers"), "samples/s",
            ">= 1.0x", rate("ours 2 workers") >= rate("floor 2 workers"),
            "torch DataLoader(2 workers) of memmap slices, one per batch"),
        Row("ds.batches shuffled, 2 workers", rate("ours shuffled 2 workers"), rate("floor 2 workers"),
            "samples/s", "", None, "torch DataLoader(2 workers) of memmap slices (unshuffled)"),
    ]  # fmt: skip
    for peer in ("torchdata shuffled", "litdata shuffled"):
        if peer in med:
            rows.append(Row(f"ds.batches shuffled vs {peer.split()[0]}", rate("ours shuffled"), rate(peer),
                            "samples/s", "ahead", rate("ours shuffled") > rate(peer),
                            f"{peer.split()[0]}, shuffled, in-process"))  # fmt: skip
    return rows


@suite("loader-floors")
def loader_floors(opts: Any) -> list[Row]:
    """ds.batches epochs vs the memmap slice floor (in-process, 2 workers) and litdata / torchdata."""
    import warnings

    from bench._data import mnist_like

    # The floor's and torchdata's batches are read-only memmap slices; torch says so once per process.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    from bench.loaders import _write_inputs

    n = 10_000 if opts.quick else 60_000
    runs = max(1, int(opts.runs))
    images, labels = mnist_like(n, seed=0)
    _NOTES.clear()
    with scratch_dir("lc-bench-loader-floors-") as tmp:
        _write_inputs(tmp, images, labels)
        variants = _variants(tmp, n)
        first = {name: _timed(fn) for name, fn in variants.items()}  # warms caches; ours decode here
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(runs):
            for name, fn in variants.items():
                times[name].append(_timed(fn))
    med = {name: statistics.median(v) for name, v in times.items()}
    for note in _NOTES:
        print(f"note: {note}")
    return _rows(med, first, n)
