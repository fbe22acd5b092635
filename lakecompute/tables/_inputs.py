"""Tables as an eval's ``data_in``: a Parquet file read by row group in the workers (`read_parquet`), an
Arrow table, a pandas DataFrame. Each is a `TableInput`: a known length, rows read by range as dicts
of column name to value, and an identity that is a digest of its content (the file's bytes, the
table's buffers, the frame's values), never its path or modification time.

The parent reads a Parquet file's footer only (checked against the file's size before anything is
allocated); each worker opens the file itself and reads the row groups its rows lie in, after checking
that the file is still the one the parent saw.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError, InvalidTypeError
from lakecompute.localfiles import Folder
from lakecompute.tables._arrow import DIGEST, content_hasher, damaged_file, pyarrow, reading_file
from lakecompute.tables._cells import Bad, CellReader, read_cells
from lakecompute.tables._frames import frame_cells, frame_readers
from lakecompute.tables._images import ImageBytes
from lakecompute.tables._schema import schema_readers
from lakecompute.tables._thrift import ChunkFacts, read_footer

__all__ = [
    "ArrowInput",
    "FrameInput",
    "ParquetInput",
    "TableInput",
    "parquet_files",
    "read_parquet",
    "table_input",
]

_BLOCK: Final = 1 << 20  # bytes hashed at a time


class TableInput:
    """A table as ``data_in``: ``len()`` rows, read by range as dicts of column -> value.

    Attributes:
        readers: how each column's cells are read (`CellReader`), in column order.
    """

    readers: dict[str, CellReader]
    strict: bool = True
    """Whether `read_rows` raises at a cell that breaks its column's rule (an eval's ``data_in``), or
    hands it over as a `Bad` (the table ingests, which skip or refuse the row by it)."""
    check_images: bool = False
    """Whether `read_rows` checks every encoded image once (`ImageBytes.check`), in the thread that
    reads the rows: an ingest's images are checked there, beside the eval's function and writer (Pillow
    decodes without the GIL), and one that fails its check is a `Bad` of its row."""
    verify_images: bool = True
    """How `check_images` checks them: decoded once (True), or their files' structure only
    (`ImageBytes.verify`; the table ingests' ``verify=False``)."""

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def columns(self) -> list[str]:
        """The columns each row holds, in order."""
        return list(self.readers)

    def column_cells(self, start: int, stop: int) -> dict[str, list[Any]]:
        """Rows ``start..stop``, column by column: a value (or `Bad`) per row."""
        raise NotImplementedError

    def read_rows(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Rows ``start..stop`` as dicts of column -> value.

        Raises:
            InvalidArgumentError: with `strict`, a cell that breaks its column's rule (naming the column,
                the row and the rule); without, such a cell is a `Bad` in its row.
        """
        cells = self.column_cells(start, stop)
        if self.check_images:
            for values in cells.values():
                _check_images(values, self.verify_images)
        names = list(cells)
        rows = [dict(zip(names, values, strict=True)) for values in zip(*cells.values(), strict=True)]
        if not names:
            rows = [{} for _ in range(start, stop)]
        if self.strict:
            for i, row in enumerate(rows):
                for name, value in row.items():
                    if isinstance(value, Bad):
                        raise InvalidArgumentError(f"Column {name!r}, row {start + i}: {value.reason}.")
        return rows

    def column_values(self, name: str, stop: int | None = None) -> list[Any]:
        """The cells of column ``name`` alone, of rows ``0..stop`` (all rows by default): what a plan
        reads in the caller (paths, label names), without reading the other columns."""
        saved = self.readers
        self.readers = {name: saved[name]}
        try:
            return self.column_cells(0, min(len(self), len(self) if stop is None else stop))[name]
        finally:
            self.readers = saved

    def first_cell(self, name: str) -> Any:
        """The first row's cell of column ``name`` (None for a table without rows)."""
        cells = self.column_values(name, 1)
        return cells[0] if cells else None

    def identity(self) -> dict[str, Any]:
        """What an eval records of this input: a digest of its content and the columns read."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What an eval record keeps of the input (small JSON)."""
        raise NotImplementedError


def _check_images(values: list[Any], verify: bool) -> None:
    """Check each encoded image of ``values`` once (decoded, or with ``verify`` False its structure);
    one that fails becomes a `Bad`."""
    for i, value in enumerate(values):
        if isinstance(value, ImageBytes):
            value.verify = verify
            try:
                value.check()
            except InvalidSampleError as exc:
                values[i] = Bad(exc.detail)


# -- Parquet ------------------------------------------------------------------------------------------------


def _digest_file(path: str) -> str:
    h = content_hasher()
    with reading_file(path), open(path, "rb") as f:
        while chunk := f.read(_BLOCK):
            h.update(chunk)
    return str(h.hexdigest())


def _check_footer(path: str, meta: Any, size: int) -> list[int]:
    """The row counts of the file's row groups, after checking that what its footer claims is there:
    every column chunk inside the file, row counts that add up and that the chunks' values can hold.
    The facts come from the footer's bytes (`lakecompute.tables._thrift`), not from pyarrow's column
    chunk metadata, which ends the process on some footers instead of raising.

    Raises:
        DatasetCorruptError: the footer claims what the file does not have.
    """
    with reading_file(path):
        length, groups = read_footer(path, size)
    data_end = size - 8 - length  # the footer and its length and magic follow the data
    if len(groups) != meta.num_row_groups:
        raise _footer(path, f"{len(groups)} row groups, pyarrow reads {meta.num_row_groups}")
    columns = [meta.schema.column(c) for c in range(meta.num_columns)]
    counts = []
    for g, group in enumerate(groups):
        rows = group.num_rows
        if not isinstance(rows, int) or rows < 0:
            raise _footer(path, f"row group {g} claims {rows} rows")
        if len(group.chunks) != len(columns):
            raise _footer(
                path, f"row group {g} has {len(group.chunks)} column chunks for {len(columns)} columns"
            )
        for c, (chunk, column) in enumerate(zip(group.chunks, columns, strict=True)):
            _check_chunk(path, f"row group {g}, column {c}", chunk, column, rows, data_end)
        counts.append(rows)
    if sum(counts) != meta.num_rows:
        raise _footer(path, f"the row groups hold {sum(counts)} rows, the footer claims {meta.num_rows}")
    return counts


def _check_chunk(path: str, where: str, chunk: ChunkFacts, column: Any, rows: int, data_end: int) -> None:
    """One column chunk's claims: its bytes inside the file's data, counts that are counts, level
    histograms as long as the column's levels (parquet-cpp's own rule), no encryption."""
    if chunk.encrypted:
        raise _footer(path, f"{where} is encrypted, which read_parquet does not read")
    if chunk.elsewhere:
        raise _footer(path, f"{where} names another file to read its bytes from")
    numbers = (chunk.num_values, chunk.compressed_size, chunk.data_page_offset)
    if not all(isinstance(n, int) for n in numbers) or not isinstance(
        chunk.dictionary_page_offset, int | None
    ):
        raise _footer(path, f"{where} lacks its sizes or offsets")
    offsets = [o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o is not None]
    if chunk.num_values == 0:  # an empty chunk: pyarrow writes 0 for the data page it does not have
        offsets = [o for o in offsets if o != 0]
    start = min(offsets, default=4)
    end = start + chunk.compressed_size
    if start < 4 or end > data_end or chunk.compressed_size < 0 or chunk.num_values < 0:
        raise _footer(path, f"{where} claims bytes {start}..{end} of {data_end}")
    if rows > 0 and chunk.num_values == 0 and chunk.compressed_size == 0:
        raise _footer(path, f"{where}: the row group claims {rows} rows, the column holds no values")
    levels = (column.max_repetition_level + 1, column.max_definition_level + 1)
    for kind, found, expected in zip(
        ("repetition", "definition"), chunk.histogram_sizes, levels, strict=True
    ):
        if found and found != expected:  # not set, or empty: none kept (as for a level that is always 0)
            raise _footer(
                path, f"{where} has a {kind} level histogram of {found} values for {expected} levels"
            )


def _other_schema(path: str, schema: Any, first: str, first_schema: Any) -> InvalidArgumentError:
    """The refusal of a file whose schema is not the first file's: other columns, or the same columns
    of other types (naming the first column that differs)."""
    why = f"other columns than {first!r}"
    if schema.names == first_schema.names:
        pairs = zip(schema, first_schema, strict=True)
        field, was = next(((f, g) for f, g in pairs if not f.equals(g)), (schema[0], first_schema[0]))
        why = (
            f"other column types than {first!r} (column {field.name!r}: {field.type}"
            f"{'' if field.nullable else ' not null'} there, {was.type}{'' if was.nullable else ' not null'} "
            "in the first)"
        )
    return InvalidArgumentError(f"Parquet file {path!r} has {why}; read_parquet reads files of one schema.")


def _footer(path: str, why: str) -> Exception:
    return damaged_file(path, ValueError(f"its footer does not fit the file: {why}"))


class ParquetInput(TableInput):
    """One or more Parquet files of one schema, read by row group (see `read_parquet`).

    Raises:
        InvalidArgumentError: no such file, files of different columns, an unknown column.
        DatasetCorruptError: a file that is not Parquet, truncated, or whose footer lies.
    """

    def __init__(self, paths: Sequence[str], columns: Sequence[str] | None = None) -> None:
        pa = pyarrow()
        self.paths = list(paths)
        starts, groups, self._sizes = [0], [], []
        schema = None
        for i, path in enumerate(self.paths):
            size = _size(path)
            with reading_file(path):
                meta = pa.parquet.read_metadata(path)
                file_schema = meta.schema.to_arrow_schema()
            counts = _check_footer(path, meta, size)
            self._sizes.append((size, meta.num_rows, meta.serialized_size))
            if schema is None:
                schema = file_schema
            elif not file_schema.equals(schema, check_metadata=False):
                raise _other_schema(path, file_schema, self.paths[0], schema)
            for g, n in enumerate(counts):
                groups.append((i, g))
                starts.append(starts[-1] + n)
        self._groups = groups
        self._starts = np.asarray(starts, dtype=np.int64)
        self.schema = schema
        self.readers = schema_readers(schema, columns) if schema is not None else {}
        self._state = _Open()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = None  # open files and the cached row group stay in this process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._state = _Open()

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _file(self, i: int) -> Any:
        """File ``i``, opened once per process and checked to be the file the caller read the footer of."""
        pa = pyarrow()
        opened = self._state.files.get(i)
        if opened is None:
            path = self.paths[i]
            with reading_file(path):
                opened = pa.parquet.ParquetFile(path)
                seen = (_size(path), opened.metadata.num_rows, opened.metadata.serialized_size)
            if seen != self._sizes[i]:
                raise InvalidArgumentError(
                    f"Parquet file {path!r} changed since it was opened as input ({self._sizes[i]} -> "
                    f"{seen}: size, rows, footer). Run again over the file as it is now."
                )
            self._state.files[i] = opened
        return opened

    def _group(self, k: int) -> Any:
        """Row group ``k`` (over all files), the columns read only; the last one read is kept."""
        key = (k, tuple(self.readers))
        cached = self._state.group
        if cached is not None and cached[0] == key:
            return cached[1]
        i, g = self._groups[k]
        path = self.paths[i]
        with reading_file(path):
            table = self._file(i).read_row_group(g, columns=self.columns)
        if table.num_rows != self._starts[k + 1] - self._starts[k]:
            raise damaged_file(path, ValueError(f"row group {g} holds {table.num_rows} rows, not as claimed"))
        self._state.group = (key, table)
        return table

    def column_cells(self, start: int, stop: int) -> dict[str, list[Any]]:
        with self._state.lock:
            out: dict[str, list[Any]] = {name: [] for name in self.readers}
            k = int(np.searchsorted(self._starts, start, side="right")) - 1
            at = start
            while at < stop:
                table = self._group(k)
                a = at - int(self._starts[k])
                b = min(stop, int(self._starts[k + 1])) - int(self._starts[k])
                part = table.slice(a, b - a)
                path = self.paths[self._groups[k][0]]
                for name, reader in self.readers.items():
                    with reading_file(path):
                        out[name].extend(read_cells(reader, part.column(name)))
                at += b - a
                k += 1
            return out

    def identity(self) -> dict[str, Any]:
        return {"kind": "parquet", DIGEST: [_digest_file(p) for p in self.paths], "columns": self.columns}

    def describe(self) -> dict[str, Any]:
        return {"kind": "parquet", "paths": self.paths, "rows": len(self)}


class _Open:
    """A process's open files and last row group of a `ParquetInput` (threads share it under the lock)."""

    def __init__(self) -> None:
        self.files: dict[int, Any] = {}
        self.group: tuple[tuple[int, tuple[str, ...]], Any] | None = None
        self.lock = threading.Lock()


def parquet_files(path: str) -> list[str]:
    """``path`` itself, or for a folder the Parquet files under it, as pandas, pyarrow and Ray Data read a
    folder: its files whose names end in ``.parquet``, at any depth, sorted by path, skipping names that
    start with ``.`` or ``_`` (Spark's ``_SUCCESS``, checksum files, hidden folders). The names of
    partition folders (``year=2024/``) do not become columns.

    Raises:
        InvalidArgumentError: a folder that holds no Parquet file, or one whose file (or folder) is a
            symbolic link that leads out of it.
    """
    if not os.path.isdir(path):
        return [path]
    folder = Folder.of(path)
    found = []
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in names:
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                rel = os.path.relpath(os.path.join(root, name), path)
                folder.confine(rel, what=f"Parquet file {rel!r} in the folder {path!r}")
                found.append(os.path.join(root, name))
    if not found:
        raise InvalidArgumentError(
            f"The folder {path!r} holds no Parquet file (a name ending in .parquet, not starting with "
            "'.' or '_'). Name the files, or the folder that holds them."
        )
    return sorted(found)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise InvalidArgumentError(f"Cannot open the Parquet file {path!r} ({exc.strerror or exc}).") from exc


def read_parquet(path_or_paths: Any, columns: Sequence[str] | None = None) -> ParquetInput:
    """A Parquet file (or several files of one schema) as the ``data_in`` of an eval, read lazily.

    Only the files' footers are read here (and checked against the files' sizes); each worker opens the
    files itself and reads the row groups its rows lie in. Each row reaches the function as a dict of
    column name -> value, read by the column's recorded layout, Hugging Face feature or type (numbers as
    numpy values, lists of numbers as arrays, images as `ImageBytes`). The eval records the input by a
    digest of the files' bytes, so the same eval again is a no-op, and a file rewritten since is new
    input, whatever its path, size and time say.

    Args:
        path_or_paths: a local Parquet file, a folder of them (`parquet_files`: Spark's, DuckDB's or
            Polars' output, say), or a list of either (their rows one after another).
        columns: the columns each row holds, in order (all by default).

    Returns:
        A `ParquetInput`: ``len()`` rows, picklable (it travels as its paths and footers' facts).

    Raises:
        InvalidArgumentError: no such file, a folder without Parquet files or with a link out of it,
            files of different columns, an unknown column.
        DatasetCorruptError: a file that is not Parquet, is truncated, or whose footer does not fit it.

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq
        >>> pq.write_table(pa.table({"x": [1, 2, 3]}), "three.parquet")
        >>> rows = lc.read_parquet("three.parquet")
        >>> len(rows), rows.read_rows(1, 3)
        (3, [{'x': np.int64(2)}, {'x': np.int64(3)}])
    """
    if isinstance(path_or_paths, (str, os.PathLike)):
        given = [os.fspath(path_or_paths)]
    elif isinstance(path_or_paths, Sequence) and all(
        isinstance(p, (str, os.PathLike)) for p in path_or_paths
    ):
        given = [os.fspath(p) for p in path_or_paths]
    else:
        raise InvalidTypeError(f"read_parquet takes a path or a list of paths. Got {path_or_paths!r:.80}.")
    paths = [file for path in given for file in parquet_files(path)]
    if not paths:
        raise InvalidArgumentError("read_parquet needs at least one file.")
    if isinstance(columns, str):
        columns = [columns]
    return ParquetInput(paths, columns)


# -- Arrow tables and DataFrames -----------------------------------------------------------------------------


def _hash_buffers(h: Any, array: Any) -> None:
    """Everything an Arrow array holds, into ``h``: its type, length, offset, every buffer (children
    included) and the dictionary of each dictionary-encoded part (``buffers()`` holds its indices only),
    so that equal digests mean equal content."""
    h.update(f"{array.type}|{len(array)}|{array.offset}|{array.null_count};".encode())
    for buf in array.buffers():
        h.update(b"-" if buf is None else memoryview(buf))
    for dictionary in _dictionaries(array):
        h.update(b"dictionary;")
        _hash_buffers(h, dictionary)


def _dictionaries(array: Any) -> list[Any]:
    """The dictionaries of ``array`` and of its children (a struct's fields, a list's values), in order."""
    pa = pyarrow()
    if isinstance(array, pa.DictionaryArray):
        return [array.dictionary]
    if isinstance(array, pa.ExtensionArray):
        children = [array.storage]
    elif pa.types.is_struct(array.type) or pa.types.is_union(array.type):
        children = [array.field(i) for i in range(array.type.num_fields)]
    else:
        children = [array.values] if hasattr(array, "values") else []
    return [d for child in children for d in _dictionaries(child)]


class ArrowInput(TableInput):
    """An Arrow table (or record batch) as ``data_in``."""

    def __init__(self, table: Any, columns: Sequence[str] | None = None) -> None:
        pa = pyarrow()
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self.readers = schema_readers(table.schema, columns)
        self.table = table.select(self.columns)
        self.schema = self.table.schema

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def column_cells(self, start: int, stop: int) -> dict[str, list[Any]]:
        part = self.table.slice(start, stop - start)
        return {name: read_cells(reader, part.column(name)) for name, reader in self.readers.items()}

    def identity(self) -> dict[str, Any]:
        h = content_hasher()
        h.update(memoryview(self.table.schema.serialize()))  # all of it: str() cuts its metadata short
        for column in self.table.columns:
            for chunk in column.chunks:
                _hash_buffers(h, chunk)
        return {"kind": "arrow", DIGEST: h.hexdigest(), "rows": len(self)}

    def describe(self) -> dict[str, Any]:
        return {"kind": "arrow", "rows": len(self), "columns": self.columns}


class FrameInput(TableInput):
    """A pandas DataFrame as ``data_in`` (its rows in order; the index is not part of a row)."""

    def __init__(self, frame: Any, columns: Sequence[str] | None = None) -> None:
        self.readers = frame_readers(frame, columns)
        self.frame = frame if columns is None else frame[self.columns]  # a selection copies: only if asked

    def __len__(self) -> int:
        return len(self.frame)

    def column_cells(self, start: int, stop: int) -> dict[str, list[Any]]:
        part = self.frame.iloc[start:stop]
        return {name: frame_cells(reader, part[name]) for name, reader in self.readers.items()}

    def identity(self) -> dict[str, Any]:
        from lakecompute.tables._frames import frame_digest

        return {"kind": "pandas", DIGEST: frame_digest(self.frame), "rows": len(self)}

    def describe(self) -> dict[str, Any]:
        return {"kind": "pandas", "rows": len(self), "columns": self.columns}


def table_input(data: Any, columns: Sequence[str] | None = None) -> TableInput | None:
    """The `TableInput` of an Arrow table, record batch or pandas DataFrame (None for anything else;
    checked by the type's module, so that neither library is imported to answer)."""
    module, name = type(data).__module__, type(data).__name__
    if module.startswith("pyarrow") and name in ("Table", "RecordBatch"):
        return ArrowInput(data, columns)
    if module.startswith("pandas") and name == "DataFrame":
        return FrameInput(data, columns)
    return None
