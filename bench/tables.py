"""Tables (issue 40): ``to_parquet`` and ``from_parquet`` of W2's 2,000 PNG images, next to the floor and to
Hugging Face ``datasets``.

The input is W2's (``bench.transforms.photos``): 2,000 RGB photos of 200-320 px encoded as PNG (about
240 MB), with a label each, stored in a dataset as those PNG bytes. Built once, before any timing.

* **to_parquet**: ``ds.to_parquet(path)`` (the images' stored bytes, read and written a row group at a
  time, into a temporary file flushed to disk and renamed) against the floor, pyarrow writing a table of
  the same bytes held in memory with the same writer options (``pq.write_table``); target <= 1.3x the
  floor. Beside it the floor flushed to disk too (the same durability), and
  ``datasets.Dataset.to_parquet`` of the same images (an in-memory dataset with an ``Image()`` column of
  the same bytes); target: ahead.
* **from_parquet**: ``lc.from_parquet(that file, dest)`` with its defaults (each image's file structure
  checked, PNG chunk CRCs and IEND, without decoding; in the process; the bytes stored as they are)
  against ``datasets.Dataset.from_parquet`` plus a ``cast_column("images", Image())`` (which writes its
  Arrow cache and checks nothing); target: ahead. Beside it ``verify=True`` (every image decoded once) on
  0 and the default workers, what that check alone costs (Pillow decoding every image once), and the
  floor of the dataset's storage format (`_format_floor`): the same file read by pyarrow while a second
  thread stores the images' bytes as the segments store them, in checksummed 1 MiB chunk files each
  written to a temporary name and renamed, and nothing else (no checks, no digest, no index, no commit).

Runs are interleaved (ours, then the peers, again); the median of ``--runs`` is reported (of at least five
for the writes); one untimed round of each writer, and of the default ingest and HF's read, comes first.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import Row, scratch_dir, suite
from bench.peers import hf_available

N = 2_000
_LABELS = [f"class {i}" for i in range(10)]


def _inputs(n: int, root: str) -> tuple[Any, Any]:
    """W2's images as PNG bytes: the dataset that stores them, and the same bytes as an Arrow table."""
    import pyarrow as pa

    import lakecompute as lc
    from bench.transforms import _png, photos
    from lakecompute.tables import ImageBytes

    pics, labels = photos(n)
    blobs = [_png(p) for p in pics]
    ds = lc.empty(os.path.join(root, "w2"), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    ds.create_tensor("labels", htype="class_label", class_names=_LABELS)
    with ds:
        ds.images.extend([ImageBytes(b) for b in blobs])
        ds.labels.extend(labels.astype("int64"))
    table = ds.to_arrow()  # the floor's table: the same bytes, in memory
    assert table.column("images").combine_chunks().field("bytes").to_pylist()[:3] == blobs[:3]
    return ds, pa.table(table.columns, schema=table.schema)


def _timed(fn: Callable[[], Any]) -> float:
    """``fn``'s seconds, settled first as bench/detection.py's runs are: the last run's garbage collected
    and what earlier runs wrote or deleted flushed (a disk that discards freed blocks does so when its
    journal commits: the first flush of a run would otherwise wait for whatever the run before it
    deleted or overwrote; to_parquet and the ingests flush, the floor does not). A file that to_parquet
    replaced is closed (its blocks freed) on a thread after it returns: that is waited for too, so that the
    next run does not pay for it."""
    import gc
    import threading

    for thread in threading.enumerate():
        if thread.name.startswith("lakecompute-drop-replaced"):
            thread.join()
    gc.collect()
    os.sync()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _hf_dataset(table: Any) -> Any:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets.Dataset(datasets.table.InMemoryTable(table), info=datasets.DatasetInfo(
        features=datasets.Features.from_arrow_schema(table.schema)
    ))  # fmt: skip


def _durable_write(table: Any, path: str, options: dict[str, Any]) -> None:
    """The floor with to_parquet's durability: written, then flushed to disk (an atomic export must)."""
    import pyarrow.parquet as pq

    pq.write_table(table, path, **options)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _decode_all(blobs: list[bytes]) -> None:
    """What checking every image costs: Pillow decodes each once (into its buffer, as the ingest does)."""
    import io

    from PIL import Image

    for blob in blobs:
        with Image.open(io.BytesIO(blob)) as image:
            image.load()


def _format_floor(path: str, dest: str) -> None:
    """The least an ingest into the dataset's format does on this disk: pyarrow reads the row groups (one
    thread) while another stores the images' bytes, in order, as 1 MiB chunk files followed by their
    crc32c, each created under a temporary name and renamed, as `lakecompute.versioned`'s segments store
    them (a chunk of images is kept in a zstd frame of raw blocks: headers only, no work), then the labels
    as one file. Two threads, as the ingest has."""
    import queue
    import threading

    os.makedirs(dest)
    pending: queue.Queue[Any] = queue.Queue(8)

    def writer() -> None:
        while (item := pending.get()) is not None:
            _store_chunk(dest, *item)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for item in _floor_chunks(path):
            pending.put(item)
    finally:
        pending.put(None)
        thread.join()


def _floor_chunks(path: str, chunk: int = 1 << 20) -> Any:
    """The file's images' bytes as (name, 1 MiB chunk), in order, then ("labels", every label)."""
    import numpy as np
    import pyarrow.parquet as pq

    file, labels = pq.ParquetFile(path), []
    buf, fill, n = np.zeros(chunk, np.uint8), 0, 0
    for g in range(file.num_row_groups):
        group = file.read_row_group(g)
        labels.append(group.column("labels").to_numpy())
        images = group.column("images").combine_chunks().field("bytes")
        ends = np.frombuffer(images.buffers()[1], np.int32)[images.offset :][: len(images) + 1]
        data = np.frombuffer(images.buffers()[2], np.uint8)[ends[0] : ends[-1]]
        at = 0
        while at < data.size:
            take = min(chunk - fill, data.size - at)
            buf[fill : fill + take] = data[at : at + take]
            fill, at = fill + take, at + take
            if fill == chunk:
                yield str(n), buf
                buf, fill, n = np.zeros(chunk, np.uint8), 0, n + 1
    yield str(n), buf[:fill]
    yield "labels", np.ascontiguousarray(np.concatenate(labels))


def _store_chunk(dest: str, name: str, data: Any) -> None:
    """``data`` and its crc32c as the file ``name``, written under a temporary name and renamed."""
    import google_crc32c

    tmp = os.path.join(dest, f".{name}.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.writev(fd, [data, google_crc32c.value(data).to_bytes(4, "little")])
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(dest, name))


def _writes(ds: Any, table: Any, root: str, runs: int, hf: Any) -> dict[str, list[float]]:
    import pyarrow.parquet as pq

    from lakecompute.tables import parquet_options

    options = parquet_options(ds)
    times: dict[str, list[float]] = {"ours": [], "floor": [], "durable": [], "hf": []}
    ours, floor, peer = (os.path.join(root, f"{name}.parquet") for name in ("ours", "floor", "hf"))
    writers: dict[str, Callable[[], Any]] = {
        "ours": lambda: ds.to_parquet(ours, progressbar=False),
        "floor": lambda: pq.write_table(table, floor, **options),
        "durable": lambda: _durable_write(table, floor, options),
    }
    if hf is not None:
        writers["hf"] = lambda: hf.to_parquet(peer)
    # One untimed round first (each writer's first use: its imports, its file made), then at least five:
    # a write of 237 MB on this machine's disk stalls now and then for 0.3 s on either side.
    for write in writers.values():
        _timed(write)
    for _ in range(max(runs, 5)):
        for name, write in writers.items():
            times[name].append(_timed(write))
    return times


def _reads(path: str, root: str, runs: int, hf: bool, blobs: list[bytes]) -> dict[str, list[float]]:
    import lakecompute as lc

    names = ("ours", "verified0", "verified", "decode", "hf", "floor")
    times: dict[str, list[float]] = {k: [] for k in names}
    ours: dict[str, dict[str, Any]] = {
        "ours": {},  # the defaults: each file's structure checked (not decoded), in the process
        "verified0": {"verify": True, "num_workers": 0},  # every image decoded once, in the process
        "verified": {"verify": True},  # the same on the default workers
    }

    def hf_read(cache: str) -> None:
        import datasets

        out = datasets.Dataset.from_parquet(path, cache_dir=cache)
        out.cast_column("images", datasets.Image())

    # One untimed round of the default ingest and of HF's first (their first use in the process: imports,
    # and on this machine's VM the memory a process takes for the first time, which the host faults in).
    _timed(lambda: lc.from_parquet(path, os.path.join(root, "warm"), progressbar=False))
    shutil.rmtree(os.path.join(root, "warm"))
    _timed(lambda: _format_floor(path, os.path.join(root, "floor-warm")))
    shutil.rmtree(os.path.join(root, "floor-warm"))
    if hf:
        _timed(lambda: hf_read(os.path.join(root, "hf-warm")))
        shutil.rmtree(os.path.join(root, "hf-warm"), ignore_errors=True)
    for i in range(runs):  # each run into new folders: nothing is read from the run before
        for name, options in ours.items():
            dest = os.path.join(root, f"{name}-{i}")
            times[name].append(_timed(lambda: lc.from_parquet(path, dest, progressbar=False, **options)))  # noqa: B023
            shutil.rmtree(dest)  # as HF's cache below: nothing written is kept from one run to the next
        times["decode"].append(_timed(lambda: _decode_all(blobs)))
        floor = os.path.join(root, f"floor-{i}")
        times["floor"].append(_timed(lambda: _format_floor(path, floor)))  # noqa: B023
        shutil.rmtree(floor)
        if hf:
            cache = os.path.join(root, f"hf-cache{i}")
            times["hf"].append(_timed(lambda: hf_read(cache)))  # noqa: B023
            shutil.rmtree(cache, ignore_errors=True)
    return times


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _write_rows(written: dict[str, list[float]], note: str) -> list[Row]:
    ours, floor, durable, peer = (_med(written[k]) for k in ("ours", "floor", "durable", "hf"))
    rows = [
        Row("to_parquet vs the floor", ours, floor, "s", "<= 1.3x the floor", ours <= 1.3 * floor,
            "pyarrow writes the same bytes", note),
        Row("to_parquet vs the floor + fsync", ours, durable, "s", "", None,
            "the same, flushed to disk", note + "; to_parquet flushes before its rename"),
    ]  # fmt: skip
    if written["hf"]:
        why = note + "; HF neither renames nor flushes"
        rows.append(Row("to_parquet vs HF datasets", ours, peer, "s", "ahead", ours < peer,
                        "datasets.Dataset.to_parquet", why))  # fmt: skip
    return rows


def _read_rows(read: dict[str, list[float]], note: str) -> list[Row]:
    back, verified0, verified, decode, hf_back, floor = (
        _med(read[k]) for k in ("ours", "verified0", "verified", "decode", "hf", "floor")
    )
    workers = f"{min(8, os.cpu_count() or 1)} workers"
    rows = []
    if read["hf"]:
        hf = "Dataset.from_parquet + cast to Image()"
        rows += [
            Row("from_parquet vs HF", back, hf_back, "s", "ahead", back < hf_back, hf,
                note + "; defaults: each file's structure checked (PNG chunk CRCs, IEND), HF checks none"),
            Row("from_parquet verify=True (0 workers) vs HF", verified0, hf_back, "s", "", None, hf,
                note + "; every image decoded once"),
            Row(f"from_parquet verify=True ({workers}) vs HF", verified, hf_back, "s", "", None, hf, note),
            Row("the format's floor vs HF", floor, hf_back, "s", "", None, hf,
                note + "; the floor: pyarrow reading, a thread storing 1 MiB checksummed chunk files"),
        ]  # fmt: skip
    rows.append(
        Row("from_parquet vs the format's floor", back, floor, "s", "", None,
            "pyarrow + 1 MiB checksummed chunk files", note + "; the floor checks, digests, commits nothing"),
    )  # fmt: skip
    rows.append(
        Row("from_parquet verify=True (0 workers) vs decoding", verified0, decode, "s", "", None,
            "Pillow decodes every image once", note + "; what the decode check costs"),
    )  # fmt: skip
    return rows


@suite("tables")
def tables(opts: Any) -> list[Row]:
    """to_parquet / from_parquet of W2's 2,000 PNG images vs pyarrow's floor and Hugging Face datasets."""
    n = 300 if opts.quick else N
    runs = max(1, int(opts.runs))
    missing = hf_available()
    with scratch_dir() as root:
        ds, table = _inputs(n, root)
        blobs = table.column("images").combine_chunks().field("bytes").to_pylist()
        hf = _hf_dataset(table) if missing is None else None
        written = _writes(ds, table, root, runs, hf)
        path = os.path.join(root, "ours.parquet")
        size = os.path.getsize(path) / 1e6
        read = _reads(path, root, runs, missing is None, blobs)
    note = f"{n:,} PNG images + labels, {size:.0f} MB file, median of {runs} (writes: of {max(runs, 5)})"
    note += ", after an untimed round"
    if missing is not None:
        note += f"; HF: {missing}"
    return _write_rows(written, note) + _read_rows(read, note)
