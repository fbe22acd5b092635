"""Read-only access shared by datasets, views and rows; views and rows themselves."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from lakecompute.datasets._core import HasCore
from lakecompute.datasets._index import compose, parse_index
from lakecompute.datasets._info import DatasetInfo
from lakecompute.datasets._selecting import Selecting
from lakecompute.datasets._tables import TableVerbs
from lakecompute.datasets._taken import TakenAt
from lakecompute.datasets._tensor import TensorView
from lakecompute.errors import InvalidArgumentError, InvalidTypeError, ReadOnlyError, TensorDoesNotExistError

if TYPE_CHECKING:
    from typing import Unpack

    import ray.data

    from lakecompute.datasets._dataset import Dataset
    from lakecompute.datasets._objects import ObjectSelection
    from lakecompute.datasets._upward import Batches, LakeDataLoader, LoaderKwargs, TorchLoaderKwargs

__all__ = ["DatasetView", "Row", "base_dataset", "column_list", "view_rows"]


class _Reading(HasCore):
    """Read access shared by datasets, views and rows (through the dataset's core)."""

    def _base_ds(self) -> Dataset:
        raise NotImplementedError

    @property
    def tensors(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except TensorDoesNotExistError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute or tensor {name!r}; "
                f"tensors: {sorted(self.tensors)!r}."
            ) from None

    def __getitem__(self, key: Any) -> Any:
        raise NotImplementedError


class _Samples(_Reading, Selecting, TableVerbs):
    """What datasets and views share beyond reading: feeding a training loop (`lakecompute.loaders`),
    selecting by value (`Selecting`), and the exports as tables (`TableVerbs`)."""

    # -- training (lakecompute.loaders) ----------------------------------------------------------
    def batches(
        self,
        batch_size: int,
        tensors: str | Sequence[str] | None = None,
        **options: Unpack[LoaderKwargs],
    ) -> Batches:
        """Iterate over the samples in batches (a dataset's committed version, or a view's selection):
        dicts of numpy arrays, one per step.

        The epoch's order is a permutation drawn from ``(seed, epoch)`` (the identity without
        ``shuffle``), the same on every rank. Position ``p`` of it goes to rank ``p % world_size``,
        then to loader worker ``(p // world_size) % num_workers``; each worker cuts its own samples into
        batches of ``batch_size``, and step ``s`` is batch ``s // num_workers`` of worker
        ``s % num_workers`` (torch's order), so batches depend on ``num_workers``. Every rank yields the
        same number of batches: the order wraps around to fill the shares (at most ``world_size - 1``
        repeats), or with ``drop_last`` each worker leaves out its short last batch. See the Training
        guide for a worked example.

        Args:
            batch_size: samples per batch.
            tensors: the tensors to read (a name or names); None for all.
            **options: the options of `lakecompute.loaders.LoaderKwargs`, by keyword (memory is bounded
                by ``prefetch``, not by the dataset).

        Returns:
            A loader of ``{tensor: array}`` dicts (a list of arrays for a tensor whose samples
            differ in shape, a list of str/values for text and json). Each pass over it is the next
            epoch (``set_epoch(e)`` sets it); ``len()`` is a full epoch's batches; ``state_dict()`` /
            ``load_state_dict()`` checkpoint and resume it exactly (see `lakecompute.loaders.Batches`).

        Raises:
            InvalidArgumentError: bad options, or uncommitted changes (commit them first).
            TensorDoesNotExistError: an unknown name in ``tensors``.

        Example:
            >>> import numpy as np
            >>> ds = lc.empty("mem://batches-doc", overwrite=True)
            >>> _ = ds.create_tensor("x", dtype="int16")
            >>> ds.x.extend(np.arange(10))
            >>> batches = ds.batches(4)
            >>> len(batches), next(batches)["x"].shape
            (3, (4,))
            >>> tuple(next(ds[[9, 2, 5]].batches(2))["x"])  # a view
            (np.int16(9), np.int16(2))
        """
        from lakecompute.datasets._upward import LoaderOptions, batches

        # Checked here once, at the user's call, and passed on whole.
        parsed = LoaderOptions.parse("batches", batch_size, options)
        return batches(cast("Dataset | DatasetView", self), tensors, parsed)

    def pytorch(
        self,
        batch_size: int,
        tensors: str | Sequence[str] | None = None,
        **options: Unpack[TorchLoaderKwargs],
    ) -> LakeDataLoader:
        """A ``torch.utils.data.DataLoader`` over the samples (a dataset or a view), batched and sharded like
        `batches` (numpy arrays arrive as tensors).

        It takes the options of `batches`, and ``collate_fn`` and ``pin_memory``; ``num_workers`` are
        the DataLoader's worker processes (each reads and decodes its own samples).

        Args:
            batch_size: samples per batch.
            tensors: the tensors to read (a name or names); None for all.
            **options: the options of `lakecompute.loaders.TorchLoaderKwargs`, by keyword.

        Returns:
            A real DataLoader (`lakecompute.loaders.LakeDataLoader`): each pass is the next epoch,
            ``len()`` is a full epoch's batches for this rank, and it speaks torch's stateful protocol
            (``state_dict``, ``load_state_dict``, ``set_epoch``), so Lightning and Accelerate checkpoint
            and resume it exactly. ``rank``/``world_size`` left None are read when each pass starts.
            Class labels arrive as int64.

        Raises:
            InvalidArgumentError: torch is not installed (``pip install torch``), or
                bad options as for `batches`.
        """
        from lakecompute.datasets._upward import LoaderOptions, pytorch

        parsed = LoaderOptions.parse("pytorch", batch_size, options)
        return pytorch(cast("Dataset | DatasetView", self), tensors, parsed)

    def to_ray(
        self, tensors: str | Sequence[str] | None = None, rows_per_block: int = 1024
    ) -> ray.data.Dataset:
        """This committed version (or view) as a ``ray.data.Dataset``: one column per tensor, rows in order.

        Nothing is read now: each block of ``rows_per_block`` rows is read where Ray runs it (every
        node of a cluster reads its share straight from storage, so keep the dataset on S3 there),
        through the same checked reader as `batches`. Images arrive decoded; ragged, text and json
        columns hold one object per row. Use it to ``map_batches`` over a dataset with Ray Data, and
        write results back with ``eval`` (which takes a ``ray.data.Dataset`` as ``data_in``).

        Args:
            tensors: the tensors to read (a name or names); None for all.
            rows_per_block: rows in each Ray Data block (each read by one Ray task).

        Raises:
            InvalidArgumentError: Ray Data is not installed, uncommitted changes, a ``mem://`` dataset,
                or a bad ``rows_per_block``.
            TensorDoesNotExistError: an unknown name in ``tensors``.
        """
        from lakecompute.datasets._upward import to_ray

        return to_ray(cast("Dataset | DatasetView", self), tensors, rows_per_block)

    # -- everyday verbs -----------------------------------------------------------------------------
    def filter(
        self,
        fn_or_mask: Any,
        *,
        num_workers: int = 0,
        scheduler: str = "processed",
        progressbar: bool = True,
    ) -> DatasetView:
        """The samples an expression, a function or a boolean mask keeps, as a read-only view (in the
        dataset's order).

        An expression (``lc.col("labels") == "cat"``, or its text ``"labels == 'cat' and score > 0.5"``;
        see docs/selecting.md) is evaluated column by column, reading only the tensors it names, in whole
        chunks: a label filter never reads an image. A condition on per-object values keeps a row where
        any of its objects meets it. The view's ``selected_by`` records the expression.

        A function gets each row (``row.labels.numpy()``) and returns true to keep it; it runs like an
        eval (``num_workers`` processes, ``scheduler``, a progress bar), so it must be picklable for
        workers, and reads only the tensors it uses. A mask has one bool per sample.

        Raises:
            ExpressionError: an expression that does not parse or fit the tensors, naming the position.

        Example:
            >>> ds = lc.from_numpy("mem://filter-doc", {"x": [3, 8, 1, 9]}, overwrite=True)
            >>> ds.filter(lc.col("x") > 2).x.numpy().tolist()
            [3, 8, 9]
            >>> ds.filter("x > 2 and x % 3 == 0").x.numpy().tolist()
            [3, 9]
            >>> ds.filter(lambda row: row.x.numpy() > 2, progressbar=False).x.numpy().tolist()
            [3, 8, 9]
        """
        from lakecompute.datasets._upward import Expr, filter_view

        if isinstance(fn_or_mask, (str, Expr)):
            return filter_view(cast("Dataset | DatasetView", self), fn_or_mask)
        from lakecompute.datasets._verbs import filter_samples

        options = {"num_workers": num_workers, "scheduler": scheduler, "progressbar": progressbar}
        return filter_samples(cast("Dataset | DatasetView", self), fn_or_mask, options)

    def save(
        self,
        dest: str | os.PathLike[str],
        overwrite: bool = False,
        storage_options: dict[str, Any] | None = None,
        progressbar: bool = True,
        checkpoint_interval: int | None = None,
    ) -> Dataset:
        """Write these rows as a new dataset at ``dest`` and return it: a saved view (``lc.copy``).

        Encoded samples (JPEG, PNG, WebP, text, json) are copied as the bytes they are stored as.
        Resumable: after a failure or a kill the same call continues after its last checkpoint (every
        ``checkpoint_interval`` rows, default 16,384); after it completed, it writes nothing.

        Example:
            >>> ds = lc.from_numpy("mem://save-doc", {"x": [3, 8, 1, 9]}, overwrite=True)
            >>> view = ds.filter([True, False, False, True])
            >>> view.save("mem://save-doc-sub", progressbar=False).x.numpy().tolist()
            [3, 9]
        """
        from lakecompute.datasets._save import copy

        return copy(
            cast("Dataset | DatasetView", self),
            dest,
            overwrite=overwrite,
            storage_options=storage_options,
            progressbar=progressbar,
            checkpoint_interval=checkpoint_interval,
        )

    def random_split(self, fractions: Sequence[float], seed: int = 0) -> list[DatasetView]:
        """Disjoint random subsets as views: ``train, val = ds.random_split([0.8, 0.2], seed=0)``.

        ``fractions`` add up to 1 (sizes are rounded down, the remainder going one each to the first
        splits) or are sizes that add up to ``len(ds)``. The same seed gives the same split; each view
        lists its samples in the dataset's order.
        """
        from lakecompute.datasets._verbs import random_split

        return random_split(cast("Dataset | DatasetView", self), fractions, seed)

    def export_coco(
        self,
        annotations: str | os.PathLike[str],
        images: str | os.PathLike[str] | None = None,
        *,
        image_format: str | None = None,
        progressbar: bool = True,
    ) -> Any:
        """Write the samples as a COCO annotations JSON, and their image files into ``images``, as they
        are stored unless ``image_format`` says otherwise (see `lakecompute.vision.export_coco`); returns
        the COCO dict."""
        from lakecompute.datasets._upward import export_coco

        return export_coco(
            cast("Dataset | DatasetView", self),
            annotations,
            images,
            image_format=image_format,
            progressbar=progressbar,
        )

    def export_yolo(
        self,
        folder: str | os.PathLike[str],
        split: str | None = None,
        *,
        task: Literal["pose"] | None = None,
        flip_idx: Sequence[int] | None = None,
        image_format: str | None = None,
        progressbar: bool = True,
    ) -> Any:
        """Write the samples as a YOLO folder: data.yaml, images/, labels/ (see
        `lakecompute.vision.export_yolo`; ``task="pose"`` writes boxes with keypoints; images as they are
        stored unless ``image_format`` says otherwise); returns what was written and left out (a
        `YoloExport`)."""
        from lakecompute.datasets._upward import export_yolo

        return export_yolo(
            cast("Dataset | DatasetView", self),
            folder,
            split,
            task=task,
            flip_idx=flip_idx,
            image_format=image_format,
            progressbar=progressbar,
        )

    # -- display ---------------------------------------------------------------------------------
    def summary_table(self) -> str:
        """The summary as text: a line naming the dataset (or view), then a table of its tensors."""
        rows = [("tensor", "htype", "dtype", "shape", "compression", "length")]
        for name, t in self.tensors.items():
            dt = t.dtype
            comp = t.sample_compression or t.chunk_compression or "None"
            shape = "(" + ", ".join("None" if d is None else str(d) for d in t.shape) + ")"
            rows.append((name, t.htype, "None" if dt is None else str(dt), shape, comp, str(len(t))))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        base = self._base_ds()
        lines = [f"{type(self).__name__}(path={base.path!r}, version={base.version}, samples={len(self)})"]
        for j, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
            if j == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def summary(self) -> None:
        """Print a table of the tensors: htype, dtype, shape, compression, length (of a view: its
        samples)."""
        print(self.summary_table())

    def __len__(self) -> int:
        raise NotImplementedError


class DatasetView(TakenAt, _Samples):
    """A read-only selection of a dataset's samples (``ds[2:10]``, ``ds[[3, 1]]``, ``ds[mask]``,
    ``ds.filter(...)``), of its tensors (``ds[["labels", "boxes"]]``), and of its rows' objects
    (``ds.filter_labels(...)``).

    It reads the version its dataset's handle read when it was taken, whatever the handle does later (a
    checkout, a write, a restore): take it again (``ds[2:10]``) to see them (see `TakenAt`).
    """

    def __init__(
        self,
        ds: Dataset,
        positions: range | np.ndarray,
        columns: tuple[str, ...] | None = None,
        objects: ObjectSelection | None = None,
        query: tuple[str, ...] = (),
    ) -> None:
        self._take(ds)
        self._pos = positions
        self._columns = columns
        self._objects = objects
        self._query = query

    def _base_ds(self) -> Dataset:
        return self._ds

    def __reduce__(self) -> tuple[Any, ...]:
        # The dataset travels as where it lives (Dataset.__reduce__); the core is its reopened handle's.
        return (DatasetView, (self._ds, self._pos, self._columns, self._objects, self._query))

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The tensors this view shows (``ds[["labels", "boxes"]]``), or None: all of them."""
        return self._columns

    @property
    def kept_objects(self) -> ObjectSelection | None:
        """Which objects of each row the view keeps (``filter_labels``), or None: all of them."""
        return self._objects

    @property
    def selected_by(self) -> tuple[str, ...]:
        """How the view was selected, step by step (``("filter(labels == 'cat')", "sort(score)")``): what
        a saved view records with the version it was evaluated on."""
        return self._query

    @property
    def info(self) -> DatasetInfo:
        """The dataset's info (read-only through a view)."""
        return DatasetInfo(self._ds.info, None)

    @property
    def positions(self) -> range | np.ndarray:
        """Positions of this view's samples in the underlying dataset."""
        return self._pos

    @property
    def path(self) -> str:
        return self._ds.path

    @property
    def version(self) -> int:
        return self._ds.version

    @property
    def read_only(self) -> bool:
        return True

    @property
    def tensors(self) -> dict[str, TensorView]:
        return {name: TensorView(self._ds, name, self._pos, self._objects) for name in self.keys()}

    def keys(self) -> list[str]:
        """The names of the tensors the view shows, in the dataset's order."""
        names = self._core.names()
        return names if self._columns is None else [n for n in names if n in self._columns]

    def __len__(self) -> int:
        return len(self._pos)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            self._check_shown(key)
            return TensorView(self._ds, key, self._pos, self._objects)
        columns = column_list(key)
        if columns is not None:
            for name in columns:
                self._check_shown(name)
            return DatasetView(self._ds, self._pos, columns, self._objects, self._query)
        inner = parse_index(key, len(self._pos), "a view")
        pos = compose(self._pos, inner)
        objects = (
            None
            if self._objects is None
            else self._objects.take([inner] if isinstance(inner, int) else inner)
        )
        if isinstance(pos, int):
            return Row(self._ds, pos, self._columns, objects)
        return DatasetView(self._ds, pos, self._columns, objects, self._query)

    def _check_shown(self, name: str) -> None:
        self._core.state(name)
        if self._columns is not None and name not in self._columns:
            raise TensorDoesNotExistError(name, list(self._columns))

    def __iter__(self) -> Iterator[Row]:
        objects = self._objects
        for i, p in enumerate(self._pos):
            yield Row(self._ds, int(p), self._columns, None if objects is None else objects.take([i]))

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnlyError(
            "Dataset views are read-only. Write to the dataset itself, or eval() into another dataset."
        )

    append = extend = create_tensor = _refuse

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self._refuse()

    def __repr__(self) -> str:
        shown = "" if self._columns is None else f", tensors={list(self._columns)!r}"
        how = "" if not self._query else f", selected_by={' | '.join(self._query)!r}"
        return f"DatasetView(path={self.path!r}, version={self.version}, samples={len(self)}{shown}{how})"

    def _repr_html_(self) -> str:
        from lakecompute.datasets._upward import (
            dataset_html,  # the notebook view: summary table and thumbnails
        )

        return dataset_html(self._ds, self.positions)


class Row(TakenAt, _Reading):
    """One sample of a dataset: ``ds[3].images.numpy()``, ``ds[3]["labels"]`` (of the version its handle
    read when the row was taken, like a view)."""

    def __init__(
        self,
        ds: Dataset,
        position: int,
        columns: tuple[str, ...] | None = None,
        objects: ObjectSelection | None = None,
    ) -> None:
        self._take(ds)
        self._pos = position
        self._columns = columns
        self._objects = objects  # of this one row (a view's filter_labels)

    def _base_ds(self) -> Dataset:
        return self._ds

    def __reduce__(self) -> tuple[Any, ...]:
        return (Row, (self._ds, self._pos, self._columns, self._objects))  # reopened with its dataset

    @property
    def index(self) -> int:
        return self._pos

    @property
    def tensors(self) -> dict[str, TensorView]:
        return {name: TensorView(self._ds, name, self._pos, self._objects) for name in self.keys()}

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, str):
            raise InvalidTypeError(f"A row is indexed by tensor name. Got {type(key).__name__}: {key!r}.")
        self._core.state(key)
        if self._columns is not None and key not in self._columns:
            raise TensorDoesNotExistError(key, list(self._columns))
        return TensorView(self._ds, key, self._pos, self._objects)

    def keys(self) -> list[str]:
        names = self._core.names()
        return names if self._columns is None else [n for n in names if n in self._columns]

    def to_dict(self) -> dict[str, Any]:
        """The row's values by tensor name (arrays, or str/values for text/json)."""
        out = {name: self._core.reader(name).read_one(self._pos) for name in self.keys()}
        if self._objects is not None:
            out = {name: self._objects.sample(name, 0, value) for name, value in out.items()}
        return out

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            raise ReadOnlyError("Rows are read-only; write with ds.<tensor>[i] = value.")

    def __repr__(self) -> str:
        return f"Row(index={self._pos}, tensors={self.keys()!r})"


