"""Every error lakecompute raises.

Each class derives from `LakeComputeError` and from the builtin it is nearest to, so
``except ValueError`` keeps working for code that does not know lakecompute. Messages say what
is wrong (expected vs got) and then what to do. `__all__` names them all, and the facade exports
exactly that list; `warn` is the package's helper for `LakeComputeWarning`, not part of it.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

__all__ = [
    "CommitConflictError",
    "DatasetCorruptError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "DatasetReplacedError",
    "EvalConflictError",
    "ExpressionError",
    "FingerprintError",
    "ForkInTaskError",
    "InvalidArgumentError",
    "InvalidSampleError",
    "InvalidTypeError",
    "LakeComputeError",
    "LakeComputeWarning",
    "LeaseExpiredError",
    "MergeConflictError",
    "RaggedShapeError",
    "ReadOnlyError",
    "RefExistsError",
    "RefNotFoundError",
    "RemoteError",
    "SampleIndexError",
    "StorageError",
    "TensorDoesNotExistError",
    "TensorExistsError",
    "TransformError",
    "UnpicklableTaskError",
    "WorkerDiedError",
]


class LakeComputeError(Exception):
    """Raised for every failure lakecompute detects; the base of all its errors."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other constructor arguments than their ``args`` (a tensor name, a path...),
        # so the default pickling, which calls ``cls(*args)``, fails to unpickle them. Rebuild without
        # calling __init__, so they cross process boundaries as themselves, attributes included.
        return (_restore_error, (type(self), self.args, dict(self.__dict__)))


def _restore_error(
    cls: type[LakeComputeError], args: tuple[Any, ...], state: dict[str, Any]
) -> LakeComputeError:
    """Unpickle a `LakeComputeError` (see ``LakeComputeError.__reduce__``)."""
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class LakeComputeWarning(UserWarning):
    """Warned when lakecompute falls back to a slower or weaker behaviour instead of raising."""


def warn(message: str) -> None:
    """Warn with a `LakeComputeWarning` pointing at the user's code (the first frame outside lakecompute)."""
    frame = inspect.currentframe()
    level = 1
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("lakecompute"):
        frame = frame.f_back
        level += 1
    warnings.warn(message, LakeComputeWarning, stacklevel=level)


class InvalidArgumentError(LakeComputeError, ValueError):
    """Raised when an argument has an unusable value (an unknown htype, a bad tensor name, ...)."""


class ExpressionError(InvalidArgumentError):
    """Raised when an expression (``lc.col(...)``, ``lc.expr(text)``, ``ds.filter(text)``) cannot be parsed,
    or does not fit the tensors it names (an unknown tensor or class name, values compared with a type
    they do not compare with).

    Attributes:
        text: the expression's text: as given to ``lc.expr``, else ``str(expr)``.
        position: where in ``text`` the problem is (0-based character offset), or None where it is the
            expression as a whole.
        detail: what is wrong, without the position.
    """

    def __init__(self, detail: str, text: str = "", position: int | None = None) -> None:
        detail = detail.rstrip(".")
        self.detail = detail
        self.text = text
        self.position = position
        if position is None:
            where = f" (in {_quoted(text)})" if text else ""
            super().__init__(f"Expression error: {detail}{where}.")
        else:
            super().__init__(
                f"Expression error at position {position}: {detail} (in {_quoted(text)}, here: "
                f"{_quoted(text[position : position + 24], 24)})."
            )


def _quoted(text: str, limit: int = 120) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


class InvalidTypeError(LakeComputeError, TypeError):
    """Raised when an argument has the wrong type."""


