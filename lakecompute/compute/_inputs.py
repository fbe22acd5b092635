"""Adapters over everything ``eval`` accepts as ``data_in``.

A source is described in the parent and read in the workers: dataset input travels as a location,
a version and positions (never as data); sequences are inherited by forked workers or pickled once
per worker; only length-less iterables send their items with each task.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from lakecompute.compute._deferred import DeferredPart, LazyColumn, batch_part
from lakecompute.compute._fingerprint import fingerprint_value
from lakecompute.compute._samples import RowMeta, column_rows, row_class, tensor_meta
from lakecompute.compute._sizes import estimate_bytes
from lakecompute.datasets import (
    Dataset,
    DatasetView,
    base_dataset,
    core_of,
    open_columns,
    read_columns,
    snapshot,
)
from lakecompute.errors import FingerprintError, InvalidArgumentError, InvalidTypeError
from lakecompute.htypes import HostDecode, Staging, decoding_on
from lakecompute.storage import layout_verdicts
from lakecompute.tables import TableInput, table_input

__all__ = [
    "DatasetSource",
    "HuggingFaceSource",
    "IterableSource",
    "SequenceSource",
    "Source",
    "TableSource",
    "make_source",
]


class Source:
    """Base of the input adapters."""

    #: Number of samples, or None for a streamed iterable.
    length: int | None = None
    #: Threads that may read blocks of this source at once, ahead of the function (see
    #: ``_overlap.ReadAhead``): 0 when reading costs nothing (input already in memory).
    parallel_reads: int = 0

    def read_samples(self, start: int, stop: int, batch: bool) -> list[Any]:
        """Samples ``start..stop`` as ``sample_in`` objects (or one batch object if ``batch``)."""
        return list(self.read_block(start, stop, batch))

    def read_block(self, start: int, stop: int, batch: bool) -> Iterable[Any]:
        """As `read_samples`, but the ``sample_in`` objects may be made as they are taken (the input itself
        is read here, at once)."""
        raise NotImplementedError

    def read_batches(self, start: int, stop: int, size: int, staging: Staging | None = None) -> list[Any]:
        """Inputs ``start..stop`` as batch objects of ``size`` inputs (the last may be shorter); a batch's
        samples read as a list of arrays are stacked into what ``staging`` gives, where it gives one."""
        return [self.read_samples(b, min(b + size, stop), batch=True)[0] for b in range(start, stop, size)]

    def sample(self, index: int) -> Any:
        """The input sample at ``index``, as users see it (for errors)."""
        raise NotImplementedError

    def row_of(self, index: int) -> int | None:
        """The dataset row input ``index`` is read from (a view's position -> its dataset's row); None for
        input that is not a dataset."""
        return None

    def identity(self) -> dict[str, Any]:
        """What identifies this input for resuming (dataset id and version, or content).

        Raises:
            FingerprintError: the input has no identity (the eval cannot be recorded).
        """
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What an eval record keeps of the input (small JSON): its kind and what names it."""
        return {"kind": "unrecorded"}

    def prepare_workers(self) -> None:
        """In the caller, before workers in other processes start: decide here what each of them would
        otherwise decide again (nothing by default)."""

    def warm(self) -> None:
        """In a worker, while another runs the preflight: open the input ahead of the first task (nothing
        by default)."""

    def used_tensors(self) -> tuple[str, ...] | None:
        """The input tensors the functions read so far in this process (dataset input; None otherwise)."""
        return None

    def expect(self, names: Iterable[str]) -> None:
        """Read the input tensors ``names`` ahead with every block (dataset input; nothing otherwise)."""

    def read_with(self, device: str | None, host: HostDecode | None, cache_bytes: int) -> None:
        """Read as this process's budget says (dataset input; nothing otherwise): its JPEG images decoded
        on ``device``, its images decoded on the host through ``host`` (None: by the reading thread), its
        chunks cached up to ``cache_bytes``."""


