"""What every htype's codec shares: the base class, and the checks of numbers that several use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.specs import HTYPES, Encoded, HType, TensorSpec

__all__ = ["HTypeCodec", "TensorRules", "as_array", "cast_checked", "check_finite", "check_label_range"]


@dataclass(frozen=True, slots=True)
class TensorRules:
    """What one tensor's samples are checked against: every codec method is given this, built once per
    tensor (by its `lakecompute.datasets` schema), not per sample."""

    spec: TensorSpec
    """The tensor's spec (its name, htype, dtype and compressions)."""
    class_names: list[str]
    """For class-named tensors, the names a string label maps to (and an index ranges over)."""
    info: Mapping[str, Any]
    """The tensor's info that samples are checked against (a bbox tensor's ``format``, ...)."""
    name: str = field(init=False)
    """The tensor's name, as every refusal names it (``spec.name``, kept as a field: read per sample)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.spec.name)


class HTypeCodec:
    """How the samples of one htype are checked, encoded for storage and decoded: one subclass per
    htype, registered against its declaration (`lakecompute.specs.HType`) in ``htypes/_registry.py``.

    An htype stored as arrays overrides `check` (its rules on one sample's numbers) and, for a fast path
    over samples stacked on axis 0, `check_block`; one whose checked numbers are stored as a blob overrides
    `store` and `decode`; one whose values are not numbers overrides `encode` and `decode`. Each method is
    given the tensor's `TensorRules`; every refusal is an `InvalidSampleError` naming the tensor.
    """

    htype: ClassVar[str]
    """The name of the declared htype this codec is for."""

    @property
    def declaration(self) -> HType:
        return HTYPES[self.htype]

    def encode(self, rules: TensorRules, value: object) -> Encoded:
        """One sample checked and turned into what is stored: by default its numbers (`numbers`),
        checked (`check`), cast to the tensor's dtype and stored as `store` says."""
        return self.store(rules, self.checked(rules, self.numbers(rules, value)))

    def numbers(self, rules: TensorRules, value: object) -> np.ndarray:
        """A sample's numbers as an array (a value with ``.numpy()`` gives that)."""
        return as_array(value, rules.name)

    def checked(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        """`check`, then the cast to the tensor's dtype (refusing values the dtype cannot hold)."""
        arr = self.check(rules, arr)
        if rules.spec.dtype is not None:
            arr = cast_checked(arr, np.dtype(rules.spec.dtype), rules.name)
        return arr

    def check(self, rules: TensorRules, arr: np.ndarray) -> np.ndarray:
        """The htype's rules on one sample's numbers (for a ragged htype, on samples joined on axis 0:
        every rule then holds per row or per value): what is stored, before the dtype cast."""
        return arr

    def check_block(self, rules: TensorRules, values: np.ndarray) -> np.ndarray | None:
        """Samples of one shape stacked on axis 0 checked at once (before the dtype cast), or None when
        they must be checked one by one (the default)."""
        return None

    def store(self, rules: TensorRules, arr: np.ndarray) -> Encoded:
        """A checked sample as it is stored: by default its numbers as they are."""
        return Encoded(arr, None, arr.shape)

    def decode(self, spec: TensorSpec, raw: bytes, shape: tuple[int, ...]) -> Any:
        """A stored blob back as the value a user reads (htypes stored as blobs).

        Raises:
            ValueError or LakeComputeError: a blob that is not what this codec writes.
        """
        raise ValueError(f"htype {self.htype!r} stores arrays, not blobs (tensor {spec.name!r})")


def cast_checked(arr: np.ndarray, dtype: np.dtype[Any], tensor: str) -> np.ndarray:
    """Cast ``arr`` to ``dtype`` if no value changes meaning; else raise InvalidSampleError."""
    if arr.dtype == dtype:
        return arr
    src, dst = arr.dtype.kind, dtype.kind
    if np.can_cast(arr.dtype, dtype, "safe"):
        return arr.astype(dtype)
    if (src in "biuf" and dst in "fc") or (src == "c" and dst == "c"):
        return _cast_float_checked(arr, dtype, tensor)
    if src in "biu" and dst in "iu":
        if arr.size:
            info = np.iinfo(dtype)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                bad = lo if lo < info.min else hi
                raise InvalidSampleError(
                    tensor,
                    f"value {bad} does not fit dtype {dtype} (range {info.min}..{info.max}). "
                    "Use a wider dtype for the tensor or clip the values.",
                )
        return arr.astype(dtype)
    raise InvalidSampleError(
        tensor,
        f"values of dtype {arr.dtype} cannot be stored as {dtype} without losing information. "
        f"Convert them first (e.g. arr.astype({dtype.name!r})) or use a tensor of dtype {arr.dtype}.",
    )


def _cast_float_checked(arr: np.ndarray, dtype: np.dtype[Any], tensor: str) -> np.ndarray:
    """Cast to a narrower float (or complex) dtype, refusing finite values that would become inf; inf
    and nan given as such stay what they are."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(dtype)
    overflow = np.isfinite(arr) & ~np.isfinite(out) if arr.dtype.kind in "fc" else ~np.isfinite(out)
    if overflow.any():
        bad = arr[overflow].flat[0]
        limit = np.finfo(dtype).max
        raise InvalidSampleError(
            tensor,
            f"value {bad} does not fit dtype {dtype} (largest finite magnitude {limit}); storing it "
            "would make it inf. Use a wider dtype for the tensor or clip the values.",
        )
    return out


def as_array(value: object, tensor: str) -> np.ndarray:
    """A sample's numbers as an array (a value with ``.numpy()``, a torch tensor, gives that).

    Raises:
        InvalidSampleError: not numbers, or not an array of one shape.
    """
    numpy_method = getattr(value, "numpy", None)
    if callable(numpy_method) and not isinstance(value, np.ndarray):
        value = numpy_method()
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InvalidSampleError(tensor, f"cannot make an array of {type(value).__name__} ({exc}).") from exc
    if arr.dtype.kind not in "biufc":
        raise InvalidSampleError(
            tensor,
            "expected numbers (a numpy array, list or scalar). "
            f"Got {type(value).__name__} with dtype {arr.dtype}.",
        )
    return arr


def check_finite(arr: np.ndarray, tensor: str, what: str) -> None:
    """Refuse nan and inf in float values."""
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = arr[~np.isfinite(arr)].flat[0]
        raise InvalidSampleError(tensor, f"{what} must be finite numbers. Got {bad}.")


def check_label_range(arr: np.ndarray, class_names: list[str], tensor: str) -> None:
    """Refuse a class index outside the tensor's class names (when it has them)."""
    if arr.size and class_names:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= len(class_names):
            bad = lo if lo < 0 else hi
            raise InvalidSampleError(
                tensor,
                f"class index {bad} is out of range for {len(class_names)} class_names {class_names!r}.",
            )
