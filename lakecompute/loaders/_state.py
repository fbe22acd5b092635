"""Where a loader is between passes, and its state as plain JSON (torch's stateful protocol).

A loader is used for many passes (epochs). `LoaderCursor` is the one home of the rules:

- every new pass starts the next epoch: its order is drawn from ``(seed, epoch)``; the first pass's
  epoch is ``epoch=``, ``set_epoch(e)`` sets the next pass's (the ``DistributedSampler`` convention);
- a pass starts at step 0, except the first one (``start_from_step``) and the one after
  ``load_state_dict`` (the step the state names); the pass after those starts the following epoch whole;
- ``rank`` and ``world_size`` left None are read from ``torch.distributed`` when a pass starts (late
  sharding: a loader built before the process group exists shards correctly once it does);
- ``state_dict()`` names the next batch (epoch and step), the options that define the plan, and what
  is read: the dataset's id, version and content digest and the view's selection (a ``random_split`` or
  ``filter`` view's positions, by digest); ``load_state_dict()`` checks them and moves the next pass
  there in O(1), as ``start_from_step`` does: skipped samples are never read.

``rank`` is recorded but not checked: every rank has as many steps, so a state saved on rank 0 (as
Lightning and Accelerate save it) resumes every rank at the same step.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.loaders._options import LoaderOptions
from lakecompute.loaders._plan import PLAN_OPTIONS, IndexPlan
from lakecompute.loaders._sources import RowSource, TokenSource
from lakecompute.parsing import parse_count

__all__ = ["STATE_FORMAT", "LoaderCursor", "Position", "describe_source"]

#: The ``format`` entry of every state: states of another format are refused.
STATE_FORMAT = "lakecompute.loader/1"


@dataclass(frozen=True, slots=True)
class Position:
    """The next batch of a loader: step ``step`` of epoch ``epoch``.

    Attributes:
        epoch: the epoch (its order is drawn from ``(seed, epoch)``).
        step: the step within it, ``0 <= step <= steps`` (``steps``: the epoch is over).
    """

    epoch: int
    step: int


def describe_source(source: RowSource | TokenSource) -> dict[str, Any]:
    """What a loader reads, as plain JSON: the dataset (location, id and version) and the samples read
    (the view's selection, see `lakecompute.datasets.Snapshot.selection`)."""
    snap = source.snapshot
    described: dict[str, Any] = {
        "url": snap.url,
        "dataset_id": snap.dataset_id,
        "version": snap.version,
        "digest": snap.digest,
        "length": source.length,
        "selection": snap.selection(),
    }
    if isinstance(source, TokenSource):
        described["blocks"] = {
            "tensor": source.tensor,
            "seq_len": source.seq_len,
            "next_token": source.next_token,
        }
    else:
        described["tensors"] = list(source.tensors)
    return described


def _torch_world() -> tuple[int, int] | None:
    """``(rank, world_size)`` of torch.distributed's process group, if one is initialised (torch is
    never imported here: a process that has not imported it has no process group)."""
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return int(dist.get_rank()), int(dist.get_world_size())


def _distributed(options: LoaderOptions) -> LoaderOptions:
    """``options`` with a None ``rank`` or ``world_size`` filled in: torch.distributed's when it is
    initialised, else 0 and 1."""
    if options.rank is not None and options.world_size is not None:
        return options
    rank, world_size = _torch_world() or (0, 1)
    return replace(
        options,
        rank=rank if options.rank is None else options.rank,
        world_size=world_size if options.world_size is None else options.world_size,
    )


# Options added after states were first saved: a state records one only when it is not its default, so
# states keep their form, and a state without it was saved with the default.
_SAVED_BEFORE = {"shuffle_block": 0}


def _differences(
    saved: Mapping[str, Any], current: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> list[str]:
    """What ``saved`` says otherwise than ``current``; ``defaults``: what an entry left out means."""
    defaults = defaults or {}
    current = {**defaults, **current}
    return [
        f"{key}={saved.get(key, defaults.get(key))!r} (this loader: {value!r})"
        for key, value in current.items()
        if saved.get(key, defaults.get(key)) != value
    ]


class LoaderCursor:
    """The passes of one loader: which epoch and step the next one starts at, where the current one is.

    Attributes:
        source: what the loader reads.
        options: the loader's options as given (``rank``/``world_size`` may be None).
    """

    def __init__(self, source: RowSource | TokenSource, options: LoaderOptions) -> None:
        self.source = source
        self.options = options
        self._next = Position(options.epoch, options.start_from_step)
        self._plan: IndexPlan | None = None
        self._step = 0
        self._described: dict[str, Any] | None = None
        self.plan()  # refuse bad options now (rank >= world_size, start_from_step past the end)

    def resolved(self) -> LoaderOptions:
        """The options with ``rank`` and ``world_size`` as they are now (`_distributed`)."""
        return _distributed(self.options)

    def plan(self, position: Position | None = None) -> IndexPlan:
        """The plan of a pass from ``position`` (default: where the next pass starts), sharded as now."""
        at = position or self._next
        options = replace(self.resolved(), epoch=at.epoch, start_from_step=at.step)
        return options.plan(self.source.length)

    @property
    def steps(self) -> int:
        """Steps (batches) of a full epoch for this rank."""
        return self.plan(Position(0, 0)).steps

    def begin(self) -> IndexPlan:
        """Start a pass: its plan; the pass after it starts the following epoch at step 0."""
        plan = self.plan()
        self._plan, self._step = plan, plan.start_from_step
        self._next = Position(plan.epoch + 1, 0)
        return plan

    def advance(self) -> None:
        """The consumer took the current pass's next batch."""
        self._step += 1

    def end(self) -> None:
        """The current pass is over (exhausted or closed)."""
        self._plan = None

    @property
    def position(self) -> Position:
        """The next batch: in the current pass if it has one left, else the first of the next pass."""
        if self._plan is not None and self._step < self._plan.steps:
            return Position(self._plan.epoch, self._step)
        return self._next

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch``, from step 0 (unless it is already that epoch's resume)."""
        epoch = parse_count("epoch", epoch, 0)
        if epoch != self._next.epoch:
            self._next = Position(epoch, 0)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state as plain JSON (see the module docstring)."""
        options = self.resolved()
        at = self.position
        return {
            "format": STATE_FORMAT,
            "epoch": at.epoch,
            "step": at.step,
            "rank": options.rank,
            "options": {
                name: getattr(options, name)
                for name in PLAN_OPTIONS
                if name not in _SAVED_BEFORE or getattr(options, name) != _SAVED_BEFORE[name]
            },
            "dataset": dict(self.described()),
        }

    def described(self) -> dict[str, Any]:
        """`describe_source` of the source, made once (a selection's digest hashes its positions)."""
        if self._described is None:
            self._described = describe_source(self.source)
        return self._described

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next pass continue where ``state`` says, after checking it fits this loader.

        Raises:
            InvalidTypeError: ``state`` is not a loader state.
            InvalidArgumentError: it was saved with other plan options or another dataset version.
        """
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise InvalidTypeError(
                f"Expected a loader state (a dict from loader.state_dict(), format {STATE_FORMAT!r}). "
                f"Got {type(state).__name__}: {state!r:.120}."
            )
        current = self.state_dict()
        self._check(state, current)
        epoch, step = parse_count("epoch", state.get("epoch"), 0), parse_count("step", state.get("step"), 0)
        position = Position(epoch, step)
        steps = self.plan(Position(position.epoch, 0)).steps
        if position.step > steps:
            raise InvalidArgumentError(
                f"The state's step {position.step} is past the end of the epoch ({steps} steps). "
                "Pass a state saved by a loader with these options."
            )
        self._next = position if position.step < steps else Position(position.epoch + 1, 0)
        self._plan = None

    @staticmethod
    def _check(state: Mapping[str, Any], current: Mapping[str, Any]) -> None:
        for part, what in (("options", "other options"), ("dataset", "another dataset version or selection")):
            saved = state.get(part)
            if not isinstance(saved, Mapping):
                raise InvalidTypeError(
                    f"This loader state has no {part!r} entry. Pass a dict from loader.state_dict()."
                )
            mine = dict(current[part])
            defaults: Mapping[str, Any] = _SAVED_BEFORE
            if part == "dataset":
                mine.pop("url")  # a dataset copied or moved is still the same version
                defaults = {"digest": mine["digest"]}  # a state saved before digests: by id and version
            diffs = _differences(saved, mine, defaults)
            if diffs:
                raise InvalidArgumentError(
                    f"This loader state was saved with {what}: {', '.join(diffs)}. Resuming would "
                    "yield other batches than the interrupted run. Build the loader as it was built when "
                    "the state was saved (same dataset, version, selection of samples and options), or "
                    "start a new run without it."
                )