class DatasetSource(Source):
    """Dataset or view input: workers open the same committed version and read their range.

    Args:
        data_in: the dataset or view (its pending changes must be committed: workers read a version).
        pad: pad shorter tensors to the longest (see `lakecompute.datasets.pad_value`).
        rows_of_data: read only the tensors that hold data, over the rows they share (an in-place eval:
            a tensor created empty for the eval to fill is not part of its input).
    """

    #: Reading decodes (zarr, images), which releases the GIL and is safe from many threads.
    parallel_reads = 1 << 10

    def __init__(self, data_in: Dataset | DatasetView, pad: bool, rows_of_data: bool = False) -> None:
        base = base_dataset(data_in)
        shown = data_in.keys() if isinstance(data_in, DatasetView) else list(base.tensors)
        lengths = {name: len(base.tensors[name]) for name in shown}  # a column view's tensors only
        if rows_of_data:
            lengths = {name: n for name, n in lengths.items() if n}
        if not pad and not isinstance(data_in, DatasetView):
            check_equal_lengths(base.path, lengths)
        full = max(lengths.values(), default=0) if pad else min(lengths.values(), default=0)
        positions = data_in.positions if isinstance(data_in, DatasetView) else range(full)
        #: What the workers read: the committed version, these tensors, these positions.
        self.snap = replace(snapshot(data_in), positions=positions, tensors=tuple(lengths))
        self.length = len(positions)
        self.pad = pad
        self._caller: Dataset | None = base  # the caller's own handle (see prepare_workers)
        self._ds: Dataset | None = None
        self._meta: RowMeta | None = None
        # The tensors the function has read (in this process, or in the preflight: see `expect`); None
        # until one is. Those are read ahead with each block; the others only when first used (`LazyColumn`).
        self._used: frozenset[str] | None = None
        # One handle per process: threads sharing this source (a warm-up beside the preflight) open it once.
        self._opening = threading.Lock()
        self._device: str | None = None  # where this process decodes JPEG images (decode_on_device)
        self._host: HostDecode | None = None  # how it decodes the others (a placed worker's helpers)
        self._cache_bytes: int | None = None  # the chunk cache of the handle it opens (None: the default)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ds"] = state["_caller"] = None  # reopened in each worker: open handles do not travel
        del state["_opening"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._opening = threading.Lock()

    def _first(self) -> int | None:
        """The position of the first input, or None for no input."""
        return int(self.snap.positions[0]) if self.length else None

    def prepare_workers(self) -> None:
        """Decide in the caller how the input's array layouts are read (a probe per layout, once per
        process: `lakecompute.storage.layout_verdicts`), on the caller's own handle, which keeps the
        arrays it opened for the next eval; the verdicts travel with the snapshot, so no worker probes
        a layout again (a forked worker inherits them, one started otherwise adopts them)."""
        first = self._first()
        if self._caller is not None and first is not None:
            open_columns(self._caller, self.snap.tensors, first)
        self.snap = replace(self.snap, verdicts=layout_verdicts())

    def warm(self) -> None:
        """Open the input's dataset and the arrays of its first input here, reading no chunk."""
        first = self._first()
        if first is not None:
            open_columns(self.dataset(), self.snap.tensors, first)
            self.meta()

    def dataset(self) -> Dataset:
        """The one handle this process reads through (its cache decodes each chunk once): tasks that
        start together on threads share it, never open one each."""
        if self._ds is None:
            with self._opening:
                if self._ds is None:
                    self._ds = self.snap.open(self._cache_bytes)
        return self._ds

    def meta(self) -> RowMeta:
        """The read tensors' names, htypes and infos, which ``sample_in`` values answer (read once)."""
        if self._meta is None:
            self._meta = tensor_meta(self.dataset(), self.snap.tensors)
        return self._meta

    def used_tensors(self) -> tuple[str, ...] | None:
        """The tensors the function read so far in this process (None: none yet)."""
        used = self._used
        return None if used is None else tuple(n for n in self.snap.tensors if n in used)

    def expect(self, names: Iterable[str]) -> None:
        """Read the tensors ``names`` ahead with every block (what the preflight's function read)."""
        self._used = frozenset(names) | (self._used or frozenset())

    def note_used(self, name: str) -> None:
        """Tensor ``name`` was read on first use: read it ahead with the blocks from now on."""
        if self._used is None or name not in self._used:
            self._used = (self._used or frozenset()) | {name}

    def read_with(self, device: str | None, host: HostDecode | None, cache_bytes: int) -> None:
        """Decode the JPEG images this process reads on ``device``, and the others through ``host``
        (`lakecompute.htypes.decoding_on`); cache up to ``cache_bytes`` of decoded chunks in the handle it
        reads through (its size when it is opened, or now)."""
        self._device, self._host = device, host
        if cache_bytes != self._cache_bytes:
            self._cache_bytes = cache_bytes
            if self._ds is not None:
                core_of(self._ds).cache.max_bytes = cache_bytes

    def read_column(self, name: str, start: int, stop: int) -> Any:
        """Tensor ``name`` of inputs ``start..stop`` (a ``filter_labels`` view's kept objects only), its
        images decoded where `read_with` says, on whichever thread reads it (a reader, or the function's
        when it first asks for a tensor not read ahead)."""
        snap, device, host = self.snap, self._device, self._host
        with decoding_on(device, host) if device or host else contextlib.nullcontext():  # else as outside
            (column,) = read_columns(self.dataset(), (name,), snap.positions[start:stop], self.pad).values()
        return column if snap.objects is None else snap.kept(name, range(start, stop), column)

    def stored_nbytes(self, name: str, start: int, stop: int) -> int:
        """About how many bytes tensor ``name`` of inputs ``start..stop`` holds decoded, from the samples'
        stored shapes (index rows: no sample is read)."""
        reader = core_of(self.dataset()).reader(name)
        itemsize = reader.dtype.itemsize if reader.dtype is not None else 1
        total = 0
        for p in self.snap.positions[start:stop]:
            total += int(np.prod(reader.shape_of(int(p)))) * itemsize if int(p) < reader.length else 0
        return total

    def _columns(self, start: int, stop: int) -> dict[str, Any]:
        """Inputs ``start..stop``, column by column: the tensors the function reads, and for the others a
        `LazyColumn`, read if the function asks for it (so an eval that relabels rows beside an image
        column never decodes an image)."""
        used = self._used or frozenset()
        read = [n for n in self.snap.tensors if n in used]
        columns = dict(zip(read, (self.read_column(n, start, stop) for n in read), strict=True))
        return {n: columns[n] if n in used else LazyColumn(self, n, start, stop) for n in self.snap.tensors}

    def read_block(self, start: int, stop: int, batch: bool) -> Iterable[Any]:
        columns = self._columns(start, stop)
        meta = self.meta()
        if batch:
            whole = {
                n: DeferredPart((c, 0, stop - start, None)) if isinstance(c, LazyColumn) else c
                for n, c in columns.items()
            }
            return [row_class(tuple(columns), meta)(whole, start, self.row_of(start))]
        # Made as they are taken, no dict per sample (and the tensors' meta shared: nothing per sample).
        return column_rows(columns, start, stop - start, meta, self._rows(start, stop))

    def read_batches(self, start: int, stop: int, size: int, staging: Staging | None = None) -> list[Any]:
        # The range is read at once (a few large reads), and each batch holds slices of it: views of the
        # stacked columns, no copies. A column read as a list (images) is stacked per batch here, on the
        # reader's thread, where its samples stack: not by the function's thread when it asks.
        columns = self._columns(start, stop)
        row = row_class(tuple(columns), self.meta())
        return [
            row(
                {name: batch_part(column, b - start, size, staging) for name, column in columns.items()},
                b,
                self.row_of(b),
            )
            for b in range(start, stop, size)
        ]

    def row_of(self, index: int) -> int:
        return int(self.snap.positions[index])

    def _rows(self, start: int, stop: int) -> Iterable[int]:
        """The dataset rows of inputs ``start..stop``, as Python ints."""
        rows = self.snap.positions[start:stop]
        return rows.tolist() if isinstance(rows, np.ndarray) else rows

    def sample(self, index: int) -> Any:
        (row,) = self.read_samples(index, index + 1, batch=False)
        return row

    def image_compressions(self) -> dict[str, str | None]:
        """The sample compression of each image tensor read, by name (None: stored as arrays)."""
        tensors = (self._caller or self.dataset()).tensors
        return {n: tensors[n].sample_compression for n in self.snap.tensors if tensors[n].htype == "image"}

    def identity(self) -> dict[str, Any]:
        pos = self.snap.positions
        where: Any = (
            [pos.start, pos.stop, pos.step] if isinstance(pos, range) else fingerprint_value(pos, "data_in")
        )
        # The dataset's id, not its path: a dataset made again at the same path reaches the same version
        # numbers with other content, and a copy of the folder elsewhere is the same data. The content
        # digest: a copy whose history diverged holds other content under the same id and version.
        return {
            "kind": "dataset",
            "id": self.snap.dataset_id,
            "version": self.snap.version,
            "digest": self.snap.digest,
            "positions": where,
            "pad": self.pad,
            "tensors": list(self.snap.tensors),
            **({"objects": digest} if (digest := self.snap.objects_digest()) else {}),
        }

    def describe(self) -> dict[str, Any]:
        snap = self.snap
        return {
            "kind": "dataset",
            "id": snap.dataset_id,
            "version": snap.version,
            "digest": snap.digest,
            "path": snap.url,
        }


class SequenceSource(Source):
    """A list, tuple, range, numpy array, or anything with ``__len__`` and ``__getitem__``."""

    def __init__(self, data: Sequence[Any]) -> None:
        self.data = data
        self.length = len(data)
        # Lists and arrays are in memory; another sequence's __getitem__ is the user's code (a torch
        # Dataset decoding files, say): read ahead on one thread, since it may not be thread-safe.
        self.parallel_reads = 0 if isinstance(data, (np.ndarray, list, tuple, range)) else 1

    def read_block(self, start: int, stop: int, batch: bool) -> Iterable[Any]:
        data = self.data
        if isinstance(data, (np.ndarray, list, tuple, range)):
            block: Any = data[start:stop]
        else:
            block = [data[i] for i in range(start, stop)]
        if batch:
            return [block]
        return list(block)

    def sample(self, index: int) -> Any:
        return self.data[index]

    def identity(self) -> dict[str, Any]:
        return {"kind": "sequence", "content": fingerprint_value(self.data, "data_in")}

    def describe(self) -> dict[str, Any]:
        return {"kind": "sequence", "type": type(self.data).__name__, "length": self.length}


class HuggingFaceSource(SequenceSource):
    """A Hugging Face ``datasets.Dataset``: recorded by its own content fingerprint and length, read by
    slices (one call per block, not per row)."""

    def identity(self) -> dict[str, Any]:
        return {"kind": "huggingface", "fingerprint": _hf_fingerprint(self.data), "length": self.length}

    def describe(self) -> dict[str, Any]:
        return {"kind": "huggingface", "fingerprint": _hf_fingerprint(self.data), "length": self.length}

    def read_samples(self, start: int, stop: int, batch: bool) -> list[Any]:
        columns = self.data[start:stop]  # column -> values, formatted as the dataset's format says
        names = list(columns)
        rows = [{name: columns[name][j] for name in names} for j in range(stop - start)]
        return [rows] if batch else rows


def _hf_fingerprint(data: Any) -> str:
    """A ``datasets.Dataset``'s fingerprint: the hash its library keeps of its content and every
    transform that made it (equal across processes and sessions for the same data)."""
    return str(data._fingerprint)


def _hf_type(data: Any) -> str | None:
    """The class name of a Hugging Face ``datasets`` object, else None. Checked by name, like Ray's:
    importing `datasets` to answer it would slow every eval down."""
    module = type(data).__module__
    return type(data).__name__ if module == "datasets" or module.startswith("datasets.") else None


_HF_STREAM_WAYS_OUT = (
    "Load it without streaming=True (a datasets.Dataset is recorded by its fingerprint), or write it into a "
    "lakecompute dataset first (an eval without checkpoint_interval) and run the checkpointed eval over "
    "that, or run without checkpoint_interval."
)


def _hf_source(data: Any) -> Source | None:
    """The adapter for a Hugging Face ``datasets`` object (None for anything else): a ``Dataset`` by its
    fingerprint, a streaming ``IterableDataset`` as a stream; a dict of splits is refused, naming them.

    Raises:
        InvalidTypeError: ``data`` is a ``DatasetDict`` or ``IterableDatasetDict``.
    """
    kind = _hf_type(data)
    if kind == "Dataset" and isinstance(getattr(data, "_fingerprint", None), str):
        return HuggingFaceSource(data)
    if kind == "IterableDataset":
        return IterableSource(data, "a datasets.IterableDataset (streaming)", _HF_STREAM_WAYS_OUT)
    if kind in ("DatasetDict", "IterableDatasetDict"):
        splits = list(data)
        example = f"data_in[{splits[0]!r}]" if splits else "one split"
        raise InvalidTypeError(
            f"data_in is a datasets.{kind} of the splits {splits!r}, not one dataset. Pass one split, "
            f"e.g. {example}, and run an eval per split you need."
        )
    return None


class TableSource(Source):
    """A table as input (``lc.read_parquet(...)``, an Arrow table, a pandas DataFrame): each sample is a
    row, a dict of column name -> value, read by range where the task runs (a Parquet file by row group,
    in the worker). Recorded by a digest of the table's content, taken once per eval."""

    #: Reading a Parquet row group, and decoding an ingest's images to check them (`TableInput.check_images`),
    #: release the GIL: several blocks are read at once, ahead of the function.
    parallel_reads = 4

    def __init__(self, table: TableInput) -> None:
        self.table = table
        self.length = len(table)
        self._identity: dict[str, Any] | None = None

    def read_block(self, start: int, stop: int, batch: bool) -> Iterable[Any]:
        rows = self.table.read_rows(start, stop)
        return [rows] if batch else rows

    def sample(self, index: int) -> Any:
        return self.table.read_rows(index, index + 1)[0]

    def identity(self) -> dict[str, Any]:
        # Taken once per eval (this source is the eval's own), never kept from one eval to the next: a
        # file rewritten since, at the same path, size and time, is another input.
        if self._identity is None:
            self._identity = self.table.identity()
        return self._identity

    def describe(self) -> dict[str, Any]:
        return self.table.describe()


class IterableSource(Source):
    """An iterable without a length: the parent pulls items and sends them with each task.

    Args:
        data: the iterable.
        what: what it is, for messages (the type's name by default).
        ways_out: what to do instead, for the error when the eval must be recorded.
    """

    def __init__(self, data: Iterable[Any], what: str = "", ways_out: str = "") -> None:
        self.data = data
        self.length = None
        self.what = what or f"a {type(data).__name__}"
        self.ways_out = ways_out or (
            "Pass a sequence (list(data_in)) or a dataset, or run without checkpoint_interval."
        )

    def __getstate__(self) -> dict[str, Any]:
        # Workers get their items with each task and never iterate the stream: it stays with the
        # parent (a live generator cannot be pickled, for a fork server's or Ray's workers).
        return {"data": (), "length": None, "what": self.what, "ways_out": self.ways_out}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def peek(self, n: int, max_bytes: int) -> list[Any]:
        """The first items, without consuming them: at most ``n`` of them and about ``max_bytes`` bytes
        (at least one; fewer if the stream is shorter)."""
        it = iter(self.data)
        head: list[Any] = []
        nbytes = 0
        for item in itertools.islice(it, n):
            head.append(item)
            nbytes += estimate_bytes(item)
            if nbytes >= max_bytes:
                break
        self.data = itertools.chain(head, it)
        return head

    def skip(self, n: int) -> None:
        """Leave out the next ``n`` items (already handled from `peek`)."""
        self.data = itertools.islice(self.data, n, None)

    def chunks(self, size: int, max_bytes: int, multiple: int = 1) -> Iterator[list[Any]]:
        """Items in lists of at most ``size`` items and about ``max_bytes`` bytes (estimated), so that
        the items the caller holds for tasks in flight stay bounded whatever the items' size. Every list
        but the last holds a multiple of ``multiple`` items (whole batches)."""
        chunk: list[Any] = []
        nbytes = 0
        for item in self.data:
            chunk.append(item)
            nbytes += estimate_bytes(item)
            if (len(chunk) >= size or nbytes >= max_bytes) and len(chunk) % multiple == 0:
                yield chunk
                chunk, nbytes = [], 0
        if chunk:
            yield chunk

    def sample(self, index: int) -> Any:
        return None

    def identity(self) -> dict[str, Any]:
        raise FingerprintError(
            f"data_in, {self.what}, is a stream without a length or an identity lakecompute can record, "
            f"so an eval over it cannot resume or be recognised when run again. {self.ways_out}"
        )


def check_equal_lengths(path: str, lengths: dict[str, int]) -> None:
    """Refuse dataset input whose tensors differ in length: an eval over it would read only the rows
    every tensor holds, silently leaving out (and, in place, dropping) the others.

    Raises:
        InvalidArgumentError: names the tensors, their lengths and the ways out.
    """
    if len(set(lengths.values())) <= 1:
        return
    shortest, longest = min(lengths.values()), max(lengths.values())
    listed = ", ".join(
        f"{name!r} has {n}" for name, n in sorted(lengths.items(), key=lambda kv: (kv[1], kv[0]))
    )
    raise InvalidArgumentError(
        f"The tensors of data_in {path!r} differ in length ({listed}), so an eval would process only "
        f"the {shortest} rows they all hold and leave out the others (in place, drop them). Pass "
        f"pad_data_in=True to pad the shorter tensors to {longest} rows, or eval a view of the rows "
        f"every tensor holds (ds[:{shortest}])."
    )


def _is_ray_dataset(data: Any) -> bool:
    # Checked by name: importing Ray (seconds) to answer it would slow every eval down.
    return type(data).__module__.startswith("ray.data") and type(data).__name__ in (
        "Dataset",
        "MaterializedDataset",
    )


def ray_rows(data: Any, batch_rows: int = 256) -> Iterator[dict[str, Any]]:
    """The rows of a ``ray.data.Dataset`` in its order, as dicts of column name to value.

    Read block by block as the eval takes them (streamed: nothing beyond a few blocks is held).
    Ray Data may reorder blocks for speed; the iteration asks it to keep their order (in the
    dataset's own context, which Ray Data reads when the iteration starts, restored after).
    """
    options = data.context.execution_options
    kept = options.preserve_order
    options.preserve_order = True
    try:
        for batch in data.iter_batches(batch_size=batch_rows, batch_format="numpy"):
            columns = list(batch)
            count = len(batch[columns[0]]) if columns else 0
            for i in range(count):
                yield {name: batch[name][i] for name in columns}
    finally:
        options.preserve_order = kept


_RAY_WAYS_OUT = (
    "Write it into a lakecompute dataset first (an eval without checkpoint_interval), then run the "
    "checkpointed eval over that dataset; or pass list(ray_ds.iter_rows()) when it fits in memory; or run "
    "without checkpoint_interval."
)


def make_source(data_in: Any, pad: bool, in_place: bool = False) -> Source:
    """Choose the adapter for ``data_in``."""
    if isinstance(data_in, (Dataset, DatasetView)):
        return DatasetSource(data_in, pad, rows_of_data=in_place)
    if pad:
        raise InvalidArgumentError("pad_data_in=True is only for dataset input; data_in is not a dataset.")
    hf = _hf_source(data_in)
    if hf is not None:
        return hf
    table = data_in if isinstance(data_in, TableInput) else table_input(data_in)
    if table is not None:
        return TableSource(table)
    if isinstance(data_in, (str, bytes, dict)):
        raise InvalidTypeError(
            f"data_in must be a dataset, a sequence or an iterable of samples. Got {type(data_in).__name__}; "
            "wrap a single sample in a list."
        )
    if isinstance(data_in, np.ndarray) and data_in.ndim == 0:
        raise InvalidTypeError(
            f"data_in is a 0-d array ({data_in!r}): it holds one value, not a sequence of samples. "
            "Pass a 1-d array or a list (for one sample: [value], or arr.reshape(1))."
        )
    if _is_ray_dataset(data_in):
        return IterableSource(ray_rows(data_in), "a ray.data.Dataset", _RAY_WAYS_OUT)
    if hasattr(data_in, "__len__") and hasattr(data_in, "__getitem__"):
        return SequenceSource(data_in)
    if isinstance(data_in, Iterable):
        return IterableSource(data_in)
    raise InvalidTypeError(
        "data_in must be a dataset, a sequence (with len and indexing) or an iterable. "
        f"Got {type(data_in).__name__}."
    )
