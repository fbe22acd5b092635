"""Tables into datasets: ``lc.from_arrow``, ``lc.from_pandas``, ``lc.from_parquet`` and ``lc.from_csv``.

Each makes a tensor per column (`lakecompute.ingest._table_plan`) and fills them with an eval of
`table_row` over the table as ``data_in`` (`lakecompute.tables.TableInput`): a Parquet file is read by
row group where the rows are filled, images are checked there (their files' structure, or with
``verify=True`` decoded once), and a row that breaks a rule fails naming its column, its row and the
rule, or with ``skip_errors=True`` is skipped and listed. A table written by ``ds.to_arrow()`` (or
``to_parquet``, ``to_pandas``) comes back as the dataset it was, exactly.
"""

from __future__ import annotations

import codecs
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from lakecompute.compute import compute
from lakecompute.errors import InvalidArgumentError, InvalidSampleError, LakeComputeWarning, TransformError
from lakecompute.ingest._files import PathLike, without_skip_advice
from lakecompute.ingest._options import IngestOptions
from lakecompute.ingest._plan import refuse_overlap
from lakecompute.ingest._run import Skipped, fill_dataset
from lakecompute.ingest._table_plan import ColumnPlan, plan_columns
from lakecompute.parsing import parse_flag
from lakecompute.tables import ArrowInput, FrameInput, TableInput, pyarrow, read_parquet

if TYPE_CHECKING:
    from typing import Unpack

    from lakecompute.datasets import Dataset
    from lakecompute.ingest._options import IngestKwargs

__all__ = ["from_arrow", "from_csv", "from_pandas", "from_parquet", "table_row"]

HTypes = Mapping[str, str | Mapping[str, Any]] | None
Compression = Literal["auto", "png", "jpeg", "webp"] | None


def table_row(sample_in: dict[str, Any], sample_out: Any, columns: tuple[ColumnPlan, ...]) -> None:
    """The compute function of the table ingests: one row in, a sample per column out (every cell is
    turned into its sample before any is written, so a bad cell leaves nothing of its row)."""
    samples = []
    for plan in columns:
        try:
            samples.append(plan.sample(sample_in[plan.column]))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"Column {plan.column!r}: {exc}") from exc
    for plan, sample in zip(columns, samples, strict=True):
        sample_out[plan.column].append(sample)


def _failed(src: str) -> Any:
    def failed(err: TransformError) -> Exception:
        cause = err.__cause__ or err
        row = f"row {err.index}" if err.index is not None else "a row"
        if isinstance(cause, InvalidSampleError):
            detail = without_skip_advice(cause.detail)
            why = f"Column {cause.tensor!r}, {row}: {detail}"
        else:
            text = str(cause)
            match = re.match(r"Column ('[^']*'): (.*)", text, re.S)
            why = f"Column {match.group(1)}, {row}: {match.group(2)}" if match else f"{row}: {text}"
        return InvalidArgumentError(
            f"{why.rstrip('.')}. Fix the row in {src!r}, or pass skip_errors=True to skip such rows."
        )

    return failed


def _setup(plans: Sequence[ColumnPlan]) -> Any:
    def setup(ds: Dataset) -> None:
        for plan in plans:
            try:
                ds.create_tensor(plan.column, **plan.create)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"Column {plan.column!r} cannot become a tensor: {exc}") from exc

    return setup


def _ingest_table(
    table: TableInput,
    dest: PathLike,
    src: str,
    htypes: HTypes,
    images_folder: PathLike | None,
    options: IngestOptions,
    verify: bool,
) -> Dataset:
    """Plan the table's columns, create the dataset and fill it (what every table ingest shares)."""
    verify = parse_flag("verify", verify)
    for path in getattr(table, "paths", None) or ([src] if os.path.isfile(src) else []):
        refuse_overlap(path, dest, "input file")  # overwrite=True there would delete the input
    if images_folder is not None and _holds(dest, os.fspath(images_folder)):
        refuse_overlap(os.fspath(images_folder), dest, "images folder")
    if options.num_workers is None and not verify:
        # Unverified, a row's check runs at memory speed: workers would cost more than they save (their
        # start, and every row's bytes sent to them and back), as HF datasets' map runs in one process.
        options = replace(options, num_workers=0)
    plans = plan_columns(table, htypes, options.image_compression, images_folder, verify)
    table.strict = False  # a bad cell reaches table_row, which fails (or skips) its row by it
    table.check_images = True  # images are checked as the rows are read, ahead of table_row
    table.verify_images = verify  # decoded once, or (verify=False) their files' structure only
    if not plans:
        raise InvalidArgumentError(f"The table {src!r} has no columns to ingest.")
    function = compute(table_row)(columns=plans)
    skipped = Skipped("rows", lambda i: f"row {i}", src, inputs="the table")
    return fill_dataset(dest, _setup(plans), function, table, skipped, _failed(src), options)


