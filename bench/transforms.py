"""Transforms (issue 3): ``eval`` against a plain-loop floor doing the same numpy/Pillow work.

Each workload runs side by side, in one process and one run, with its floor: a hand-written loop
over the same input, held in memory, writing a preallocated output — once in a single process and
once split in two halves over ``multiprocess.Pool(2)`` (what users hand-write), the halves'
arrays sent back and copied into the preallocated output. The floor does the same work as the
eval, including encoding outputs the way the dataset stores them (PNG stays PNG, level 1 as
``lakecompute.compression``). Input datasets are built once, before any timing; an eval's wall
time includes everything (planning, preflight, pool start, writing, commit).

* W1: 60,000 28x28 uint8 images + labels, vertical flip (the tutorial's ``flip_vertical``).
* W2: 2,000 RGB images of 200-320 px stored as PNG, flip -> bilinear resize to 64x64 (a
  ``compose`` of two steps), output PNG.
* W3: 20,000 float32[256] vectors through 20 rounds of ``tanh(x @ W)``.
* Peak RSS per worker for W1 at 1x and 4x the input (run in a fresh interpreter, so that the
  bench's own arrays are not in the forked workers' resident set).

Runs are interleaved (floor, floor Pool(2), eval 0 workers, eval 2 workers, then again) so that
the machine's noise hits every variant alike; the median is reported. The floors and our evals run
``2 * --runs + 1`` times (7 for the default 3), the peers ``--runs`` times: on this machine one run of a
2-worker row moves by up to ±20 % (its floor too, not always together), more than the targets' margins,
and a median of 3 such runs decided a row by one slow run (see docs/performance.md).
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench import Row, scratch_dir, suite
from bench.peers import deeplake3_note, hf_available, hf_variants
from bench.worker_memory import worker_peak_rss
from lakecompute.compression import PNG_LEVEL  # the floor encodes PNG as lakecompute does

N1, N2, N3 = 60_000, 2_000, 20_000
BATCH = 1024  # batched W1: batch_size
UNFUSED = 200  # W2 images HF's unfused maps run on (compared per image)
ROUNDS = 20
SIZE = (64, 64)


# -- data ------------------------------------------------------------------------------------------


def photos(n: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """``n`` RGB images of 200-320 px per side: smooth gradients and waves with mild noise, so
    that PNG compresses them about as much as photos (random noise would not compress at all)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        h, w = (int(x) for x in rng.integers(200, 321, size=2))
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        chans = []
        for _c in range(3):
            fy, fx = rng.uniform(0.005, 0.05, size=2)
            a, b, c = rng.uniform(0, 255, size=3)
            chans.append(a * 0.5 + 0.3 * b * np.sin(fy * yy + 0.5 * c) + 0.3 * c * np.cos(fx * xx))
        img = np.stack(chans, axis=-1) + rng.normal(0, 3, size=(h, w, 3)).astype(np.float32)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    return out, labels


