"""One tensor's type rules: the rank, dtype and class names its samples are checked against and decided by.

Every writer goes through `TensorSchema`: a dataset handle's append and extend (through `WriteSession`),
an eval's preflight (`OutputSchema.decide`) and its workers (`TaskWriter`), fragments applied to a
transaction's head, and the dtype a generic tensor gets at commit. Each failure has one message, here.
Storage below records the rank and dtype it is given and decides nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.htypes import Encoded, TensorRules, TensorSpec, encode_batch, encode_ragged, encode_sample
from lakecompute.versioned import Fragment, TensorState

__all__ = ["TensorSchema"]


@dataclass(frozen=True, slots=True)
class TensorSchema:
    """What every sample of one tensor is checked against, and the decisions its samples make.

    Attributes:
        spec: the tensor's spec; a generic tensor's dtype is None until its first commit decides it.
        ndim: the samples' rank once decided, else None (the first samples decide it).
        class_names: for class-named tensors, the names a string label maps to (and an index ranges over).
        info: the rest of the tensor's info that samples are checked against (a bbox tensor's
            ``format`` and ``normalized``, a keypoints tensor's ``keypoint_names``).
    """

    spec: TensorSpec
    ndim: int | None
    class_names: tuple[str, ...] = ()
    info: tuple[tuple[str, Any], ...] = ()
    # The same, as the codecs take them (built once, not per sample).
    _rules: TensorRules = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rules", TensorRules(self.spec, list(self.class_names), dict(self.info)))

    @classmethod
    def of(cls, state: TensorState, *, rank: bool = True) -> TensorSchema:
        """The schema of a tensor as a version (or a transaction's head) holds it; without its rank
        when ``rank`` is False (an eval that rewrites the tensor decides it again)."""
        return cls(
            state.spec,
            state.ndim if rank else None,
            tuple(state.info.get("class_names") or ()),
            tuple((k, v) for k, v in state.info.items() if k in state.spec.declaration.checked_info),
        )

    @property
    def name(self) -> str:
        return self.spec.name

    def with_rank(self, ndim: int | None) -> TensorSchema:
        """This schema with the rank decided (unchanged when it already is, or ``ndim`` is None)."""
        if self.ndim is not None or ndim is None:
            return self
        return replace(self, ndim=ndim)

    # -- samples ---------------------------------------------------------------------------------
    def encode(self, value: object, first: int | None = None) -> Encoded:
        """Check one sample and encode it for storage.

        Args:
            value: the sample.
            first: when the rank is not decided yet, the rank of an earlier sample of the same call,
                which this one must share.

        Raises:
            InvalidSampleError: the value cannot be stored in this tensor (dtype, rank, label, ...).
        """
        enc = encode_sample(self._rules, value)
        self.check_rank(len(enc.shape), first)
        return enc

    def encode_block(self, values: np.ndarray) -> np.ndarray | None:
        """Check samples stacked on axis 0 in one go (None when the fast path does not apply)."""
        block = encode_batch(self._rules, values)
        if block is not None:
            self.check_rank(block.ndim - 1)
        return block

    def encode_ragged(self, values: list[Any]) -> list[Encoded] | None:
        """Check arrays whose first dimension varies (an image's boxes, say) in one go: what `encode`
        gives for each, or None when the fast path does not apply or any value (or its rank) would be
        refused, so that `encode` on each raises the error that names it."""
        encoded = encode_ragged(self._rules, values)
        if encoded is None or (self.ndim is not None and len(encoded[0].shape) != self.ndim):
            return None
        return encoded

    def check_rank(self, got: int, first: int | None = None) -> None:
        """Refuse a sample (or a run) of rank ``got`` unless it has the tensor's rank (or, while that is
        not decided, the rank ``first`` of the call's first sample)."""
        expected = self.ndim if self.ndim is not None else first
        if expected is not None and got != expected:
            raise InvalidSampleError(
                self.name,
                f"every sample of a tensor has the same number of dimensions: expected {expected}, "
                f"got {got}.",
            )

    def decide_rank(self, ranks: Iterable[int]) -> int:
        """The one rank of samples checked together (the first outputs of an eval)."""
        first: int | None = None
        for rank in ranks:
            self.check_rank(rank, first)
            first = rank if first is None else first
        assert first is not None, "deciding a rank needs samples"
        return first if self.ndim is None else self.ndim

    # -- stored runs -----------------------------------------------------------------------------
    def run_dtype(self, dtypes: Iterable[np.dtype[Any]]) -> str:
        """The dtype a run of checked samples is stored in: the tensor's, or for a generic tensor whose
        dtype is not decided yet, the smallest that holds all of ``dtypes`` (numpy's ``result_type``)."""
        if self.spec.dtype is not None:
            return self.spec.dtype
        return str(np.result_type(*dtypes).name)

    def check_fragment(self, frag: Fragment) -> None:
        """Refuse a written run that does not fit the tensor: another rank, or values its decided dtype
        cannot hold (read back, they would be silently cast: a float run into a tensor decided as int)."""
        self.check_rank(frag.ndim)
        decided = self.spec.dtype
        if decided is None or self.spec.kind != "array" or frag.dtype == decided:
            return
        if not np.can_cast(np.dtype(frag.dtype), np.dtype(decided), "same_kind"):
            raise InvalidSampleError(
                self.name,
                f"the tensor's dtype is {decided} (decided from its first samples), but these samples are "
                f"{frag.dtype}; storing them would change their values. Convert them, or create the "
                f"tensor with dtype={frag.dtype!r}.",
            )

    def decided_spec(self, fragments: Iterable[Fragment]) -> TensorSpec:
        """The spec a commit records: a generic tensor's dtype is decided once, at its first commit that
        holds data, as the smallest that holds every run written to it; any other spec is unchanged."""
        if self.spec.dtype is not None:
            return self.spec
        dtypes = {np.dtype(f.dtype) for f in fragments}
        if not dtypes:
            return self.spec
        return replace(self.spec, dtype=np.result_type(*dtypes).name)

    def reopened_spec(self) -> TensorSpec:
        """The spec with the dtype open again (an eval whose data decides it keeps it open to its end)."""
        return replace(self.spec, dtype=None)