def _holds(dest: PathLike, folder: str) -> bool:
    """Whether the local destination is ``folder`` or a folder above it (a dataset inside the images
    folder is fine; one that would replace it is not)."""
    text = os.fspath(dest)
    if "://" in text and not text.startswith("file://"):
        return False
    d, f = os.path.realpath(text.removeprefix("file://")), os.path.realpath(folder)
    return f == d or f.startswith(d.rstrip(os.sep) + os.sep)


def from_arrow(
    table: Any,
    dest: PathLike,
    *,
    columns: Sequence[str] | None = None,
    htypes: HTypes = None,
    images_folder: PathLike | None = None,
    image_compression: Compression = "auto",
    verify: bool = False,
    progressbar: bool = True,
    **options: Unpack[IngestKwargs],
) -> Dataset:
    """Make a dataset of an Arrow table: a tensor per column, a sample per row.

    A table made by ``ds.to_arrow()`` gives back that dataset exactly (tensors, dtypes, shapes, class
    names, box layouts, info; images as the same bytes). Other tables are read by their Hugging Face
    features (``Image`` becomes an image tensor, ``ClassLabel`` a class_label one with its names) and
    their types: numbers and lists of numbers become generic tensors, strings text, a ``{bytes, path}``
    struct images, anything else json. ``htypes`` says what a column is instead.

    Args:
        table: a ``pyarrow.Table`` (or ``RecordBatch``).
        dest: where to create the dataset (a path, ``mem://name`` or ``s3://...``).
        columns: the columns to ingest, in order (all by default).
        htypes: per column, an htype (``{"path": "image", "label": "class_label"}``) or a dict of
            ``create_tensor`` arguments (``{"boxes": {"htype": "bbox", "format": "xywh"}}``). A string
            column said to be ``image`` holds file paths (inside ``images_folder``); one said to be
            ``class_label`` holds class names (the sorted distinct names become ``class_names``).
        images_folder: the folder image paths are read from; a path that leaves it (``..``, an
            absolute path, a symbolic link out) is refused.
        image_compression: how images without a recorded compression are stored: ``"auto"`` (the
            files' own format, stored as their bytes), ``"png"``, ``"jpeg"``, ``"webp"`` or None.
        verify: how each image kept as its bytes is checked. False (the default, as Deep Lake 3's
            ``deeplake.read(verify=False)``): by its file's structure, without decoding its pixels: the
            header (format, size, an 8-bit mode) and the file whole (a PNG's chunk CRCs and IEND, a
            JPEG's markers up to its scan and its EOI, a WebP's RIFF sizes), at memory speed, so a
            truncated or damaged file is refused; a file whole in structure whose compressed pixels do
            not decode is stored, and raises DatasetCorruptError when read. True: every image is
            decoded once (as the folder ingests check their files), several times slower, and such
            a file is refused too.
        progressbar: show a progress bar.
        **options: the options every ingest takes (`lakecompute.ingest.IngestKwargs`): ``num_workers``
            (by default none with ``verify=False``: the checks run at memory speed and worker processes
            would only add their start and the rows' trip to them; one per CPU, at most 8, with
            ``verify=True`` from 100 rows), ``skip_errors`` (skip and list rows that break a rule),
            ``overwrite``, ...

    Raises:
        InvalidArgumentError: a column that cannot become the tensor asked for, or a row that breaks its
            column's rule (naming the column, the row and the rule); nothing is left at ``dest``.
        DatasetExistsError: a dataset is at ``dest`` and ``overwrite`` is False.

    Example:
        >>> import pyarrow as pa
        >>> t = pa.table({"x": [1, 2, 3], "name": ["a", "b", "c"]})
        >>> ds = lc.from_arrow(t, "mem://from-arrow-doc", progressbar=False, overwrite=True)
        >>> ds.x.numpy().tolist(), ds.name[2].text()
        ([1, 2, 3], 'c')
    """
    parsed = IngestOptions.parse("from_arrow", options, image_compression, progressbar)
    pa = pyarrow()
    if not isinstance(table, (pa.Table, pa.RecordBatch)):
        raise InvalidArgumentError(f"from_arrow takes a pyarrow.Table. Got {type(table).__name__}.")
    return _ingest_table(
        ArrowInput(table, columns), dest, "the Arrow table", htypes, images_folder, parsed, verify
    )


