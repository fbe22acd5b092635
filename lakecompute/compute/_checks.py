"""The checks a worker applies to outputs, shared by the preflight and the tasks: what one input wrote
(`check_counts`, `alignment_error` in place), and the values of a tensor, as one block when they stack and
one by one to blame the value refused (`check_values`, against a `TaskWriter`'s decided schema or, in the
preflight, `SchemaChecks`' undecided one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from lakecompute.compute._runner import (
    StageFailure,
)
from lakecompute.datasets import (
    OutputSchema,
    TensorSchema,
)
from lakecompute.errors import InvalidArgumentError, InvalidSampleError
from lakecompute.htypes import Encoded, stacked

if TYPE_CHECKING:
    pass

__all__ = ["BadValue", "SchemaChecks", "alignment_error", "check_counts", "check_values", "value_owners"]

# -- checks shared by the preflight and the tasks --------------------------------------------------


def check_counts(
    written: Mapping[str, int], names: Sequence[str], *, skip_ok: bool, check_lengths: bool, function: str
) -> None:
    """Check what one input wrote (tensor -> values); raises StageFailure blaming ``function``."""
    written = {k: v for k, v in written.items() if v}
    if not written:
        return  # a filter: no output for this input
    if check_lengths and len(set(written.values())) > 1:
        raise StageFailure(
            function,
            InvalidArgumentError(
                f"the function wrote different numbers of samples per tensor for one input: {written}. "
                "Write every tensor the same number of times, or pass check_lengths=False."
            ),
        )
    missing = [k for k in names if k not in written]
    if missing and not skip_ok:
        raise StageFailure(
            function,
            InvalidArgumentError(
                f"the function wrote {sorted(written)} but not {missing} of data_out. Write every tensor "
                "of data_out, or pass skip_ok=True to leave the others short."
            ),
        )


def alignment_error(function: str, written: Mapping[str, int], expected: Mapping[str, int]) -> StageFailure:
    replaced = sorted(k for k, v in expected.items() if v)
    kept = sorted(k for k, v in expected.items() if not v)
    written = {k: v for k, v in written.items() if v or expected[k]}
    if not replaced:  # the first inputs wrote nothing: every tensor keeps its content
        return StageFailure(
            function,
            InvalidArgumentError(
                f"in place with skip_ok=True, the eval's first inputs wrote nothing, so tensors {kept} keep "
                f"their content, and every input must write nothing; this input gave {dict(written)}, which "
                "would leave the rows before it without a value. Write a tensor for every input (its value "
                "as read, where nothing changes), or write into a new dataset (data_out=lc.like(path, ds))."
            ),
        )
    return StageFailure(
        function,
        InvalidArgumentError(
            f"in place, with tensors {kept} kept, every input must give exactly one value to each of "
            f"{replaced} and nothing else, so that rows stay aligned; this input gave {dict(written)}. "
            "To filter, or to write several outputs per input, write into a new dataset "
            "(data_out=lc.like(path, ds)) instead of in place."
        ),
    )


class BadValue(Exception):
    """A value refused by its tensor's checks, and the input that wrote it."""

    def __init__(self, index: int, exc: InvalidSampleError) -> None:
        super().__init__(index, exc)
        self.index = index
        self.exc = exc


class _Checks(Protocol):
    """What checks a tensor's values: a `TaskWriter` (against the decided schema), or `SchemaChecks`."""

    @property
    def schemas(self) -> Mapping[str, TensorSchema]: ...

    def encode(self, name: str, value: object) -> Encoded: ...
    def encode_many(self, name: str, values: object) -> np.ndarray | list[Encoded]: ...
    def encode_ragged(self, name: str, values: list[Any]) -> list[Encoded] | None: ...


class SchemaChecks:
    """The preflight's checks: the first outputs against the undecided schema, as a `TaskWriter` checks
    later outputs against the decided one (so that they are checked once, and written as checked)."""

    def __init__(self, schema: OutputSchema) -> None:
        self._schemas = schema.tensors

    @property
    def schemas(self) -> Mapping[str, TensorSchema]:
        return self._schemas

    def encode(self, name: str, value: object) -> Encoded:
        return self.schemas[name].encode(value)

    def encode_many(self, name: str, values: object) -> np.ndarray | list[Encoded]:
        schema = self.schemas[name]
        assert isinstance(values, np.ndarray)
        block = schema.encode_block(values)
        if block is not None:
            return block
        out: list[Encoded] = []
        for v in values:
            out.append(schema.encode(v, len(out[0].shape) if out else None))
        return out

    def encode_ragged(self, name: str, values: list[Any]) -> list[Encoded] | None:
        return self.schemas[name].encode_ragged(values)


def check_values(
    checks: _Checks, name: str, values: list[Any], runs: list[np.ndarray] | None, owners: Any
) -> np.ndarray | list[Encoded]:
    """Check a tensor's buffered values: as one block when they stack (or are a batched function's
    columns, ``runs``), joined when they are ragged arrays, else one by one, to blame the value refused.

    Raises:
        BadValue: a value is refused; with the input (from ``owners()``) that wrote it.
    """
    if checks.schemas[name].spec.kind == "array":
        block = _joined_runs(runs)
        if block is None:
            block = stacked(values)
        if block is not None:
            try:
                return checks.encode_many(name, block)
            except InvalidSampleError:
                pass  # find the sample to blame below
        else:
            # Arrays whose first dimension varies (an image's boxes): checked joined, unless a value is
            # refused, which the per-sample loop below then finds and blames.
            ragged = checks.encode_ragged(name, values)
            if ragged is not None:
                return ragged
    items = []
    first: int | None = None
    for v, owner in zip(values, owners(), strict=True):
        try:
            enc = checks.encode(name, v)
            if isinstance(checks, SchemaChecks):  # the rank is not decided: one rank per tensor
                checks.schemas[name].check_rank(len(enc.shape), first)
                first = len(enc.shape) if first is None else first
            items.append(enc)
        except InvalidSampleError as exc:
            raise BadValue(owner, exc) from exc
    return items


def _joined_runs(runs: list[np.ndarray] | None) -> np.ndarray | None:
    """A batched function's output columns joined (one copy), as `stacked` would stack their rows:
    None unless they share dtype (numeric) and row shape."""
    if not runs:
        return None
    first = runs[0]
    if first.dtype.kind not in "biufc" or first.ndim < 1:
        return None
    if any(r.dtype != first.dtype or r.shape[1:] != first.shape[1:] for r in runs):
        return None
    return np.concatenate(runs) if len(runs) > 1 else np.ascontiguousarray(first)


def value_owners(marks: list[int], unusual: dict[int, list[int]], expected: int, k: int) -> list[int]:
    """The input index of each buffered value of tensor ``k``: each kept sample (``marks``) wrote
    ``expected`` values of it, but for the ``unusual`` ones, whose lengths after them are recorded."""
    out: list[int] = []
    prev = 0
    for position, index in enumerate(marks):
        after = unusual[position][k] if position in unusual else prev + expected
        if after > prev:
            out.extend([index] * (after - prev))
        prev = after
    return out