def base_dataset(data: Dataset | DatasetView | Row) -> Dataset:
    """The dataset a view or row reads from (a dataset is its own)."""
    return data._base_ds()


def column_list(key: Any) -> tuple[str, ...] | None:
    """The tensor names of a column view's key (``ds[["labels", "boxes"]]``), or None for another key.

    Raises:
        InvalidArgumentError: an empty list, or a name given twice.
    """
    if not isinstance(key, (list, tuple)) or not key or not all(isinstance(k, str) for k in key):
        return None
    if len(set(key)) != len(key):
        raise InvalidArgumentError(f"A column view names each tensor once. Got {list(key)!r}.")
    return tuple(key)


def view_rows(
    data: Dataset | DatasetView,
    rows: np.ndarray,
    step: str | None = None,
    objects: ObjectSelection | None = None,
) -> DatasetView:
    """The view of rows ``rows`` of ``data`` (indices into it, in the order given), showing what ``data``
    shows, its ``selected_by`` followed by ``step``; ``objects`` (for those rows) in place of ``data``'s
    own."""
    rows = np.asarray(rows, dtype=np.int64)
    if isinstance(data, DatasetView):
        positions = np.asarray(data.positions, dtype=np.int64)[rows]
        kept = (
            objects
            if objects is not None
            else (None if data.kept_objects is None else data.kept_objects.take(rows))
        )
        query = data.selected_by + ((step,) if step else ())
        return DatasetView(base_dataset(data), positions, data.columns, kept, query)
    return DatasetView(data, rows, None, objects, (step,) if step else ())