def from_pandas(
    frame: Any,
    dest: PathLike,
    *,
    columns: Sequence[str] | None = None,
    htypes: HTypes = None,
    images_folder: PathLike | None = None,
    image_compression: Compression = "auto",
    verify: bool = False,
    progressbar: bool = True,
    **options: Unpack[IngestKwargs],
) -> Dataset:
    """Make a dataset of a pandas DataFrame: a tensor per column, a sample per row (the index is left
    out). A frame made by ``ds.to_pandas()`` gives back that dataset exactly; in another, numeric columns
    become generic tensors, strings text, categories class_label tensors (the categories are the class
    names), cells of arrays generic tensors, ``{bytes, path}`` dicts images. Takes the arguments of
    `from_arrow`.

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"x": [0.5, 1.5], "kind": pd.Categorical(["cat", "dog"])})
        >>> ds = lc.from_pandas(df, "mem://from-pandas-doc", progressbar=False, overwrite=True)
        >>> ds.kind.info.class_names, ds.kind.numpy().tolist()
        (['cat', 'dog'], [0, 1])
    """
    parsed = IngestOptions.parse("from_pandas", options, image_compression, progressbar)
    if not (type(frame).__module__.startswith("pandas") and type(frame).__name__ == "DataFrame"):
        raise InvalidArgumentError(f"from_pandas takes a pandas.DataFrame. Got {type(frame).__name__}.")
    return _ingest_table(
        FrameInput(frame, columns), dest, "the DataFrame", htypes, images_folder, parsed, verify
    )


def from_parquet(
    path_or_paths: PathLike | Sequence[PathLike],
    dest: PathLike,
    *,
    columns: Sequence[str] | None = None,
    htypes: HTypes = None,
    images_folder: PathLike | None = None,
    image_compression: Compression = "auto",
    verify: bool = False,
    progressbar: bool = True,
    **options: Unpack[IngestKwargs],
) -> Dataset:
    """Make a dataset of a Parquet file (or a folder of them, or files of one schema: as `read_parquet`),
    read by row group in the workers. A file written by ``ds.to_parquet()`` gives back that dataset
    exactly, and one written by Hugging Face ``datasets`` is read by its features. Image paths are read
    inside ``images_folder`` (by default the folder given, else the first file's folder). Takes the
    arguments of `from_arrow`.

    Raises:
        DatasetCorruptError: a file that is not Parquet, is truncated, or whose footer does not fit it.
        InvalidArgumentError: as `from_arrow`.
    """
    parsed = IngestOptions.parse("from_parquet", options, image_compression, progressbar)
    table = read_parquet(path_or_paths, columns)
    first = table.paths[0]
    given = os.fspath(path_or_paths) if isinstance(path_or_paths, (str, os.PathLike)) else first
    default = given if os.path.isdir(given) else os.path.dirname(os.path.abspath(first))
    folder = images_folder if images_folder is not None else default
    return _ingest_table(table, dest, first, htypes, folder, parsed, verify)