class DatasetExistsError(LakeComputeError, FileExistsError):
    """Raised when creating a dataset where one already exists and ``overwrite`` is False."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"A dataset already exists at {path!r}. "
            "Pass overwrite=True to replace it, or use lc.load() to open it."
        )


class DatasetNotFoundError(LakeComputeError, FileNotFoundError):
    """Raised when opening a path that holds no dataset (or a version that does not exist)."""

    def __init__(self, path: str, detail: str = "", hint: str | None = None) -> None:
        self.path = path
        extra = f" {detail}" if detail else ""
        tail = "Create one with lc.empty(path) or lc.dataset(path)." if hint is None else hint
        super().__init__(f"No lakecompute dataset at {path!r}.{extra} {tail}")


class DatasetReplacedError(DatasetNotFoundError):
    """Raised when the dataset something refers to (a pickled handle, a view, a loader state, a handle
    being reloaded) is no longer at its path: the path was overwritten, or deleted and created again, and
    holds another dataset (another ``ds.id``) whose version numbers would otherwise be taken for its own;
    or the folder was replaced by a copy of the dataset (the same id) whose history diverged, so that the
    version referred to holds other content there (another content digest).

    Attributes:
        path: the location.
        expected_id: the id of the dataset referred to.
        found_id: the id of the dataset there now.
        expected_digest: the content digest of the version referred to ("" when the ids differ).
        found_digest: the content digest of that version there now ("" when the ids differ).
    """

    def __init__(
        self,
        path: str,
        expected_id: str,
        found_id: str,
        what: str = "this handle",
        *,
        version: int | None = None,
        expected_digest: str = "",
        found_digest: str = "",
    ) -> None:
        self.path = path
        self.expected_id = expected_id
        self.found_id = found_id
        self.expected_digest = expected_digest
        self.found_digest = found_digest
        if expected_digest:
            why = (
                f"its version {version} holds other content there (content digest {found_digest[:16]}..., "
                f"expected {expected_digest[:16]}...): the folder was replaced by a copy of the dataset "
                "whose history diverged from it"
            )
        else:
            why = (
                f"expected dataset id {expected_id!r}, found {found_id!r} (the path was overwritten, or "
                "deleted and created again)"
            )
        LakeComputeError.__init__(
            self,
            f"The dataset at {path!r} is not the one {what} refers to: {why}. Open the dataset there now "
            "with lc.load(path).",
        )


class DatasetCorruptError(LakeComputeError):
    """Raised when stored data is missing, damaged or refused: a version manifest that breaks the
    format, a missing or corrupt chunk, a damaged array metadata file, data a vacuum removed.

    Attributes:
        path: the dataset.
        file: the storage key that could not be read (``versions/0000000003.json``,
            ``segments/<id>/data/c/7``, ...).
        reason: what is wrong with it.
        field: for a manifest, the field that breaks the format (``tensors.x.fragments[0].k``), else None.
        tensor: the tensor being read when the damage was found, else None.
        samples: the ``(start, stop)`` sample range being read, else None.
        vacuumed: True when the data is gone because ``vacuum()`` removed the version that needed it.
    """

    def __init__(
        self,
        path: str,
        file: str,
        reason: str,
        hint: str = "",
        *,
        field: str | None = None,
        tensor: str | None = None,
        samples: tuple[int, int] | None = None,
        vacuumed: bool = False,
    ) -> None:
        self.path = path
        self.file = file
        self.reason = reason
        self.field = field
        self.tensor = tensor
        self.samples = samples
        self.vacuumed = vacuumed
        where = []
        if tensor is not None:
            where.append(f"tensor {tensor!r}")
        if samples is not None:
            where.append(f"samples [{samples[0]}:{samples[1]}]")
        if field:
            where.append(f"field {field}")
        detail = f"{', '.join(where)}: {reason}" if where else reason
        tail = f" {hint}" if hint else ""
        super().__init__(f"Dataset {path!r} is damaged: cannot read {file!r} ({detail}).{tail}")


class TensorDoesNotExistError(LakeComputeError, KeyError):
    """Raised when a tensor name is not in the dataset."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = list(known)
        super().__init__(
            f"Tensor {name!r} does not exist. Known tensors: {sorted(self.known)!r}. "
            "Create it with ds.create_tensor(name, ...)."
        )

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the message; show it as written.
        return str(self.args[0])


