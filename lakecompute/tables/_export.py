"""Exports of a dataset or view as a table: Arrow (whole or streamed), pandas, Parquet and Hugging Face
``datasets`` (the handle's ``to_arrow``, ``to_arrow_reader``, ``to_pandas``, ``to_parquet``, ``to_hf``).

Every export reads the rows in blocks (`TableRows`) and turns each into columns by the htype's mapping
(`lakecompute.tables._encode`); images travel as their stored encoded bytes, never decoded. A Parquet
file is written a row group per block into a temporary file beside the target and renamed into place
(`lakecompute.localfiles.atomic_path`): a failure or a kill leaves the previous file, or none. The next
group is read and encoded on a thread while one is written (`ahead`), into buffers reused from group to
group (`Buffers`). The file is flushed to disk once, before its rename, not a row group at a time on
another thread: on W2's 237 MB export those flushes (a journal commit each) cost 0.05-0.1 s of CPU and
saved less wall time than that on a loaded machine; the one flush waits ~0.02 s.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, Final

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.localfiles import atomic_path
from lakecompute.optional import require
from lakecompute.progress import progress_bar
from lakecompute.tables._ahead import ahead
from lakecompute.tables._arrow import pandas, pyarrow
from lakecompute.tables._encode import encode_column
from lakecompute.tables._layout import META_KEY, ColumnLayout
from lakecompute.tables._rows import Buffers, Part, TableRows
from lakecompute.tables._schema import export_schema

if TYPE_CHECKING:
    from lakecompute.datasets import Dataset, DatasetView

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "READER_BYTES",
    "parquet_options",
    "to_arrow",
    "to_arrow_reader",
    "to_hf",
    "to_pandas",
    "to_parquet",
]

BATCH_ROWS: Final = 4096
"""Rows of a record batch (and of a Parquet row group) unless the caller says otherwise."""
BATCH_BYTES: Final = 32 << 20
"""About the most bytes of samples one Parquet row group holds: ``to_parquet``'s memory is the chunk
cache (32 MiB) and about three of these (the group written, the next one, the one read; their buffers
are reused), whatever the dataset's size (docs/tables.md). 32 MiB: the export's reused buffers then
serve most of a large file, and its last flush waits for one group (64 MiB took 1.6x the CPU)."""
READER_BYTES: Final = 16 << 20
"""About the most bytes of samples one batch of ``to_arrow_reader`` holds: its memory is the chunk cache
and about four of these (the batch the consumer holds, the next one read and joined)."""
_ROW_GROUP_COUNTS = ("row_group_size", "row_group_bytes")  # to_parquet's names for its counts


def _part_batch(rows: TableRows, schema: Any, part: Part) -> Any:
    """One part as a record batch; the part's values are let go as soon as they are encoded, so that
    a group's samples and their Arrow copy never both take its whole budget."""
    pa = pyarrow()
    columns = []
    for layout in rows.layouts:
        columns.append(encode_column(layout, part.values.pop(layout.name), part.shapes[layout.name]))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _group_batches(rows: TableRows, schema: Any, group: list[Part]) -> list[Any]:
    """A group of parts as record batches (one row group, one batch of the reader), the parts let go."""
    batches = []
    while group:
        batches.append(_part_batch(rows, schema, group.pop(0)))
    return batches


def _record_batches(rows: TableRows, schema: Any, batch_size: int, max_bytes: int) -> Iterator[Any]:
    """The record batches of the rows, each read and encoded on a thread while the one before is used."""
    return ahead(_joined(_group_batches(rows, schema, group)) for group in rows.parts(batch_size, max_bytes))


def _joined(batches: list[Any]) -> Any:
    """The batches as one (this frame holds the parts only while they are joined: nothing here keeps
    them, or the result, while the consumer works and the next group is read)."""
    return batches[0] if len(batches) == 1 else pyarrow().concat_batches(batches)


def to_arrow_reader(
    data: Dataset | DatasetView,
    batch_size: int = BATCH_ROWS,
    tensors: str | Sequence[str] | None = None,
    max_bytes: int = READER_BYTES,
) -> Any:
    """The rows as a ``pyarrow.RecordBatchReader``, read as it is consumed (``Dataset.to_arrow_reader``)."""
    pa = pyarrow()
    rows = TableRows(data, tensors)
    schema = export_schema(rows.layouts)
    return pa.RecordBatchReader.from_batches(schema, _record_batches(rows, schema, batch_size, max_bytes))