def from_csv(
    path: PathLike,
    dest: PathLike,
    *,
    columns: Sequence[str] | None = None,
    htypes: HTypes = None,
    images_folder: PathLike | None = None,
    image_compression: Compression = "auto",
    verify: bool = False,
    delimiter: str = ",",
    encoding: str = "utf-8",
    progressbar: bool = True,
    **options: Unpack[IngestKwargs],
) -> Dataset:
    """Make a dataset of a CSV file with a header row: numbers become generic tensors, other text text
    tensors, unless ``htypes`` says otherwise (a column of image paths, read inside ``images_folder``,
    the CSV's own folder by default; a column of class names). The file is read as ``encoding`` text
    (any codec Python knows, e.g. ``"latin-1"``; a UTF-8 byte-order mark is skipped). Takes the arguments
    of `from_arrow`.

    Raises:
        InvalidArgumentError: a row with more or fewer fields than the header (naming the line), an
            unknown ``encoding`` or text that is not in it (naming the column), or as `from_arrow`.

    Example:
        >>> with open("labels.csv", "w") as f:
        ...     _ = f.write("file,label\\na.png,cat\\n")
        >>> htypes = {"file": "image", "label": "class_label"}
        >>> lc.from_csv("labels.csv", "./x", htypes=htypes)  # doctest: +SKIP
    """
    parsed = IngestOptions.parse("from_csv", options, image_compression, progressbar)
    src = os.fspath(path)
    table = _read_csv(src, delimiter, encoding, parsed.skip_errors)
    folder = images_folder if images_folder is not None else os.path.dirname(os.path.abspath(src))
    return _ingest_table(ArrowInput(table, columns), dest, src, htypes, folder, parsed, verify)


def _read_csv(path: str, delimiter: str, encoding: str, skip_errors: bool) -> Any:
    """The CSV file as an Arrow table (every column's type inferred by pyarrow); rows with more or fewer
    fields than the header are refused, naming their line, or with ``skip_errors`` left out and listed.

    Raises:
        InvalidArgumentError: no such file, a ragged row, text that is not CSV (naming the line), an
            unknown encoding, or a column whose bytes are not text in it.
    """
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        raise InvalidArgumentError(f"delimiter must be one character. Got {delimiter!r}.")
    try:
        codec = codecs.lookup(encoding).name if isinstance(encoding, str) else None
    except LookupError:
        codec = None
    if codec is None:
        raise InvalidArgumentError(f"encoding must name a text encoding, e.g. 'utf-8'. Got {encoding!r}.")
    if not os.path.isfile(path):
        raise InvalidArgumentError(f"No CSV file at {path!r}.")
    ragged: list[Any] = []
    table = _parse_csv(path, delimiter, codec, ragged, threads=True)
    if ragged and any(r.number is None for r in ragged):
        ragged.clear()  # parsed in parallel, rows have no numbers: again, in one thread, to name them
        table = _parse_csv(path, delimiter, codec, ragged, threads=False)
    _check_text(path, table, codec)
    lines = [
        f"line {r.number}: {r.actual_columns} fields, the header has {r.expected_columns}" for r in ragged
    ]
    if lines and not skip_errors:
        raise InvalidArgumentError(
            f"Cannot read the CSV file {path!r}: {lines[0]} ({ragged[0].text[:120]!r}). Every row needs as "
            "many fields as the header; fix the row, or pass skip_errors=True to skip such rows."
        )
    if lines:
        shown = "\n  ".join(lines[:20]) + (f"\n  ... and {len(lines) - 20} more" if len(lines) > 20 else "")
        warnings.warn(
            f"Skipped {len(lines)} rows of {path!r} (skip_errors=True):\n  {shown}",
            LakeComputeWarning,
            stacklevel=3,
        )
    return table


def _check_text(path: str, table: Any, codec: str) -> None:
    """Refuse a column that pyarrow left as bytes: text that does not decode as ``codec``."""
    pa = pyarrow()
    for field in table.schema:
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):
            raise InvalidArgumentError(
                f"Column {field.name!r} of the CSV file {path!r} holds bytes that are not {codec} text. "
                "Pass the file's encoding (encoding='latin-1', say), or convert the file to UTF-8."
            )


def _parse_csv(path: str, delimiter: str, codec: str, ragged: list[Any], threads: bool) -> Any:
    pa = pyarrow()

    def invalid(row: Any) -> str:
        ragged.append(row)
        return "skip"

    options = pa.csv.ParseOptions(delimiter=delimiter, invalid_row_handler=invalid)
    try:
        return pa.csv.read_csv(
            path, parse_options=options, read_options=pa.csv.ReadOptions(use_threads=threads, encoding=codec)
        )
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise InvalidArgumentError(f"Cannot read the CSV file {path!r}: {reason}.") from exc
