"""Tables (issue 40): ``to_parquet`` and ``from_parquet`` of W2's 2,000 PNG images, next to the floor and to
Hugging Face ``datasets``.

The input is W2's (``bench.transforms.photos``): 2,000 RGB photos of 200-320 px encoded as PNG (about
240 MB), with a label each, stored in a dataset as those PNG bytes. Built once, before any timing.

* **to_parquet**: ``ds.to_parquet(path)`` (the images' stored bytes, read and written a row group at a
  time) against the floor, pyarrow writing a table of the same bytes held in memory with the same writer
  options (``pq.write_table``); target <= 1.3x the floor. And against ``datasets.Dataset.to_parquet`` of
  the same images (an in-memory dataset with an ``Image()`` column of the same bytes); target: ahead.
* **from_parquet**: ``lc.from_parquet(that file, dest)`` (every image decoded once, to check it, on the
  default workers; the bytes stored as they are) against ``datasets.Dataset.from_parquet`` plus a
  ``cast_column("images", Image())`` (which writes its Arrow cache and checks nothing); target: ahead.

Runs are interleaved (ours, then the peers, again); the median of ``--runs`` is reported.
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


def _writes(ds: Any, table: Any, root: str, runs: int, hf: Any) -> dict[str, list[float]]:
    import pyarrow.parquet as pq

    from lakecompute.tables import parquet_options

    options = parquet_options(ds)
    times: dict[str, list[float]] = {"ours": [], "floor": [], "hf": []}
    ours, floor, peer = (os.path.join(root, f"{name}.parquet") for name in ("ours", "floor", "hf"))
    for _ in range(runs):
        times["ours"].append(_timed(lambda: ds.to_parquet(ours)))
        times["floor"].append(_timed(lambda: pq.write_table(table, floor, **options)))
        if hf is not None:
            times["hf"].append(_timed(lambda: hf.to_parquet(peer)))
    return times


def _reads(path: str, root: str, runs: int, hf: bool) -> dict[str, list[float]]:
    import lakecompute as lc

    times: dict[str, list[float]] = {"ours": [], "ours0": [], "hf": []}

    def hf_read(cache: str) -> None:
        import datasets

        out = datasets.Dataset.from_parquet(path, cache_dir=cache)
        out.cast_column("images", datasets.Image())

    for i in range(runs):  # each run into new folders: nothing is read from the run before
        dest, dest0, cache = (os.path.join(root, f"{name}{i}") for name in ("back", "back-0-", "hf-cache"))
        times["ours"].append(_timed(lambda: lc.from_parquet(path, dest, progressbar=False)))  # noqa: B023
        times["ours0"].append(
            _timed(lambda: lc.from_parquet(path, dest0, num_workers=0, progressbar=False))  # noqa: B023
        )
        if hf:
            times["hf"].append(_timed(lambda: hf_read(cache)))  # noqa: B023
        shutil.rmtree(cache, ignore_errors=True)
    return times


def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@suite("tables")
def tables(opts: Any) -> list[Row]:
    """to_parquet / from_parquet of W2's 2,000 PNG images vs pyarrow's floor and Hugging Face datasets."""
    n = 300 if opts.quick else N
    runs = max(1, int(opts.runs))
    missing = hf_available()
    with scratch_dir() as root:
        ds, table = _inputs(n, root)
        hf = _hf_dataset(table) if missing is None else None
        written = _writes(ds, table, root, runs, hf)
        path = os.path.join(root, "ours.parquet")
        size = os.path.getsize(path) / 1e6
        read = _reads(path, root, runs, missing is None)
    ours, floor, peer = _med(written["ours"]), _med(written["floor"]), _med(written["hf"])
    assert ours is not None
    assert floor is not None
    note = f"{n:,} PNG images + labels, {size:.0f} MB file, median of {runs}"
    rows = [
        Row("to_parquet vs the floor", ours, floor, "s", "<= 1.3x the floor", ours <= 1.3 * floor,
            "pyarrow writes the same bytes", note),
    ]  # fmt: skip
    if peer is not None:
        rows.append(Row("to_parquet vs HF datasets", ours, peer, "s", "ahead", ours < peer,
                        "datasets.Dataset.to_parquet", note))  # fmt: skip
    back, back0, hf_back = _med(read["ours"]), _med(read["ours0"]), _med(read["hf"])
    assert back is not None
    assert back0 is not None
    workers = f"{min(8, os.cpu_count() or 1)} workers (the default)"
    if hf_back is not None:
        rows.append(
            Row(
                f"from_parquet vs HF ({workers})",
                back,
                hf_back,
                "s",
                "ahead",
                back < hf_back,
                "Dataset.from_parquet + cast to Image()",
                note + "; ours decodes every image",
            )
        )
        rows.append(Row("from_parquet vs HF (0 workers)", back0, hf_back, "s", "", None,
                        "Dataset.from_parquet + cast to Image()", note))  # fmt: skip
    else:
        rows.append(Row("from_parquet", back, None, "s", "", None, "", f"{note}; HF: {missing}"))
    return rows