class TensorExistsError(LakeComputeError, ValueError):
    """Raised when creating a tensor whose name is already taken."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"Tensor {name!r} already exists. Choose another name, or use ds[{name!r}] to write to it."
        )


class InvalidSampleError(LakeComputeError, ValueError):
    """Raised when a sample cannot be stored in a tensor (wrong dtype, rank, label, ...).

    Attributes:
        tensor: the tensor the sample was meant for ("" while it is not known yet: a file read by
            `lakecompute.read` that does not decode, before it is written anywhere).
        detail: what is wrong, without the tensor's name.
        source: the input file (and entry) the message names the sample by: an annotations file, a label
            file and line, the image file; "" when the message names none (an ingest then names the
            sample's file).
    """

    def __init__(self, tensor: str, message: str, source: str = "") -> None:
        self.tensor = tensor
        self.detail = message
        self.source = source
        where = f"in tensor {tensor!r}" if tensor else ""
        super().__init__(
            f"Cannot store sample {where}: {message}" if where else f"Cannot use sample: {message}"
        )


class RaggedShapeError(LakeComputeError, ValueError):
    """Raised when samples of different shapes are asked for as one stacked array."""


class ReadOnlyError(LakeComputeError, PermissionError):
    """Raised when writing to a read-only dataset, an old version, or a view."""


class SampleIndexError(LakeComputeError, IndexError):
    """Raised when an index is past the end of a tensor or dataset."""


class CommitConflictError(LakeComputeError, RuntimeError):
    """Raised when another writer committed a version of the dataset first.

    Attributes:
        path: the dataset.
        expected: the version this writer started from.
        found: the version another writer committed.
    """

    def __init__(self, path: str, expected: int, found: int) -> None:
        self.path = path
        self.expected = expected
        self.found = found
        super().__init__(
            f"Dataset {path!r} was changed by another writer: this writer started from version "
            f"{expected} but version {found} exists now. Nothing of this write was committed; "
            "reload the dataset with lc.load() and run the write again."
        )


class RefNotFoundError(LakeComputeError, KeyError):
    """Raised when a branch or tag name is not in the dataset (``checkout``, ``lc.load(branch=...)``,
    ``lc.load(version="v1.0")``, ``diff``, ``merge``, ``restore``, ``delete_branch``).

    Attributes:
        path: the dataset.
        name: the name asked for.
        kind: what was looked for: ``"branch"``, ``"tag"`` or ``"branch or tag"``.
        known: the names there are of that kind.
    """

    def __init__(self, path: str, name: str, kind: str, known: list[str], detail: str = "") -> None:
        self.path = path
        self.name = name
        self.kind = kind
        self.known = list(known)
        hint = detail or (
            f"Create it with ds.checkout({name!r}, create=True)."
            if kind == "branch"
            else "ds.branches and ds.tags list them; ds.log() lists the versions."
        )
        super().__init__(f"Dataset {path!r} has no {kind} {name!r} (it has {self.known!r}). {hint}")

    def __str__(self) -> str:
        return str(self.args[0])  # KeyError.__str__ would repr() the message


class RefExistsError(LakeComputeError, ValueError):
    """Raised when creating a branch or tag under a name a branch or tag already has.

    Attributes:
        path: the dataset.
        name: the name.
        kind: what has it: ``"branch"`` or ``"tag"``.
    """

    def __init__(self, path: str, name: str, kind: str) -> None:
        self.path = path
        self.name = name
        self.kind = kind
        todo = (
            f"Switch to it with ds.checkout({name!r}), or choose another name."
            if kind == "branch"
            else "Tags never move: choose another name, or ds.delete_tag(name) first."
        )
        super().__init__(f"Dataset {path!r} already has a {kind} named {name!r}. {todo}")


class MergeConflictError(LakeComputeError, RuntimeError):
    """Raised when a merge finds changes on both sides to the same rows or tensors; nothing is committed.

    Attributes:
        path: the dataset.
        source: what was being merged (a branch, tag or version).
        rows: per tensor, the ``(start, stop)`` row ranges (of the common ancestor) both sides changed.
        tensors: tensor-level conflicts, as sentences (a tensor deleted on one side and written on the
            other, created on both, given different specs or info; the dataset's info changed on both).
    """

    def __init__(
        self, path: str, source: str, rows: dict[str, list[tuple[int, int]]], tensors: list[str]
    ) -> None:
        self.path = path
        self.source = source
        self.rows = {name: list(ranges) for name, ranges in rows.items()}
        self.tensors = list(tensors)
        parts = [
            f"tensor {name!r} rows {', '.join(f'{a}:{b}' for a, b in ranges[:5])}"
            + (f" and {len(ranges) - 5} more ranges" if len(ranges) > 5 else "")
            for name, ranges in self.rows.items()
        ]
        parts += self.tensors
        super().__init__(
            f"Cannot merge {source!r} into {path!r}: both sides changed {'; '.join(parts)}. Nothing was "
            "committed. Pass conflict_resolution='ours' to keep this branch's changes there, or 'theirs' "
            "to take the merged branch's."
        )


class LeaseExpiredError(LakeComputeError, RuntimeError):
    """Raised at commit when this writer's lease on its uncommitted data lapsed (it was not renewed in time,
    for example because the process was paused), so ``vacuum()`` on any machine may have removed that data.

    Nothing of the write is committed.

    Attributes:
        path: the dataset.
        seconds: how long the lease went without renewal.
    """

    def __init__(self, path: str, seconds: float, limit: float) -> None:
        self.path = path
        self.seconds = seconds
        super().__init__(
            f"Cannot commit to {path!r}: this writer's lease on its uncommitted data was not renewed for "
            f"{seconds:.0f} s (at most {limit:.0f} s keep it valid), so vacuum() may have removed that data. "
            "Nothing of this write was committed; reload the dataset with lc.load() and run the write again."
        )


class FingerprintError(LakeComputeError, TypeError):
    """Raised when an eval cannot be fingerprinted for checkpointing (an argument with no stable identity)."""


class WorkerDiedError(LakeComputeError, RuntimeError):
    """Raised when a worker process dies (killed, segfault, out of memory) while running a task, or
    fails while starting (then its own exception, if it could send one, is ``__cause__``).

    Attributes:
        task: a description of the task the worker was running (its input range), or None.
        exitcode: the worker's exit code (negative: the signal that killed it), or None.
    """

    def __init__(self, message: str, task: Any = None, exitcode: int | None = None) -> None:
        self.task = task
        self.exitcode = exitcode
        super().__init__(message)


class UnpicklableTaskError(InvalidArgumentError):
    """Raised when a task cannot be sent to a worker process because it cannot be pickled.

    Raised in the calling process before the task is queued, so the run stops at once rather than
    waiting for a task that never arrives. The pickling error is ``__cause__``.

    Attributes:
        task: the task that could not be pickled.
        position: its position among the run's tasks.
    """

    def __init__(self, message: str, task: Any, position: int) -> None:
        self.task = task
        self.position = position
        super().__init__(message)


class ForkInTaskError(LakeComputeError, RuntimeError):
    """Raised when a task forked its process (``os.fork()`` in user code) and the child process carried
    on with the task (called ``progress`` or returned from the task function) instead of ending.

    The child is stopped there, before it runs any more of the scheduler's code, so it never reports a
    result twice or keeps a copy of the run going.

    Attributes:
        task: the task that forked.
        pid: the process id of the child that returned.
    """

    def __init__(self, message: str, task: Any, pid: int) -> None:
        self.task = task
        self.pid = pid
        super().__init__(message)


class RemoteError(LakeComputeError):
    """Stands in for an exception from a worker that could not be sent back as itself.

    Attributes:
        type_name: the qualified name of the original exception type.
        message: ``str()`` of the original exception.
        traceback_text: the formatted traceback from the worker.
    """

    def __init__(self, type_name: str, message: str, traceback_text: str) -> None:
        self.type_name = type_name
        self.message = message
        self.traceback_text = traceback_text
        super().__init__(f"{type_name}: {message}\n\nTraceback in the worker:\n{traceback_text}")


class TransformError(LakeComputeError):
    """Raised when user code inside a transform fails on a sample.

    The original exception is ``__cause__``.

    Attributes:
        index: the position of the failing sample in ``data_in`` (``data_in[index]``).
        row: for dataset input (a view included), the dataset row that sample was read from
            (``ds[row]``); equal to ``index`` over a whole dataset, not over a view (``ds[100:200]``:
            index 5 is row 105). None for input that is not a dataset.
        sample: the failing input sample (``None`` if it could not be brought back from a worker).
        function: the name of the compute function that failed.
        step: the failing step of the pipeline, ``(position, name)`` (``(0, name)`` for a single
            function); None when no step is to blame.
        step_input: the ``sample_in`` that step saw: the input sample for the first step, a row (a dict
            of tensor name -> value) that the step before wrote for a later one (None if it could not be
            brought back from a worker process).
    """

    def __init__(
        self,
        message: str,
        index: int | None,
        sample: Any,
        function: str | None,
        step: tuple[int, str] | None = None,
        step_input: Any = None,
        row: int | None = None,
    ) -> None:
        self.index = index
        self.row = row
        self.sample = sample
        self.function = function
        self.step = step
        self.step_input = step_input
        super().__init__(message)


class StorageError(LakeComputeError, OSError):
    """Raised when a dataset's storage cannot be used: an endpoint that does not answer, a missing
    bucket, missing or refused credentials.

    Attributes:
        url: the dataset location.
        reason: what is wrong: ``"unreachable"``, ``"bucket"``, ``"credentials"``, ``"fork"`` (a client
            used in a forked child) or ``"other"``.
    """

    def __init__(self, message: str, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(message)

    def __str__(self) -> str:
        # OSError.__str__ would show "[Errno ...]" forms for some argument counts; show the message.
        return str(self.args[0])


class EvalConflictError(LakeComputeError, RuntimeError):
    """Raised when an eval cannot write into a ``data_out`` that holds the kept outputs of an unfinished
    eval: another eval would append after them, or the unfinished eval's output changed since.

    Attributes:
        path: the output dataset.
        done: inputs the unfinished eval had committed (its kept prefix).
        checkpoint_version: the version its last checkpoint produced.
        version: the version ``data_out`` has now.
        label: the unfinished eval's functions.

    ``message`` replaces the message, for a caller that says it in its own terms.
    """

    def __init__(
        self,
        path: str,
        done: int,
        checkpoint_version: int,
        version: int,
        label: str = "",
        *,
        message: str | None = None,
    ) -> None:
        self.path = path
        self.done = done
        self.checkpoint_version = checkpoint_version
        self.version = version
        self.label = label
        if message is not None:
            pass  # said by the caller in its own terms (an ingest, which takes no rerun=True)
        elif version != checkpoint_version:
            message = (
                f"Cannot resume this eval into {path!r}: an earlier run committed its first {done} inputs "
                f"(version {checkpoint_version}), but the dataset was changed since (now version {version}), "
                "so resuming would break the output's order and starting over would write those outputs "
                "twice. Write into a fresh data_out, or remove the partial output first."
            )
        else:
            message = (
                f"data_out {path!r} holds the outputs of the first {done} inputs of an unfinished eval "
                f"({label}, checkpoint at version {version}), and this eval is not that eval, so its "
                "outputs would follow them. Pass rerun=True to drop the unfinished eval's outputs (a new "
                "version equal to the one before it began) and run this eval from the start, or write into "
                "a fresh data_out."
            )
        super().__init__(message)
