"""Running a pipeline on one sample: the code every eval worker and every loader worker shares.

A pipeline's functions become `Stage` objects once per worker (a class-based function's
``__init__`` runs then). For each input, the stages run in order inside the worker: every output row of
stage k is a ``sample_in`` of stage k+1, and the last stage writes into the final ``sample_out``.

A function may write to ``sample_out``, or return one output row (a dict) or several (a list of dicts),
the ``datasets.map`` habit — not both. A function with an ``rng`` parameter gets a
``numpy.random.Generator`` derived from ``(seed, *key, input index, stage, row)``: the same numbers for
the same input whatever worker, scheduler or task size runs it, and after a resume.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.compute._options import draw_seed
from lakecompute.compute._sample_out import SampleOut
from lakecompute.compute._samples import SAMPLE_ROWS, InputRow, RowMeta, row_class
from lakecompute.errors import DatasetCorruptError, InvalidArgumentError, InvalidTypeError, TransformError

if TYPE_CHECKING:
    from lakecompute.compute._decorator import ComputeFunction, Pipeline

__all__ = [
    "SampleRunner",
    "Stage",
    "StageFailure",
    "absorb_return",
    "build_stages",
    "failure_error",
    "make_rng",
    "rows_of",
    "run_sample",
    "user_failure",
]


class Stage:
    """One compute function of a pipeline, ready to call in this worker.

    Attributes:
        call: the per-sample callable (a bound function, or an instance of the class).
        name: the function's name, for errors.
        number: its position in the pipeline (part of its ``rng``'s key).
        wants_rng: whether it takes an ``rng`` argument.
    """

    __slots__ = ("call", "name", "number", "wants_rng")

    def __init__(self, function: ComputeFunction, number: int) -> None:
        try:
            self.call = function.instantiate()
        except Exception as exc:
            raise _init_error(function.name, exc) from exc
        self.name = function.name
        self.number = number
        self.wants_rng = function.wants_rng


def _init_error(function: str, exc: Exception) -> TransformError:
    """The error for a class compute whose ``__init__`` raised (a model that fails to load): a
    TransformError naming the class, with no input to blame, the exception as its cause."""
    return TransformError(
        f"Transform {function!r} could not start: its __init__ raised {type(exc).__name__}: {exc}. No "
        "sample was processed. Fix what __init__ needs (a model file, a device, an argument) and run again.",
        None,
        None,
        function,
    )


def build_stages(pipeline: Pipeline) -> list[Stage]:
    """The stages of ``pipeline``; class-based functions are instantiated here (once per worker)."""
    return [Stage(f, k) for k, f in enumerate(pipeline.functions)]


class StageFailure(Exception):
    """User code failed: which function, the exception it raised, and (when a step is to blame) the
    step's position in the pipeline and the ``sample_in`` it was given."""

    def __init__(
        self, function: str, exc: BaseException, step: int | None = None, step_input: Any = None
    ) -> None:
        super().__init__(function, exc)
        self.function = function
        self.exc = exc
        self.step = step
        self.step_input = step_input


def user_failure(
    function: str, exc: Exception, step: int | None = None, step_input: Any = None
) -> StageFailure:
    """The `StageFailure` for an exception raised inside user code, or ``exc`` itself, raised here, when it
    is damaged storage: an eval's input is read when the function first asks for a tensor (see
    `lakecompute.compute.Deferred`), so a damaged input chunk surfaces inside user code, and it stays the
    `DatasetCorruptError` every read path gives (never a failed sample, not even with ``ignore_errors``)."""
    if isinstance(exc, DatasetCorruptError):
        raise exc
    return StageFailure(function, exc, step, step_input)


def make_rng(seed: int, key: Sequence[int]) -> np.random.Generator:
    """The generator for ``key`` (``(*prefix, index, stage, row)``) of an eval or loader with ``seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=tuple(key))))


def absorb_return(value: Any, out: SampleOut, wrote: bool, function: str, batched: bool = False) -> None:
    """Write what a compute function returned into ``out`` (``None`` and ``sample_out`` write nothing).

    A dict is one output row, or with ``batched`` (the function was given a batch) columns: each value
    a sequence of the same length m, giving m rows — Hugging Face's ``map(batched=True)`` convention.

    Raises:
        InvalidTypeError: the value is not a dict, a list of dicts, None or ``sample_out``.
        InvalidArgumentError: the function also wrote to ``sample_out`` in the same call, or returned
            columns of different lengths.
    """
    if value is None or value is out:
        return
    if batched and isinstance(value, Mapping):
        columns = _columns(value, function)
        _refuse_both(value, wrote, function)
        out.extend(columns)
        return
    if isinstance(value, Mapping):
        rows: list[Any] = [value]
    elif isinstance(value, list) and all(isinstance(r, Mapping) for r in value):
        rows = value
    else:
        raise InvalidTypeError(
            f"{function} returned {type(value).__name__} {value!r:.60}. A compute function returns None "
            "(having written to sample_out), sample_out, a dict (one output row) or a list of dicts (rows)."
        )
    _refuse_both(value, wrote, function)
    for row in rows:
        out.append(row)


def _refuse_both(value: Any, wrote: bool, function: str) -> None:
    if wrote:
        raise InvalidArgumentError(
            f"{function} wrote to sample_out and also returned {type(value).__name__}; do one or the other: "
            "either append to sample_out and return None, or return the rows without touching sample_out."
        )


def _columns(value: Mapping[str, Any], function: str) -> dict[str, Any]:
    """A batched function's returned dict, checked as columns of one length."""
    lengths: dict[str, int] = {}
    for name, column in value.items():
        if (
            isinstance(column, (str, bytes, Mapping))
            or not hasattr(column, "__len__")
            or np.ndim(column) == 0
        ):
            raise InvalidTypeError(
                f"{function} was given a batch (batch_size=...) and returned a dict, read as columns "
                f"(as in Hugging Face's map(batched=True)), but {name!r} is {type(column).__name__} "
                f"{column!r:.40}, not a sequence. Return a list or array per tensor (one value per output), "
                "or a list of dicts (rows)."
            )
        lengths[str(name)] = len(column)
    if len(set(lengths.values())) > 1:
        raise InvalidArgumentError(
            f"{function} was given a batch and returned columns of different lengths {lengths}; with "
            "batch_size, a returned dict holds m outputs per tensor, the same m for every tensor (as in "
            "Hugging Face's map(batched=True)). Return columns of one length."
        )
    return dict(value)


def call_stage(
    stage: Stage, sample: Any, out: SampleOut, seed: int, key: tuple[int, ...], batched: bool = False
) -> None:
    """Run one stage on one ``sample_in`` (a batch if ``batched``); user errors come out as `StageFailure`."""
    before = out.total()
    try:
        if stage.wants_rng:
            value = stage.call(sample, out, rng=make_rng(seed, key))
        else:
            value = stage.call(sample, out)
        if value is not None and value is not out:
            absorb_return(value, out, out.total() != before, stage.name, batched)
    except Exception as exc:
        raise user_failure(stage.name, exc, stage.number, sample) from exc


def rows_of(
    out: SampleOut, index: int, function: str, check_lengths: bool, row: int | None = None
) -> list[InputRow]:
    """A stage's outputs as rows: the next stage's ``sample_in`` objects."""
    items = {k: v for k, v in out.items().items() if v}
    if not items:
        return []
    counts = {k: len(v) for k, v in items.items()}
    n = max(counts.values())
    if len(set(counts.values())) > 1:
        if check_lengths:
            raise StageFailure(
                function,
                InvalidArgumentError(
                    f"{function} wrote different numbers of samples per tensor {counts}; the next step needs "
                    "whole rows. Write every tensor once per output sample."
                ),
            )
        n = min(counts.values())
    cls = row_class(tuple(items))
    return [cls({k: v[j] for k, v in items.items()}, index, row) for j in range(n)]


def run_sample(
    stages: Sequence[Stage],
    sample: Any,
    index: int,
    final: SampleOut,
    *,
    check_lengths: bool,
    seed: int,
    prefix: tuple[int, ...] = (),
    batched: bool = False,
) -> None:
    """Run every stage on one input (``index`` in ``data_in``), writing the last stage's rows to ``final``.

    With ``batched`` the input is a batch, given to the first stage; later stages get its output rows.
    """
    current = [sample]
    last = len(stages) - 1
    row = sample.row if isinstance(sample, SAMPLE_ROWS) else None  # the dataset row, for later steps' rows
    for stage in stages:
        out = final if stage.number == last else SampleOut(None)
        for j, s in enumerate(current):
            call_stage(stage, s, out, seed, (*prefix, index, stage.number, j), batched and stage.number == 0)
        if stage.number != last:
            current = rows_of(out, index, stage.name, check_lengths, row)
            if not current:
                return


def failure_error(
    function: str,
    index: int,
    exc: BaseException,
    sample: Any = None,
    step: int | None = None,
    step_input: Any = None,
    row: int | None = None,
) -> TransformError:
    """The TransformError for user code that raised ``exc`` on ``data_in[index]`` (read from dataset row
    ``row``, for dataset input), in pipeline step ``step`` (given ``step_input``; the first step's is
    ``sample``)."""
    where = f"data_in[{index}]" if row is None else f"data_in[{index}] (dataset row {row})"
    err = TransformError(
        f"Transform {function!r} failed on {where}: {type(exc).__name__}: {exc}",
        index,
        sample,
        function,
        None if step is None else (step, function),
        sample if step == 0 else step_input,
        row,
    )
    err.__cause__ = exc
    return err


def _plain(value: Any) -> Any:
    """A step's input as users read it: a row as a dict of tensor name -> value, anything else as is."""
    return value.to_dict() if isinstance(value, SAMPLE_ROWS) else value


class SampleRunner:
    """Runs a compute function or pipeline on one sample at a time, in this process, as eval's workers do.

    For code that applies a transform on the fly (the loaders' ``transform=``): the same functions users
    run offline with ``eval``, with the same return-value rules and the same seeded ``rng``.

    Args:
        transform: a `ComputeFunction` or `Pipeline`; a class-based function is instantiated here.
        seed: the seed of the ``rng`` generators (None: a fresh one, in ``.seed``).

    Example:
        >>> @lc.compute
        ... def double(sample_in, sample_out):
        ...     sample_out.x.append(sample_in.x.numpy() * 2)
        >>> SampleRunner(double(), seed=0).run({"x": 3}, index=0)
        [{'x': np.int64(6)}]
    """

    def __init__(self, transform: ComputeFunction | Pipeline, seed: int | None = None) -> None:
        from lakecompute.compute._decorator import as_pipeline

        self.pipeline = as_pipeline(transform)
        self.stages = build_stages(self.pipeline)
        self.seed = draw_seed() if seed is None else seed

    def run(
        self,
        values: Any,
        index: int,
        key: tuple[int, ...] = (),
        meta: RowMeta = (),
    ) -> list[dict[str, Any]]:
        """Run the transform on one sample.

        Args:
            values: the sample: a dict of tensor name -> value (given to the functions as a row, like a
                dataset's ``sample_in``), or any other value (given as it is).
            index: the sample's index (part of its ``rng``'s key, and named by errors).
            key: more of the ``rng``'s key, before the index (the loaders pass ``(epoch,)``).
            meta: the tensors the values were read from (their htype and info, which the row's values
                answer), when they were read from a dataset.

        Returns:
            The output rows: 0, 1 or many dicts of tensor name -> value.

        Raises:
            TransformError: the transform failed (``.index``, ``.sample``, ``__cause__``).
        """
        sample = row_class(tuple(values), meta)(values, index) if isinstance(values, Mapping) else values
        out = SampleOut(None)
        try:
            run_sample(self.stages, sample, index, out, check_lengths=True, seed=self.seed, prefix=key)
            rows = rows_of(out, index, self.stages[-1].name, True)
        except StageFailure as failure:
            raise failure_error(
                failure.function, index, failure.exc, sample, failure.step, _plain(failure.step_input)
            ) from failure.exc
        return [r.to_dict() for r in rows]