def to_arrow(data: Dataset | DatasetView, tensors: str | Sequence[str] | None = None) -> Any:
    """The rows as one ``pyarrow.Table`` (see ``Dataset.to_arrow``)."""
    return to_arrow_reader(data, BATCH_ROWS, tensors).read_all()


# -- pandas ---------------------------------------------------------------------------------------------


def _cells(layout: ColumnLayout, values: Any, shapes: np.ndarray) -> Any:
    """A block of a tensor's values as the cells of a DataFrame column: numbers as the dataset reads
    them (a typed column for scalars), images as ``{bytes, path}`` (and ``shape`` where the layout
    needs it, as in the Arrow struct), text as str, json as its value."""
    column = layout.mapping.column
    if column == "image" and layout.shaped:
        return [
            {"bytes": b, "path": None, "shape": tuple(s)}
            for b, s in zip(values, shapes.tolist(), strict=True)
        ]
    if column == "image":
        return [{"bytes": b, "path": None} for b in values]
    if column == "text":
        return [b.decode("utf-8") for b in values]
    if column == "json":
        return [json.loads(b) for b in values]
    if column == "numbers" and layout.ndim == 0:
        return np.asarray(values)
    return list(values)  # a stacked array gives a view per row


def _frame(rows: TableRows, group: list[Part]) -> Any:
    pd = pandas()
    data: dict[str, Any] = {}
    for layout in rows.layouts:
        parts = [_cells(layout, p.values[layout.name], p.shapes[layout.name]) for p in group]
        if parts and all(isinstance(p, np.ndarray) for p in parts):
            data[layout.name] = np.concatenate(parts)
        else:
            cells = [c for p in parts for c in p]
            column = np.empty(len(cells), dtype=object)
            for i, cell in enumerate(cells):  # one by one: an array cell must not be broadcast
                column[i] = cell
            data[layout.name] = column
    start = group[0].start if group else 0
    stop = group[-1].stop if group else 0
    frame = pd.DataFrame(data, index=pd.RangeIndex(start, stop))
    layouts = [lay.to_json() | {"name": lay.name} for lay in rows.layouts]
    frame.attrs[META_KEY.decode()] = {"format": 1, "tensors": layouts}  # what from_pandas reads back
    return frame


def to_pandas(
    data: Dataset | DatasetView,
    tensors: str | Sequence[str] | None = None,
    batched: bool = False,
    batch_size: int = BATCH_ROWS,
) -> Any:
    """The rows as a ``pandas.DataFrame``, or an iterator of frames of ``batch_size`` rows (see
    ``Dataset.to_pandas``)."""
    pd = pandas()
    rows = TableRows(data, tensors)
    if batched:
        return (_frame(rows, group) for group in rows.parts(batch_size, BATCH_BYTES))
    frames = [_frame(rows, group) for group in rows.parts(batch_size, BATCH_BYTES)]
    if not frames:
        return _frame(rows, [])
    frame = pd.concat(frames) if len(frames) > 1 else frames[0]
    frame.attrs = frames[0].attrs
    return frame


# -- Parquet ---------------------------------------------------------------------------------------------


def parquet_options(
    data: Dataset | DatasetView, tensors: str | Sequence[str] | None = None
) -> dict[str, Any]:
    """The ``pyarrow.parquet.ParquetWriter`` options `to_parquet` writes the rows of ``data`` with (what
    the benchmark's floor writes with too)."""
    return _writer_options(TableRows(data, tensors).layouts)


def _writer_options(layouts: Sequence[ColumnLayout]) -> dict[str, Any]:
    """Parquet options per column: encoded images are written as they are (compressing or building a
    dictionary of PNG/JPEG bytes costs time and saves nothing), the rest zstd."""
    images = [lay.name for lay in layouts if lay.mapping.column == "image"]
    others = [lay.name for lay in layouts if lay.mapping.column != "image"]
    compression = dict.fromkeys(images, "none") | dict.fromkeys(others, "zstd")
    return {
        "compression": compression,
        "use_dictionary": others,
        "write_statistics": others,
    }


