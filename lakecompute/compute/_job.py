"""What a task is and what it sends back, fixed before the first task starts: the job every task of an
eval shares (`Job`), a task (`Task`) and what the preflight decided for the later ones (`Decided`), a
task's result (`TaskResult`) or the failure it stopped at (`TaskFailure`, made portable across processes
by `task_failure`); and the per-worker state (the stages, with class-based functions instantiated) that is
built once per worker and eval (`stages_for`, dropped by `forget_job`).
"""

from __future__ import annotations

import os
import pickle
import threading
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakecompute.compute._inputs import Source
from lakecompute.compute._runner import (
    Stage,
    StageFailure,
    build_stages,
)
from lakecompute.compute._samples import SAMPLE_ROWS
from lakecompute.datasets import (
    Decisions,
    FailedSample,
    OutputSchema,
    SlotGrant,
    written_in_place,
)
from lakecompute.perprocess import PerProcess
from lakecompute.schedulers import portable_exception, reseed_globals

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline
    from lakecompute.compute._options import EvalOptions
    from lakecompute.versioned import Fragment

__all__ = [
    "PREFLIGHT_SCAN",
    "Decided",
    "Job",
    "Task",
    "TaskFailure",
    "TaskResult",
    "TaskStop",
    "decide_outputs",
    "forget_job",
    "stages_for",
    "task_failure",
]

#: Samples the preflight tries, at most, to find one whose outputs decide ranks and dtypes (it goes on
#: past the first only when that one failed under ``ignore_errors`` or wrote nothing).
PREFLIGHT_SCAN = 64


@dataclass(frozen=True, slots=True)
class Task:
    """A range of inputs for one worker.

    Attributes:
        number: the task's place in input order (-1 for the preflight).
        start, stop: the inputs ``data_in[start:stop]``.
        items: those inputs themselves, for streamed (length-less) input only.
        decided: the decided output schema to check outputs against (None for the preflight, which
            makes the decisions).
        warm: a warm-up: only build this worker's stages (a class-based function's ``__init__``) and
            open its input (`Source.warm`), so that every worker loads its model and opens the arrays
            it reads while the first one runs the preflight.
    """

    number: int
    start: int
    stop: int
    items: list[Any] | None = None
    decided: Decided | None = None
    warm: bool = False

    @property
    def preflight(self) -> bool:
        return self.decided is None and not self.warm

    def describe(self) -> str:
        return f"{self.number} (data_in[{self.start}:{self.stop}])"  # read as "task 3 (data_in[a:b])"

    def __repr__(self) -> str:
        return f"Task({self.number}, data_in[{self.start}:{self.stop}])"


@dataclass(frozen=True, slots=True)
class Decided:
    """What the preflight's outputs decided, carried by every later task.

    Attributes:
        schema: the output schema with ranks decided.
        expected: per output tensor, the values one input writes in the common case (1 for the tensors
            the first input wrote, 0 for the others); an input that writes otherwise is checked.
        aligned: every input must write exactly ``expected`` (in place, with tensors kept).
        block: inputs read and processed at once (bounds a worker's memory; see `block_size`).
        read: the input tensors the preflight's functions read (dataset input), which every task reads
            ahead with each block; the others are read only if a function asks for them. None: unknown.
    """

    schema: OutputSchema
    expected: tuple[int, ...]
    aligned: bool
    block: int = 1
    read: tuple[str, ...] | None = None


