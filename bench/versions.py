"""Versions (issue 27): restore, branch, diff and merge in milliseconds whatever the rows; saved views at the
speed of copying their bytes.

**History operations.** A dataset of ``ROWS`` rows (an int32 and an int64 tensor) and ``VERSIONS`` versions
is built through the public API: one extend, then commits that touch only metadata (``ds.info``) with a
row replaced every tenth commit, so the tensors end up in a couple of hundred fragments, as a dataset edited
over time is. On its final version the suite times, median of several runs each:

* ``restore`` of a version half the history back (one new version, no data copied), and the same with
  nothing remembered of earlier reads (the version read from storage with its chain of deltas);
* ``checkout(name, create=True)`` (one ref created);
* ``diff`` between an early version and the newest (two manifests compared fragment by fragment);
* a fast-forward ``merge`` of a branch one commit ahead (one move of the branch);
* ``log()`` of the newest version (every version it descends from).

Each runs at two sizes, 100,000 and 1,000,000 rows (10,000 and 100,000 with ``--quick``); the baseline
column is the smaller size, so a ratio near 1 says the time does not grow with the rows.

**History at scale** (issue 39). ``EDITS`` single-row commits (``ds.x[i] = v`` at random rows, each its
own version) on a dataset of 1,000,000 rows: the bytes of metadata they add (everything stored outside the
segments and typed arrays: manifests, refs, hints), and the same operations as above timed on its newest
version, where every tensor is a couple of thousand fragments.

**Saved views.** ``view.save(dest)`` of a scattered 10% of ``N_IMAGES`` 64x64 JPEG images against the floor:
a plain loop that copies the same encoded bytes between the same kind of storage — reads each stored chunk
that holds a selected image once (through zarr, checksums verified), cuts the images' bytes out, and writes
them into a new zarr byte array in 1 MiB chunks with the same codecs, plus their sizes. Rates are MB/s of
encoded image bytes copied.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench import Row, scratch_dir, suite

ROWS = (100_000, 1_000_000)
VERSIONS = 1_000
N_IMAGES = 20_000
LIMIT_MS = 50.0
LOG_LIMIT_MS = 100.0
EDITS = 1_000
EDITS_LIMIT_MB = 2.0


def build_history(path: str, rows: int, versions: int) -> Any:
    """The history fixture (see the module docstring), through the public API."""
    import lakecompute as lc

    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int32")
        ds.create_tensor("y", dtype="int64")
    ds.extend({"x": np.arange(rows, dtype=np.int32), "y": np.arange(rows, dtype=np.int64)})
    rng = np.random.default_rng(0)
    while ds.version < versions - 1:
        if ds.version % 10 == 0:
            ds.x[int(rng.integers(rows))] = -1  # a row replaced: the fragments split
        else:
            ds.info["step"] = ds.version  # metadata only
    return ds


def _median_ms(runs: int, fn: Callable[[int], float]) -> float:
    return statistics.median(fn(i) for i in range(runs)) * 1e3


def _history_times(path: str, rows: int, versions: int, runs: int, fixture: Any = None) -> dict[str, float]:
    """Milliseconds per operation on a fresh fixture of ``rows`` rows and ``versions`` versions (or on the
    dataset ``fixture`` built at ``path``)."""

    ds = build_history(path, rows, versions) if fixture is None else fixture
    head = ds.version
    versions = versions or head

    def log(i: int) -> float:
        t0 = time.perf_counter()
        entries = ds.log()
        seconds = time.perf_counter() - t0
        assert len(entries) >= versions
        return seconds

    return {"log()": _median_ms(runs, log), **_ref_times(path, ds, head, runs)}


def _ref_times(path: str, ds: Any, head: int, runs: int) -> dict[str, float]:
    """Milliseconds per restore, branch, diff and fast-forward merge on ``ds`` (at version ``head``)."""
    import lakecompute as lc

    def restore(i: int) -> float:
        t0 = time.perf_counter()
        ds.restore(head // 2 + i)
        return time.perf_counter() - t0

    def restore_cold(i: int) -> float:
        # Nothing remembered: the version restored is read from storage with its whole chain of deltas.
        import importlib

        for home in ("lakecompute.versioned", "lakecompute.storage"):  # where the tree measured keeps it
            getattr(importlib.import_module(home), "forget_manifests", lambda: None)()
        t0 = time.perf_counter()
        ds.restore(head // 3 + 7 * i)
        return time.perf_counter() - t0

    def checkout(i: int) -> float:
        t0 = time.perf_counter()
        ds.checkout(f"b{i}", create=True)
        seconds = time.perf_counter() - t0
        ds.checkout("main")
        return seconds

    def diff(i: int) -> float:
        t0 = time.perf_counter()
        d = ds.diff(2 + i, "main")
        seconds = time.perf_counter() - t0
        assert d.tensors["x"].replaced
        return seconds

    def merge(i: int) -> float:
        other = lc.load(path)
        other.checkout(f"ff{i}", create=True)
        other.info["ff"] = i
        t0 = time.perf_counter()
        version = ds.merge(f"ff{i}")
        seconds = time.perf_counter() - t0
        assert version == other.version
        return seconds

    return {
        "restore": _median_ms(runs, restore),
        "restore (cold: no manifest remembered)": _median_ms(runs, restore_cold),
        "checkout(create=True)": _median_ms(runs, checkout),
        "diff": _median_ms(runs, diff),
        "merge (fast-forward)": _median_ms(runs, merge),
    }


def _limit(op: str) -> float:
    return LOG_LIMIT_MS if op.startswith("log") else LIMIT_MS


def _history_rows(tmp: str, runs: int, quick: bool) -> list[Row]:
    small, large = (r // 10 for r in ROWS) if quick else ROWS
    versions = 200 if quick else VERSIONS
    at_small = _history_times(f"{tmp}/small", small, versions, max(5, runs))
    at_large = _history_times(f"{tmp}/large", large, versions, max(5, runs))
    return [
        Row(
            f"{op}, {large:,} rows, {versions:,} versions",
            ms,
            at_small[op],
            "ms",
            target=f"<= {_limit(op):.0f} ms",
            ok=ms <= _limit(op),
            baseline_name=f"the same at {small:,} rows",
            note="ratio ~1: does not grow with rows",
        )
        for op, ms in at_large.items()
    ]


def metadata_bytes(path: str) -> int:
    """Bytes stored in a local dataset outside its sample data (segments and typed arrays): manifests, refs,
    hints, leases, the root marker."""
    total = 0
    for dirpath, dirs, files in os.walk(path):
        rel = os.path.relpath(dirpath, path).split(os.sep)
        if rel[0] in ("segments", "tensors"):
            dirs[:] = []
            continue
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def build_edits(path: str, rows: int, edits: int) -> tuple[Any, int]:
    """``rows`` rows in one extend, then ``edits`` single-row commits at random rows; the dataset and the
    metadata bytes the edits added."""
    import lakecompute as lc

    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int32")
        ds.create_tensor("y", dtype="int64")
    ds.extend({"x": np.arange(rows, dtype=np.int32), "y": np.arange(rows, dtype=np.int64)})
    before = metadata_bytes(path)
    rng = np.random.default_rng(1)
    for i in range(edits):
        ds.x[int(rng.integers(rows))] = -i
    return ds, metadata_bytes(path) - before


def _edit_rows(tmp: str, runs: int, quick: bool) -> list[Row]:
    rows = ROWS[-1] // 10 if quick else ROWS[-1]
    edits = EDITS // 5 if quick else EDITS
    t0 = time.perf_counter()
    _ds, added = build_edits(f"{tmp}/edits", rows, edits)
    build = time.perf_counter() - t0
    mb = added / 1e6
    out = [
        Row(
            f"metadata of {edits:,} single-row commits, {rows:,} rows",
            mb,
            None,
            "MB",
            target=f"<= {EDITS_LIMIT_MB:.0f} MB" if not quick else "",
            ok=mb <= EDITS_LIMIT_MB if not quick else None,
            note=f"{added / edits:,.0f} bytes per commit; the commits took {build:.1f} s",
        )
    ]
    timed = _history_times(f"{tmp}/edits", rows, 0, max(5, runs), fixture=_ds)
    out += [
        Row(
            f"{op}, after {edits:,} single-row commits",
            ms,
            None,
            "ms",
            target=f"<= {_limit(op):.0f} ms",
            ok=ms <= _limit(op),
        )
        for op, ms in timed.items()
    ]
    return out


def _jpegs(path: str, n: int) -> Any:
    import lakecompute as lc

    rng = np.random.default_rng(0)
    ds = lc.empty(path, overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="jpeg")
    base = rng.integers(0, 255, (8, 64, 64, 3), dtype=np.uint8)
    for lo in range(0, n, 2_000):
        block = [np.roll(base[i % 8], i, axis=0) for i in range(lo, min(n, lo + 2_000))]
        ds.images.extend(block)
    return ds


def floor_copy(ds: Any, rows: np.ndarray, dest: str) -> int:
    """The floor: copy the encoded bytes of ``rows`` of tensor ``images`` into a new zarr byte array, reading
    each stored chunk that holds one of them once; returns the bytes copied."""
    import zarr
    from zarr.storage import LocalStore

    from lakecompute.testing.internals import dataset_core

    core = dataset_core(ds)
    store = LocalStore(core.backend.local_path(""))
    parts: list[bytes] = []
    sizes: list[int] = []
    start = 0
    for f in core.state("images").fragments:
        data = zarr.open_array(store, path=f"segments/{f.seg}/data", mode="r")
        index = zarr.open_array(store, path=f"segments/{f.seg}/index", mode="r")
        entry = np.asarray(index[f.idx : f.idx + f.total * (1 + f.ndim)]).reshape(f.total, 1 + f.ndim)
        offsets = f.off + np.concatenate([[0], np.cumsum(entry[:, 0])])[f.k : f.k + f.n]
        mine = rows[(rows >= start) & (rows < start + f.n)] - start
        chunk = data.chunks[0]
        cached: dict[int, np.ndarray] = {}
        for r in mine.tolist():
            lo, size = int(offsets[r]), int(entry[f.k + r, 0])
            for c in range(lo // chunk, (lo + size - 1) // chunk + 1):
                if c not in cached:
                    cached = {c: np.asarray(data[c * chunk : (c + 1) * chunk])}  # one chunk held at a time
            first = lo // chunk
            if first == (lo + size - 1) // chunk:
                parts.append(cached[first][lo - first * chunk : lo - first * chunk + size].tobytes())
            else:
                parts.append(np.asarray(data[lo : lo + size]).tobytes())
            sizes.append(size)
        start += f.n
    blob = np.frombuffer(b"".join(parts), dtype=np.uint8)
    out = zarr.create_array(LocalStore(dest), name="data", shape=blob.shape, chunks=(1 << 20,), dtype="uint8",
                            compressors=data.compressors)  # fmt: skip
    out[:] = blob
    zarr.create_array(LocalStore(dest), name="sizes", data=np.asarray(sizes, dtype=np.int64))
    return len(blob)


def _save_rows(tmp: str, runs: int, quick: bool) -> list[Row]:
    n = N_IMAGES // 10 if quick else N_IMAGES
    ds = _jpegs(f"{tmp}/jpegs", n)
    rows = np.flatnonzero(np.random.default_rng(1).random(n) < 0.1)
    view = ds[rows]
    ours, floor = [], []
    copied = 0
    for i in range(max(3, runs)):  # interleaved, so both see the same machine
        t0 = time.perf_counter()
        view.save(f"{tmp}/save-{i}", progressbar=False)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        copied = floor_copy(ds, rows, f"{tmp}/floor-{i}")
        floor.append(time.perf_counter() - t0)
    mb = copied / 1e6
    mine, base = mb / statistics.median(ours), mb / statistics.median(floor)
    return [
        Row(
            f"view.save of a filtered 10% ({len(rows):,} of {n:,} JPEG 64x64)",
            mine,
            base,
            "MB/s",
            target=">= 0.8x floor",
            ok=mine >= 0.8 * base,
            baseline_name="loop copying the same encoded bytes, zarr to zarr",
            note=f"{mb:.1f} MB of JPEG bytes",
        )
    ]


@suite("versions")
def versions(opts: Any) -> list[Row]:
    """log, restore, checkout(create), diff, fast-forward merge on 1,000,000 rows, 1,000 versions; metadata of
    1,000 single-row commits; view.save."""
    with scratch_dir() as tmp:
        return (
            _history_rows(tmp, opts.runs, opts.quick)
            + _edit_rows(tmp, opts.runs, opts.quick)
            + _save_rows(tmp, opts.runs, opts.quick)
        )