def _write_parquet(
    rows: TableRows, sink: Any, row_group_size: int, max_bytes: int, progressbar: bool
) -> None:
    pa = pyarrow()
    schema = export_schema(rows.layouts)
    # Each group is let go once written: its blobs' memory is read into again (the group being written,
    # the next one waiting and the one being read hold about three groups' bytes).
    rows.buffers = Buffers(4 * max_bytes)
    # Each group's parts as one row group (a table of them, not joined into one batch first), the next
    # one read and encoded on a thread while this one is written.
    groups = ahead(
        pa.Table.from_batches(_group_batches(rows, schema, group), schema)
        for group in rows.parts(row_group_size, max_bytes, ramp=True, names=_ROW_GROUP_COUNTS)
    )
    bar = progress_bar(len(rows), "to_parquet", unit="row", enabled=progressbar)
    try:
        with pa.parquet.ParquetWriter(sink, schema, **_writer_options(rows.layouts)) as writer:
            for table in groups:
                writer.write_table(table, row_group_size=max(1, table.num_rows))
                bar.update(table.num_rows)
                del table
    finally:
        bar.close()


def to_parquet(
    data: Dataset | DatasetView,
    path_or_file: str | os.PathLike[str] | BinaryIO,
    tensors: str | Sequence[str] | None = None,
    row_group_size: int = BATCH_ROWS,
    row_group_bytes: int = BATCH_BYTES,
    progressbar: bool = True,
) -> None:
    """Write the rows as a Parquet file (see ``Dataset.to_parquet``)."""
    rows = TableRows(data, tensors)
    if isinstance(path_or_file, (str, os.PathLike)):
        path = os.fspath(path_or_file)
        if "://" in path:
            raise InvalidArgumentError(
                f"to_parquet writes a local file; got {path!r}. Write it locally and upload it, or pass "
                "an open binary file object."
            )
        with atomic_path(path) as temporary:  # written by pyarrow's own file, by name
            _write_parquet(rows, temporary, row_group_size, row_group_bytes, progressbar)
        return
    _check_file(path_or_file)
    _write_parquet(rows, path_or_file, row_group_size, row_group_bytes, progressbar)


def _check_file(file: Any) -> None:
    """Refuse what pyarrow cannot write a Parquet file to: not a file object, a text one, a closed one.

    Raises:
        InvalidTypeError: not a writable binary file object.
        InvalidArgumentError: a file opened in text mode, closed, or not open for writing.
    """
    if not hasattr(file, "write"):
        raise InvalidTypeError(f"to_parquet takes a path or a binary file object. Got {type(file).__name__}.")
    if isinstance(file, io.TextIOBase):
        raise InvalidArgumentError("to_parquet writes bytes: open the file in binary mode ('wb'), not text.")
    if getattr(file, "closed", False):
        raise InvalidArgumentError("to_parquet was given a closed file.")
    writable = getattr(file, "writable", None)
    if callable(writable) and not writable():
        raise InvalidArgumentError("to_parquet was given a file not open for writing: open it with 'wb'.")


# -- Hugging Face ----------------------------------------------------------------------------------------


def to_hf(data: Dataset | DatasetView, tensors: str | Sequence[str] | None = None) -> Any:
    """The rows as a ``datasets.Dataset`` with typed features (see ``Dataset.to_hf``)."""
    datasets = require("datasets", "to_hf()")
    InMemoryTable = require("datasets.table", "to_hf()").InMemoryTable
    rows = TableRows(data, tensors)
    table = (
        pyarrow()
        .RecordBatchReader.from_batches(
            export_schema(rows.layouts),
            _record_batches(rows, export_schema(rows.layouts), BATCH_ROWS, BATCH_BYTES),
        )
        .read_all()
    )
    features = datasets.Features.from_arrow_schema(table.schema)
    # The content's identity: the dataset's id, version and digest (copies of a folder whose histories
    # diverged hold other content under one id and version), the rows in their order and the tensors (so
    # that an eval over the result is recognised when it runs again, as for any datasets.Dataset).
    key = json.dumps(
        [
            rows.base.id,
            rows.base.version,
            rows.base.digest,
            _rows_key(rows.positions),
            [lay.name for lay in rows.layouts],
            rows.objects.describe() if rows.objects is not None else None,
        ]
    )
    fingerprint = hashlib.sha256(key.encode()).hexdigest()[:32]
    info = datasets.DatasetInfo(features=features)
    return datasets.Dataset(InMemoryTable(table), info=info, fingerprint=fingerprint)


def _rows_key(positions: range | np.ndarray) -> str:
    if isinstance(positions, range):
        return f"range({positions.start}, {positions.stop}, {positions.step})"
    return hashlib.sha256(np.ascontiguousarray(positions, dtype=np.int64).tobytes()).hexdigest()