def decide_outputs(job: Job, decisions: Decisions, block: int) -> Decided:
    """What the preflight's ``decisions`` mean for every task (the preflight's own included): the decided
    schema, the values one input writes per tensor in the common case, whether outputs must stay
    aligned (in place, with kept tensors that hold rows), and ``block``, the inputs a task reads at
    once (sized from the first input, which only the preflight reads)."""
    schema = job.schema.decided(decisions)
    names = schema.names
    written = decisions.written or names
    aligned = False
    if job.in_place:
        replaced = written_in_place(names, decisions, replace_all=not job.options.skip_ok)
        aligned = any(job.lengths.get(n, 0) for n in names if n not in replaced)
        written = replaced if aligned else written
    return Decided(schema, tuple(int(name in written) for name in names), aligned, block)


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """The sample a task stopped at: user code failed on it (or wrote what cannot be stored).

    Attributes:
        index: the sample's position in ``data_in``.
        function: the compute function to blame.
        exc: the exception (a `RemoteError` standing in for one that cannot cross processes).
        traceback: the exception's traceback, formatted where it was raised.
        where: the innermost frame of that traceback in the user's code (two indented lines), or "".
        step: the pipeline step that failed (its position), or None when no step is to blame.
        step_input: what a later step (not the first) was given, as a dict of tensor -> value; None for
            the first step (its input is the sample, read again in the caller) or when it cannot travel.
    """

    index: int
    function: str
    exc: BaseException
    traceback: str
    where: str = ""
    step: int | None = None
    step_input: Any = None


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What a task sends back: fragment descriptions and counts, never sample data."""

    number: int
    start: int
    stop: int
    fragments: Mapping[str, Sequence[Fragment]]
    counts: Mapping[str, int]
    failed: tuple[FailedSample, ...]
    failure: TaskFailure | None = None
    decisions: Decisions | None = None  # the preflight's
    block: int = 0  # the preflight's: inputs per block, from the first input (see `block_size`)
    read: tuple[str, ...] | None = None  # the preflight's: the input tensors its functions read
    stages: Mapping[str, float] = field(default_factory=dict)  # seconds per stage (see _overlap.Stages)


@dataclass(frozen=True, slots=True)
class Job:
    """Everything a worker needs, fixed once before the first task starts.

    Attributes:
        token: identifies the eval (per-worker state is kept per eval).
        pipeline: the functions to run.
        source: where the inputs come from.
        grant: where the outputs go.
        schema: the output schema before any decision (the preflight decides ranks from it).
        options: the eval's options, whole; their ``seed`` is the one the plan resolved (never None).
        parent_pid: the process that planned the eval (workers elsewhere reseed global generators).
        in_place: whether the eval writes into the dataset it reads.
        lengths: in place, the lengths of ``data_out``'s tensors before the eval (which of the kept
            tensors hold rows decides whether outputs must stay aligned, see `decide_outputs`).
    """

    token: str
    pipeline: Pipeline
    source: Source
    grant: SlotGrant
    schema: OutputSchema
    options: EvalOptions
    parent_pid: int
    in_place: bool = False
    lengths: Mapping[str, int] = field(default_factory=dict)

    @property
    def seed(self) -> int:
        """The seed of the functions' ``rng`` generators (resolved by the plan)."""
        assert self.options.seed is not None, "the plan resolves the seed before a job is made"
        return self.options.seed


# -- per-worker state --------------------------------------------------------------------------------


class _WorkerStates:
    """This process's stages (built functions), by eval and thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stages: dict[tuple[str, int], list[Stage]] = {}


#: Per process: a forked worker never sees the parent's built functions.
_WORKERS = PerProcess(_WorkerStates)


def stages_for(token: str, pipeline: Pipeline, parent_pid: int) -> list[Stage]:
    """This worker's stages for eval ``token``: built (class-based functions instantiated) once."""
    workers = _WORKERS.get()
    key = (token, threading.get_ident())
    stages = workers.stages.get(key)
    if stages is None:
        with workers.lock:
            # A worker that outlives its eval (a Ray worker, a thread of a long-lived process) would
            # otherwise keep every earlier eval's state — models included — alive.
            for old in [k for k in workers.stages if k[1] == key[1]]:
                del workers.stages[old]
            if os.getpid() != parent_pid:
                # The processed scheduler's workers did at start; a Ray worker has not.
                reseed_globals()
        # Built outside the lock: the key is this thread's own, and the threads of one process load
        # their models at the same time (a lock here would make them take turns).
        stages = build_stages(pipeline)
        with workers.lock:
            workers.stages[key] = stages
    return stages


def forget_job(token: str) -> None:
    """Drop this process's per-worker state of a finished eval (its instances)."""
    workers = _WORKERS.get()
    with workers.lock:
        for key in [k for k in workers.stages if k[0] == token]:
            del workers.stages[key]


def task_failure(
    index: int, function: str, exc: BaseException, parent_pid: int, failure: StageFailure | None = None
) -> TaskFailure:
    """The failure of ``data_in[index]``; its exception (and a later step's input) made portable when
    they must cross processes."""
    text = "".join(traceback.format_exception(exc))
    here = os.getpid() == parent_pid
    portable = exc if here else portable_exception(exc, text)
    step = failure.step if failure is not None else None
    step_input = None
    if failure is not None and step:  # the first step's input is the sample: the caller reads it again
        step_input = failure.step_input
        step_input = step_input.to_dict() if isinstance(step_input, SAMPLE_ROWS) else step_input
        step_input = step_input if here or _travels(step_input) else None
    return TaskFailure(index, function, portable, text, _user_frame(exc), step, step_input)


def _travels(value: Any) -> bool:
    """Whether ``value`` can be sent back to the caller's process."""
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_frame(exc: BaseException) -> str:
    """Where in the user's code ``exc`` was raised: its innermost frame outside lakecompute."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_PACKAGE)]
    if not frames:
        return ""
    frame = frames[-1]
    code = f"\n    {frame.line}" if frame.line else ""
    return f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}{code}\n'


class TaskStop(Exception):
    """Ends a task at its first failing sample (carried in its result, see TaskFailure)."""

    def __init__(self, failure: TaskFailure) -> None:
        super().__init__(failure.index)
        self.failure = failure
