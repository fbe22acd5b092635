"""Tables: a dataset as Arrow, pandas, Parquet and Hugging Face ``datasets``, and tables as input.

Every htype declares how its samples are a column (`lakecompute.specs.ArrowMapping`); this package is
the one place that converts by it, both ways, so that ``lc.from_arrow(ds.to_arrow())`` is ``ds``
exactly. The modules, by role: ``_layout`` (a tensor as a column: its Arrow type, field metadata and
Hugging Face feature), ``_encode`` (samples to Arrow arrays), ``_cells`` (Arrow arrays back to
samples), ``_schema`` (what a column of a table from outside is), ``_rows`` and ``_export`` (the
exports), ``_inputs`` (tables as an eval's ``data_in``, read by row group, recorded by content).

pyarrow and pandas are imported when a table is first used: ``import lakecompute`` never loads them.
"""

from lakecompute.tables._arrow import pandas, pyarrow
from lakecompute.tables._cells import COLUMN_CELLS, Bad, CellReader, read_cells
from lakecompute.tables._encode import ENCODERS
from lakecompute.tables._export import (
    BATCH_BYTES,
    BATCH_ROWS,
    READER_BYTES,
    parquet_options,
    to_arrow,
    to_arrow_reader,
    to_hf,
    to_pandas,
    to_parquet,
)
from lakecompute.tables._images import ImageBytes, image_format
from lakecompute.tables._inputs import (
    ArrowInput,
    FrameInput,
    ParquetInput,
    TableInput,
    read_parquet,
    table_input,
)
from lakecompute.tables._layout import ColumnLayout
from lakecompute.tables._schema import schema_readers

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "COLUMN_CELLS",
    "ENCODERS",
    "READER_BYTES",
    "ArrowInput",
    "Bad",
    "CellReader",
    "ColumnLayout",
    "FrameInput",
    "ImageBytes",
    "ParquetInput",
    "TableInput",
    "image_format",
    "pandas",
    "parquet_options",
    "pyarrow",
    "read_cells",
    "read_parquet",
    "schema_readers",
    "table_input",
    "to_arrow",
    "to_arrow_reader",
    "to_hf",
    "to_pandas",
    "to_parquet",
]