def _png(a: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", compress_level=PNG_LEVEL)
    return buf.getvalue()


def weights(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((256, 256)) / 16).astype(np.float32)


# -- the floor: hand-written loops into preallocated outputs ----------------------------------------


class Stored:
    """An array as the dataset stores it by default: 1 MiB chunks, each zstd level 1 (the floor
    decodes its input and encodes its output this way, as the eval does: "the same work")."""

    CHUNK = 1 << 20

    def __init__(self, arr: np.ndarray) -> None:
        from numcodecs import Zstd

        self.dtype, self.shape = arr.dtype, arr.shape
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        codec = Zstd(level=1)
        self.chunks = [bytes(codec.encode(raw[i : i + self.CHUNK])) for i in range(0, raw.size, self.CHUNK)]

    def array(self) -> np.ndarray:
        from numcodecs import Zstd

        codec = Zstd(level=1)
        raw = b"".join(bytes(codec.decode(c)) for c in self.chunks)
        return np.frombuffer(raw, dtype=self.dtype).reshape(self.shape).copy()


def w1_loop(part: tuple[Stored, Stored]) -> tuple[Stored, Stored]:
    images, labels = part[0].array(), part[1].array()  # decode the input as stored
    out = np.empty_like(images)
    out_labels = np.empty_like(labels)
    for i in range(len(images)):
        out[i] = np.flip(images[i], axis=0)
        out_labels[i] = labels[i]
    return Stored(out), Stored(out_labels)  # encode the output as the dataset stores it


def w1_vectorised(whole: tuple[Stored, Stored]) -> float:
    """W1's vectorised floor: decode the input as stored, flip every image at once, encode as stored."""
    t0 = time.perf_counter()
    images, labels = whole[0].array(), whole[1].array()
    Stored(np.flip(images, axis=1))
    Stored(labels)
    return time.perf_counter() - t0


def w1_raw_loop(images: np.ndarray, labels: np.ndarray) -> float:
    """The bare loop from and into memory, without the storage codec (shown for reference)."""
    t0 = time.perf_counter()
    out, out_labels = np.empty_like(images), np.empty_like(labels)
    for i in range(len(images)):
        out[i] = np.flip(images[i], axis=0)
        out_labels[i] = labels[i]
    return time.perf_counter() - t0


def w2_loop(part: tuple[list[bytes], np.ndarray]) -> tuple[list[bytes], np.ndarray]:
    from PIL import Image

    blobs, labels = part
    out: list[bytes] = [b""] * len(blobs)
    out_labels = np.empty_like(labels)
    for i, blob in enumerate(blobs):
        a = np.asarray(Image.open(io.BytesIO(blob)))  # decode, as the eval reads its input
        a = np.flip(a, axis=0)
        small = np.asarray(Image.fromarray(a).resize(SIZE, Image.Resampling.BILINEAR))
        out[i] = _png(small)  # encode, as the dataset stores it
        out_labels[i] = labels[i]
    return out, out_labels


def w3_loop(part: tuple[Stored, np.ndarray]) -> Stored:
    vectors, w = part[0].array(), part[1]
    out = np.empty_like(vectors)
    for i in range(len(vectors)):
        x = vectors[i]
        for _ in range(ROUNDS):
            x = np.tanh(x @ w)
        out[i] = x
    return Stored(out)


def _halves(n: int) -> list[tuple[int, int]]:
    return [(0, n // 2), (n // 2, n)]


def _pool2(fn: Callable[[Any], Any], parts: list[Any]) -> list[Any]:
    import multiprocess

    with multiprocess.Pool(2) as pool:
        return pool.map(fn, parts)


def floor_w1(whole: tuple[Stored, Stored], halves: list[tuple[Stored, Stored]], pool: bool) -> float:
    t0 = time.perf_counter()
    if not pool:
        w1_loop(whole)
    else:
        _pool2(w1_loop, halves)  # each half comes back encoded, ready to store
    return time.perf_counter() - t0


#: Bytes of the PNGs (and labels) the last 1-process W2 floor made: what the eval's output is compared with.
_W2_FLOOR_BYTES = [0]


def floor_w2(blobs: list[bytes], labels: np.ndarray, pool: bool) -> float:
    t0 = time.perf_counter()
    if not pool:
        out, out_labels = w2_loop((blobs, labels))
        _W2_FLOOR_BYTES[0] = sum(map(len, out)) + out_labels.nbytes
    else:
        out: list[bytes] = [b""] * len(blobs)
        out_labels = np.empty_like(labels)
        cuts = _halves(len(blobs))
        for (a, b), (o, ol) in zip(
            cuts, _pool2(w2_loop, [(blobs[a:b], labels[a:b]) for a, b in cuts]), strict=True
        ):
            out[a:b], out_labels[a:b] = o, ol
    return time.perf_counter() - t0


def floor_w3(whole: Stored, halves: list[Stored], w: np.ndarray, pool: bool) -> float:
    t0 = time.perf_counter()
    if not pool:
        w3_loop((whole, w))
    else:
        _pool2(w3_loop, [(h, w) for h in halves])
    return time.perf_counter() - t0


# -- ours: the tutorial-style compute functions -----------------------------------------------------


def functions() -> dict[str, Any]:
    """The compute functions the evals run (built lazily: importing lakecompute takes a while)."""
    from PIL import Image

    import lakecompute as lc

    @lc.compute
    def flip_vertical(sample_in: Any, sample_out: Any) -> Any:
        sample_out.append(
            {"labels": sample_in.labels.numpy(), "images": np.flip(sample_in.images.numpy(), axis=0)}
        )
        return sample_out

    @lc.compute
    def resize(sample_in: Any, sample_out: Any, new_size: tuple[int, int]) -> None:
        sample_out.labels.append(sample_in.labels.numpy())
        image = Image.fromarray(sample_in.images.numpy())
        sample_out.images.append(np.asarray(image.resize(new_size, Image.Resampling.BILINEAR)))

    @lc.compute
    def mlp(sample_in: Any, sample_out: Any, w: np.ndarray, rounds: int) -> None:
        x = sample_in.vectors.numpy()
        for _ in range(rounds):
            x = np.tanh(x @ w)
        sample_out.vectors.append(x)

    @lc.compute
    def flip_batch(batch_in: Any, sample_out: Any) -> Any:
        # A batch (batch_size=...) flipped at once: columns back, as HF's map(batched=True) returns them.
        return {"images": np.flip(batch_in.images.numpy(), axis=1), "labels": batch_in.labels.numpy()}

    return {
        "flip": flip_vertical, "resize": resize, "mlp": mlp, "compose": lc.compose, "flip_batch": flip_batch,
    }  # fmt: skip


def _timed_eval(pipeline: Any, ds: Any, out_path: str, workers: int, batch_size: int | None = None) -> float:
    import lakecompute as lc

    out = lc.like(out_path, ds, overwrite=True)  # creating data_out is setup, not timed
    t0 = time.perf_counter()
    pipeline.eval(
        ds, out, num_workers=workers, scheduler="processed", progressbar=False, batch_size=batch_size
    )
    return time.perf_counter() - t0


def _stored_bytes(path: str) -> int:
    """Bytes of a dataset's files (its segments' chunks, manifests, ...)."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


# -- the suite --------------------------------------------------------------------------------------


def _fmt_s(x: float) -> str:
    return f"{x:.3f} s"


def print_table(lines: list[tuple[str, str, str, str, str, str, str]]) -> None:
    head = ("workload", "ours", "floor (1 proc)", "floor (Pool 2)", "ratio vs floor", "target", "")
    table = [head, *lines]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    print("\n== transforms: eval vs plain-loop floor (median of runs; ratio = ours / matching floor) ==")
    for j, r in enumerate(table):
        print(
            "  ".join(
                c.rjust(w) if 0 < i < 5 else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
        if j == 0:
            print("  ".join("-" * w for w in widths))


def _image_dataset(path: str, images: Any, labels: Any, **image_kwargs: Any) -> Any:
    """A dataset of ``images`` and ``labels`` (class_label 0..9), written in one commit (setup, not timed)."""
    import lakecompute as lc

    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", **image_kwargs)
        ds.create_tensor("labels", htype="class_label", class_names=[str(i) for i in range(10)])
        ds.images.extend(images)
        ds.labels.extend(labels)
    return ds


def _plan(tmp: str, n1: int, n2: int, n3: int) -> dict[str, dict[str, Callable[[], float]]]:
    """Every timed variant of W1-W3 (floors and evals), with their inputs built once, not timed."""
    import lakecompute as lc
    from bench._data import mnist_like

    fns = functions()
    images, labels = mnist_like(n1)
    ds1 = _image_dataset(f"{tmp}/w1", images, labels)
    pics, pic_labels = photos(n2)
    blobs = [_png(p) for p in pics]
    del pics
    ds2 = _image_dataset(f"{tmp}/w2", [_Png(b) for b in blobs], pic_labels, sample_compression="png")
    vectors = np.random.default_rng(3).standard_normal((n3, 256)).astype(np.float32)
    w = weights()
    ds3 = lc.empty(f"{tmp}/w3", overwrite=True)
    ds3.create_tensor("vectors", htype="embedding", dtype="float32")
    ds3.vectors.extend(vectors)
    # The floors' inputs, encoded as the datasets store them (not timed).
    w1_whole = (Stored(images), Stored(labels))
    w1_halves = [(Stored(images[a:b]), Stored(labels[a:b])) for a, b in _halves(n1)]
    w3_whole = Stored(vectors)
    w3_halves = [Stored(vectors[a:b]) for a, b in _halves(n3)]
    p1 = fns["flip"]()
    p2 = fns["compose"]([fns["flip"](), fns["resize"](new_size=SIZE)])
    p3 = fns["mlp"](w=w, rounds=ROUNDS)
    pb = fns["flip_batch"]()
    plan: dict[str, dict[str, Callable[[], float]]] = {
        "W1": {
            "floor1": lambda: floor_w1(w1_whole, w1_halves, pool=False),
            "floor2": lambda: floor_w1(w1_whole, w1_halves, pool=True),
            "raw1": lambda: w1_raw_loop(images, labels),
            "ours0": lambda: _timed_eval(p1, ds1, f"{tmp}/w1-out", 0),
            "ours2": lambda: _timed_eval(p1, ds1, f"{tmp}/w1-out", 2),
        },
        "W2": {
            "floor1": lambda: floor_w2(blobs, pic_labels, pool=False),
            "floor2": lambda: floor_w2(blobs, pic_labels, pool=True),
            "ours0": lambda: _timed_eval(p2, ds2, f"{tmp}/w2-out", 0),
            "ours2": lambda: _timed_eval(p2, ds2, f"{tmp}/w2-out", 2),
        },
        "W3": {
            "floor1": lambda: floor_w3(w3_whole, w3_halves, w, pool=False),
            "floor2": lambda: floor_w3(w3_whole, w3_halves, w, pool=True),
            "ours0": lambda: _timed_eval(p3, ds3, f"{tmp}/w3-out", 0),
            "ours2": lambda: _timed_eval(p3, ds3, f"{tmp}/w3-out", 2),
        },
        "W1b": {
            "floor1": lambda: w1_vectorised(w1_whole),
            "ours0": lambda: _timed_eval(pb, ds1, f"{tmp}/w1b-out", 0, BATCH),
            "ours2": lambda: _timed_eval(pb, ds1, f"{tmp}/w1b-out", 2, BATCH),
        },
    }
    if hf_available() is None:
        # HF's two maps re-encode every full-size image as PNG in between: minutes for 2,000 images, so
        # they run on the first UNFUSED images and are compared per image.
        peers = hf_variants(tmp, (images, labels), (blobs, pic_labels), vectors, w, ROUNDS, SIZE, UNFUSED)
        for wl, variants in peers.items():
            plan[wl].update({k: v for k, v in variants.items() if not k.startswith("hfu")})
            plan[f"{wl}u"] = {k: v for k, v in variants.items() if k.startswith("hfu")}
    return plan


def _measure(
    plan: dict[str, dict[str, Callable[[], float]]], runs: int
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, list[float]]]]:
    """Medians and all times per workload and variant; runs interleaved so noise hits every variant.

    The peers (HF ``datasets.map``) run after every floor and eval: a process that ran them runs the
    floors up to 1.8x slower afterwards (W1's one-process floor: 0.31 s before, 0.54-0.60 s after, ours
    0.52-0.57 s either way), so measured among them the floors would flatter every ratio to them.
    """
    own = {wl: {k: fn for k, fn in vs.items() if not _is_peer(k)} for wl, vs in plan.items()}
    peers = {wl: {k: fn for k, fn in vs.items() if _is_peer(k)} for wl, vs in plan.items()}
    for variants in own.values():  # warm up once (imports, page cache) without timing
        if variants:
            next(iter(variants.values()))()
    spread: dict[str, dict[str, list[float]]] = {}
    for part in (own, peers):
        for wl, variants in part.items():
            times = spread.setdefault(wl, {})
            # Floors and evals 2 * runs + 1 times (seconds each), the peers runs times, the unfused once.
            repeats = 1 if wl.endswith("u") else runs if part is peers else own_runs(runs)
            for _ in range(repeats):
                for k, fn in variants.items():
                    return_freed_memory()
                    times.setdefault(k, []).append(fn())
    med = {wl: {k: statistics.median(v) for k, v in times.items()} for wl, times in spread.items()}
    return med, spread


def own_runs(runs: int) -> int:
    """How many times the floors and our evals run for ``--runs runs``: more than the peers, whose runs
    cost minutes, because the targets compare them with each other, within 5 to 20 %."""
    return 2 * runs + 1


def return_freed_memory() -> None:
    """Give the memory the process has freed back to the system (glibc's ``malloc_trim``), so that every
    variant starts from the same heap. A variant that leaves freed memory in the heap slows the next one
    in the process: W1's one-process floor ran in 0.50-0.58 s after a 0-worker eval, 0.32 s after a
    2-worker one, and 0.32 s again once trimmed (the same holds after HF's map). Not glibc: nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.malloc_trim(0)


def _is_peer(variant: str) -> bool:
    """Whether a variant is a peer's (HF ``datasets.map``), not a floor or our eval."""
    return variant.startswith("hf")


Line = tuple[str, str, str, str, str, str, str]
#: The issue-29 targets: ours / the matching memory floor (1 process for 0 workers, Pool(2) for 2).
_TARGETS = {
    ("W1", 0): 1.2, ("W1", 2): 1.2, ("W2", 0): 1.05, ("W2", 2): 1.05, ("W3", 2): 1.05,
    ("W1b", 0): 1.5,
}  # fmt: skip


def _line(
    name: str, ours: float, f1: float | None, f2: float | None, ratio: float | None, limit: float | None
) -> Line:
    ok = None if limit is None or ratio is None else ratio <= limit
    return (
        name, _fmt_s(ours), "" if f1 is None else _fmt_s(f1), "" if f2 is None else _fmt_s(f2),
        "" if ratio is None else f"{ratio:.2f}x", f"<= {limit:g}x" if limit else "—",
        "" if ok is None else ("PASS" if ok else "MISS"),
    )  # fmt: skip


def _floor_rows(
    med: dict[str, dict[str, float]], spread: dict[str, dict[str, list[float]]], sizes: dict[str, str]
) -> tuple[list[Row], list[Line]]:
    """Each eval next to its memory floor (the plain loop, 1 process and Pool(2))."""
    rows: list[Row] = []
    lines: list[Line] = []
    for wl in ("W1", "W2", "W3", "W1b"):
        m = med[wl]
        for workers in (0, 2):
            ours = m[f"ours{workers}"]
            floor_key = "floor1" if workers == 0 or wl == "W1b" else "floor2"
            floor = m[floor_key]
            limit = _TARGETS.get((wl, workers))
            ratio = ours / floor
            name = f"{wl} {sizes[wl]}, {workers} workers"
            lines.append(_line(name, ours, m["floor1"], m.get("floor2"), ratio, limit))
            which = "floor, 1 process" if workers == 0 else "floor, Pool(2)"
            rows.append(Row(
                f"{wl} eval, {workers} workers", ours * 1e3, floor * 1e3, "ms",
                f"within {limit:g}x of floor" if limit else "", None if limit is None else ratio <= limit,
                "vectorised floor, 1 process" if wl == "W1b" else which,
                _runs_note(spread[wl][f"ours{workers}"], spread[wl][floor_key]),
            ))  # fmt: skip
    raw = med["W1"]["raw1"]
    lines.append(("W1 bare loop, memory to memory (reference)", "", _fmt_s(raw), "",
                  f"{med['W1']['ours0'] / raw:.2f}x", "—", ""))  # fmt: skip
    speedup = med["W3"]["ours0"] / med["W3"]["ours2"]
    floor_speedup = med["W3"]["floor1"] / med["W3"]["floor2"]
    lines.append(("W3 speedup, 2 workers vs 0", f"{speedup:.2f}x", "", f"{floor_speedup:.2f}x", "", "—", ""))
    rows.append(Row("W3 speedup 2 vs 0 workers", speedup, floor_speedup, "x", "", None,
                    "floor Pool(2) vs 1 process"))  # fmt: skip
    return rows, lines


def _runs_note(ours: list[float], floor: list[float]) -> str:
    """Every run of ours and of its floor, in order (run i of each were measured seconds apart)."""
    return f"runs: {', '.join(f'{x:.3f}' for x in ours)} s; floor: {', '.join(f'{x:.3f}' for x in floor)} s"


def _peer_rows(med: dict[str, dict[str, float]], sizes: dict[str, str]) -> tuple[list[Row], list[Line]]:
    """Each eval next to Hugging Face's ``datasets.map`` doing the same (fused; W2 also as two maps)."""
    rows: list[Row] = []
    lines: list[Line] = []
    for wl in ("W1", "W2", "W3"):
        m = {**med[wl], **med.get(f"{wl}u", {})}
        for workers in (0, 2):
            for key, how in ((f"hf{workers}", "fused"), (f"hfu{workers}", "2 maps")):
                if key not in m:
                    continue
                ours, peer = m[f"ours{workers}"], m[key]
                if key.startswith("hfu"):  # run on fewer images: per image, scaled to the workload
                    peer *= int(sizes[f"{wl}n"]) / UNFUSED
                    how = f"2 maps, {UNFUSED} images scaled"
                name = f"{wl} vs HF datasets.map ({how}), {workers} {'procs' if workers else 'workers'}"
                lines.append((name, _fmt_s(ours), _fmt_s(peer), "", f"{peer / ours:.2f}x faster", "> 1x",
                              "PASS" if peer > ours else "MISS"))  # fmt: skip
                rows.append(Row(f"{wl} vs HF map {how}, {workers} workers", ours * 1e3, peer * 1e3, "ms",
                                "ahead of HF", peer > ours,
                                f"datasets.map ({how}), num_proc={workers or None}"))  # fmt: skip
    return rows, lines


def _w2_size_row(tmp: str) -> tuple[Row, Line]:
    """W2's output: the dataset's stored bytes next to the floor's PNG bytes (same images, same level)."""
    floor_bytes = _W2_FLOOR_BYTES[0]
    ours = _stored_bytes(f"{tmp}/w2-out")
    ok = ours <= floor_bytes * 1.01  # the dataset's manifests and index rows: well under 1 %
    line = ("W2 output bytes (dataset vs the floor's PNGs)", f"{ours / 1e6:.2f} MB",
            f"{floor_bytes / 1e6:.2f} MB", "", f"{ours / floor_bytes:.2f}x", "<= 1x (+1 %)",
            "PASS" if ok else "MISS")  # fmt: skip
    row = Row("W2 output bytes", ours / 1e6, floor_bytes / 1e6, "MB", "no larger than the floor's", ok,
              f"the floor's PNGs (level {PNG_LEVEL}) and labels")  # fmt: skip
    return row, line


def _memory_rows(tmp: str, n1: int) -> tuple[list[Row], list[Line]]:
    """Peak RSS per worker for W1 at 1x and 4x the input (measured in a fresh interpreter)."""
    from bench._data import mnist_like

    big, big_labels = mnist_like(4 * n1, seed=1)
    _image_dataset(f"{tmp}/w1x4", big, big_labels)
    rss1, _ = worker_peak_rss(f"{tmp}/w1", f"{tmp}/w1-rss")
    rss4, _ = worker_peak_rss(f"{tmp}/w1x4", f"{tmp}/w1x4-rss")
    growth = rss4 / rss1
    ok = growth < 1.3
    line = (
        "W1 peak RSS per worker, 1x -> 4x input", f"{rss1:.0f} -> {rss4:.0f} MiB", "", "",
        f"{growth:.2f}x", "< 1.3x", "PASS" if ok else "MISS",
    )  # fmt: skip
    row = Row("W1 worker peak RSS, 4x input", rss4, rss1, "MiB", "< 1.3x of 1x input", ok,
              "the same at 1x input", f"{n1:,} vs {4 * n1:,} samples, 2 workers")  # fmt: skip
    return [row], [line]


@suite("transforms")
def transforms(opts: Any) -> list[Row]:
    """eval vs a hand-written loop (1 process and Pool(2)): W1 flip, W2 PNG resize, W3 MLP; worker memory."""
    quick = bool(getattr(opts, "quick", False))
    runs = max(1, int(getattr(opts, "runs", 3)))
    n1, n2, n3 = (10_000, 300, 3_000) if quick else (N1, N2, N3)
    sizes = {
        "W1": f"{n1:,} 28x28 flip", "W2": f"{n2:,} PNG resize", "W3": f"{n3:,} MLP x{ROUNDS}",
        "W1b": f"{n1:,} 28x28 flip, batches of {BATCH}", "W2n": str(n2),
    }  # fmt: skip
    with scratch_dir("lc-bench-transforms-") as tmp:
        med, spread = _measure(_plan(tmp, n1, n2, n3), runs)
        rows, lines = _floor_rows(med, spread, sizes)
        peer_rows, peer_lines = _peer_rows(med, sizes)
        size_row, size_line = _w2_size_row(tmp)
        memory_rows, memory_lines = _memory_rows(tmp, n1)
    print_table([*lines, size_line, *peer_lines, *memory_lines])
    for note in (hf_available(), deeplake3_note()):
        if note:
            print(f"note: {note}")
    return [*rows, size_row, *peer_rows, *memory_rows]


class _Png:
    """An already encoded PNG: stored as it is (the ``_lakecompute_blob`` hook ``lc.read`` files use),
    else decoded, so building the input does not encode every image a second time."""

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def _decoded(self) -> np.ndarray:
        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(self.blob)))

    def _lakecompute_blob(self) -> tuple[str, bytes, tuple[int, ...]]:
        from PIL import Image

        with Image.open(io.BytesIO(self.blob)) as im:
            w, h = im.size
        return "png", self.blob, (h, w, 3)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self._decoded()
        return a if dtype is None else a.astype(dtype)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    result = transforms(parser.parse_args())
    print(json.dumps([r.to_json() for r in result], indent=1))
