"""The handle's table verbs: ``to_arrow``, ``to_arrow_reader``, ``to_pandas``, ``to_parquet``, ``to_hf``.

Each hands over to `lakecompute.tables` (imported inside the method, when it is called: the dataset
layer never loads it, nor pyarrow or pandas); datasets and views share them through `_Samples`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, Final

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset
    from lakecompute.datasets._views import DatasetView

__all__ = ["TableVerbs"]

_ROWS: Final = 4096  # lakecompute.tables.BATCH_ROWS, said here too so that the signature shows it
_BYTES: Final = 32 << 20  # lakecompute.tables.BATCH_BYTES
_READER_BYTES: Final = 16 << 20  # lakecompute.tables.READER_BYTES


class TableVerbs:
    """The exports of a dataset or view as a table (the rows in the view's order, every tensor a column,
    each htype by its declared Arrow mapping; see docs/tables.md)."""

    def _table_data(self) -> Dataset | DatasetView:
        return self  # type: ignore[return-value]  # mixed into Dataset and DatasetView only

    def to_arrow(self, tensors: str | Sequence[str] | None = None) -> Any:
        """The rows as a ``pyarrow.Table``: a column per tensor, typed by its htype (images as Hugging
        Face's ``{bytes, path}`` struct of their stored bytes, class labels as int64 with their names in
        the schema, arrays as nested lists); ``lc.from_arrow`` of it makes this dataset again, exactly.

        Args:
            tensors: the tensors to export (a name or names); None for all.

        Raises:
            InvalidArgumentError: pyarrow is not installed, uncommitted changes, or tensors of different
                lengths (export a view of the rows they share).
            TensorDoesNotExistError: an unknown name in ``tensors``.

        Example:
            >>> ds = lc.from_numpy("mem://to-arrow-doc", {"x": [3, 8, 1]}, overwrite=True)
            >>> ds[[2, 0]].to_arrow().column("x").to_pylist()
            [1, 3]
        """
        from lakecompute.datasets._upward import to_arrow

        return to_arrow(self._table_data(), tensors)

    def to_arrow_reader(
        self,
        batch_size: int = _ROWS,
        tensors: str | Sequence[str] | None = None,
        *,
        max_bytes: int = _READER_BYTES,
    ) -> Any:
        """The rows as a ``pyarrow.RecordBatchReader`` that reads them as it is consumed, in batches of at
        most ``batch_size`` rows and about ``max_bytes`` bytes of samples (what DuckDB, Polars and
        ``pyarrow.dataset`` take as a stream). Memory stays about four batches and the 32 MiB chunk cache,
        whatever the dataset's size.

        Raises:
            InvalidArgumentError: as `to_arrow`, or a ``batch_size`` or ``max_bytes`` below 1.
        """
        from lakecompute.datasets._upward import to_arrow_reader

        return to_arrow_reader(self._table_data(), batch_size, tensors, max_bytes)

    def to_pandas(
        self, tensors: str | Sequence[str] | None = None, *, batched: bool = False, batch_size: int = _ROWS
    ) -> Any:
        """The rows as a ``pandas.DataFrame`` (or, ``batched``, an iterator of frames of ``batch_size``
        rows): a typed column for a tensor of scalars, else a cell per row holding what the dataset reads
        (an array of its dtype and shape, a str, a json value), images as ``{"bytes": ..., "path": None}``
        of their stored bytes. ``frame.attrs["lakecompute"]`` keeps each tensor's description, so that
        ``lc.from_pandas`` makes the same tensors again.

        Raises:
            InvalidArgumentError: pandas is not installed, as `to_arrow`, or a ``batch_size`` below 1.
        """
        from lakecompute.datasets._upward import to_pandas

        return to_pandas(self._table_data(), tensors, batched, batch_size)

    def to_parquet(
        self,
        path_or_file: str | os.PathLike[str] | BinaryIO,
        tensors: str | Sequence[str] | None = None,
        *,
        row_group_size: int = _ROWS,
        row_group_bytes: int = _BYTES,
        progressbar: bool = True,
    ) -> None:
        """Write the rows as a Parquet file: the schema of `to_arrow` (so that Hugging Face
        ``datasets.Dataset.from_parquet`` reads typed features, and pandas, DuckDB, Polars and Ray Data
        read it as it is), a row group per ``row_group_size`` rows or ``row_group_bytes`` bytes, streamed:
        memory stays about three row groups and the 32 MiB chunk cache, whatever the dataset's size. A
        progress bar counts the rows written (``progressbar=False``: none).

        A path is written atomically: into a temporary file beside it, renamed into place at the end, so
        that a failure or a kill leaves the previous file (or none), never part of one. A binary file
        object is written as it is given.

        Raises:
            InvalidArgumentError: as `to_arrow`, a remote path (``s3://``), or a ``row_group_size`` or
                ``row_group_bytes`` below 1 (nothing is written).
            StorageError: the file cannot be written (a full disk, no permission); it keeps what it held.
        """
        from lakecompute.datasets._upward import to_parquet

        to_parquet(self._table_data(), path_or_file, tensors, row_group_size, row_group_bytes, progressbar)

    def to_hf(self, tensors: str | Sequence[str] | None = None) -> Any:
        """The rows as a Hugging Face ``datasets.Dataset`` (in memory) with typed features: ``Image()``
        of the stored bytes, ``ClassLabel(names=...)``, ``Sequence`` and ``Value``. For a dataset larger
        than memory, write `to_parquet` and open it with ``datasets.Dataset.from_parquet``.

        Raises:
            InvalidArgumentError: Hugging Face ``datasets`` is not installed, or as `to_arrow`.
        """
        from lakecompute.datasets._upward import to_hf

        return to_hf(self._table_data(), tensors)
