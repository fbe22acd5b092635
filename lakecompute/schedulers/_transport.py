"""How tasks, results and exceptions cross a process boundary: one transport for every scheduler with
workers in other processes (processed, ray).

- **Tasks** are pickled in the calling process, before they are queued: a task that cannot be pickled
  is an `UnpicklableTaskError` at once, naming the task, never a task silently dropped by a
  queue's feeder thread (which would leave the run waiting for it forever).
- **By value.** Workers started fresh (spawn, forkserver, Ray) never import the user's ``__main__``
  again, so functions and classes defined there travel by value, with the globals they use (dill's
  ``recurse``). Forked workers share the parent's ``__main__`` and get plain pickles. Modules those
  globals name (``import lakecompute as lc``, ``import torch``) travel by name and are imported where
  they arrive: dill would send a module outside ``site-packages`` (a checkout on ``PYTHONPATH``, a
  project's own package) with its whole namespace, which fails on the first lock or thread-local in
  it, and would overwrite the worker's own module with the caller's state if it did not.
- **Results** are pickled in the worker; one that cannot be pickled there, or unpickled here, is an
  `InvalidTypeError` naming the task.
- **Exceptions** travel with their whole ``__cause__`` chain and the worker's formatted traceback; one
  that cannot be pickled (or unpickled again) arrives as `RemoteError`.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import traceback
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

import multiprocess.reduction

from lakecompute.errors import InvalidTypeError, RemoteError, UnpicklableTaskError
from lakecompute.schedulers._base import describe_task

__all__ = [
    "PickledError",
    "dump",
    "dump_task",
    "load",
    "load_result",
    "load_task",
    "pickle_exception",
    "portable_exception",
    "rebuild_exception",
    "unsendable_result",
]

# How many links of an exception's __cause__ chain are sent back from a worker.
_MAX_CAUSES = 16

_RETURN_PLAIN_DATA = (
    "Return plain data (numbers, strings, lists, dicts, numpy arrays) from the task function."
)


@dataclass(frozen=True, slots=True)
class _PickledException:
    """One link of an exception chain, as a worker sends it."""

    data: bytes | None
    """The pickled exception, or None if it could not be pickled and unpickled again."""
    type_name: str
    """The qualified name of the exception's type."""
    message: str
    """``str()`` of the exception."""


@dataclass(frozen=True, slots=True)
class PickledError:
    """A task's failure, as a worker sends it."""

    chain: tuple[_PickledException, ...]
    """The exception first, then its ``__cause__``, that one's ``__cause__``, and so on."""
    traceback_text: str
    """The formatted traceback in the worker, causes included."""


class _Pickler(multiprocess.reduction.ForkingPickler):  # type: ignore[misc]  # untyped base
    """multiprocess's pickler (dill), sending imported modules by name (see the module documentation)."""

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if type(obj) is ModuleType and id(obj) not in self.memo and _by_name(obj):
            self.save_reduce(importlib.import_module, (obj.__name__,), obj=obj)
            return
        super().save(obj, save_persistent_id)


def _by_name(module: ModuleType) -> bool:
    """Whether ``module`` is imported under its own name (so a worker can import it by that name); not
    ``__main__``, which dill sends by value."""
    name = module.__name__
    return name != "__main__" and sys.modules.get(name) is module


def dump(obj: object, by_value: bool = False) -> bytes:
    """Pickle ``obj`` with dill; ``by_value`` also sends the globals of ``__main__``'s functions."""
    return bytes(_Pickler.dumps(obj, recurse=by_value))


def load(data: bytes | bytearray) -> Any:
    """Unpickle what `dump` made."""
    return multiprocess.reduction.ForkingPickler.loads(data)


def dump_task(task: object, position: int, by_value: bool) -> bytes:
    """Pickle a task in the calling process.

    Raises:
        UnpicklableTaskError: if the task cannot be pickled.
    """
    try:
        return dump(task, by_value)
    except Exception as exc:
        raise UnpicklableTaskError(
            f"Task {describe_task(task)} cannot be sent to a worker process: pickling it failed with "
            f"{type(exc).__name__}: {exc}. Give tasks only data that pickles (numbers, strings, numpy "
            "arrays, lists and dicts of them), or use scheduler='threaded' or num_workers=0, which do "
            "not pickle.",
            task=task,
            position=position,
        ) from exc


def load_task(data: bytes, position: int) -> Any:
    """Unpickle a task in the worker.

    Raises:
        InvalidTypeError: if it cannot be unpickled here (e.g. its class cannot be imported).
    """
    try:
        return load(data)
    except Exception as exc:
        raise InvalidTypeError(
            f"Task {position} could not be unpickled in the worker process: {type(exc).__name__}: {exc}. "
            "Make sure the modules its objects come from can be imported by a new process."
        ) from exc


def unsendable_result(task: object, exc: Exception, where: str) -> InvalidTypeError:
    """The error for a result that cannot be pickled in the worker (``where`` names the worker)."""
    error = InvalidTypeError(
        f"The result of task {describe_task(task)} cannot be sent from the {where}: {exc}. "
        + _RETURN_PLAIN_DATA
    )
    error.__cause__ = exc
    return error


def load_result(data: bytes, where: str) -> Any:
    """Unpickle a task's result in the calling process (``where`` names it in the error).

    Raises:
        InvalidTypeError: if it cannot be unpickled.
    """
    try:
        return load(data)
    except Exception as exc:
        raise InvalidTypeError(
            f"The result of a task could not be unpickled in the {where}: {exc!r}. {_RETURN_PLAIN_DATA}"
        ) from exc


def pickle_exception(exc: BaseException) -> PickledError:
    """Prepare an exception and its ``__cause__`` chain to be sent to the calling process."""
    chain: list[_PickledException] = []
    link: BaseException | None = exc
    seen: set[int] = set()
    while link is not None and id(link) not in seen and len(chain) < _MAX_CAUSES:
        seen.add(id(link))
        chain.append(_pickle_one(link))
        link = link.__cause__
    text = "".join(traceback.format_exception(exc))
    return PickledError(chain=tuple(chain), traceback_text=text)


def _pickle_one(exc: BaseException) -> _PickledException:
    """Pickle one exception, checking here that it can also be unpickled."""
    kind = type(exc)
    type_name = f"{kind.__module__}.{kind.__qualname__}"
    try:
        message = str(exc)
    except Exception:
        message = f"<{type_name} whose str() failed>"
    return _PickledException(data=_round_trip(exc), type_name=type_name, message=message)


def _round_trip(exc: BaseException) -> bytes | None:
    """``exc`` pickled, if it also unpickles as itself; else None."""
    try:
        data = dump(exc)
        # Many exceptions pickle but fail to unpickle (an __init__ with other arguments than .args);
        # try it here so that the receiver gets a RemoteError, not an unpickling failure.
        return data if type(load(data)) is type(exc) else None
    except Exception:
        return None


def portable_exception(exc: BaseException, traceback_text: str) -> BaseException:
    """``exc`` if it can cross to another process as itself, else a `RemoteError` standing in for it
    (with ``traceback_text``): what a task may put in its result."""
    if _round_trip(exc) is not None:
        return exc
    kind = type(exc)
    return RemoteError(f"{kind.__module__}.{kind.__qualname__}", str(exc), traceback_text)


def rebuild_exception(error: PickledError) -> BaseException:
    """Rebuild in the calling process the exception a worker sent, causes included."""
    links: list[BaseException] = []
    for link in error.chain:
        rebuilt: BaseException | None = None
        if link.data is not None:
            try:
                rebuilt = cast(BaseException, load(link.data))
            except Exception:
                rebuilt = None
        if rebuilt is None:
            rebuilt = RemoteError(link.type_name, link.message, error.traceback_text)
        links.append(rebuilt)
    for outer, inner in itertools.pairwise(links):
        outer.__cause__ = inner
    exc = links[0]
    try:
        exc.remote_traceback = error.traceback_text  # type: ignore[attr-defined]  # an attribute we add
        if not isinstance(exc, RemoteError):
            # Shown under the parent's traceback, so the user sees where in their code it failed.
            # (A RemoteError's message already holds the worker's traceback.)
            exc.add_note(f"Traceback in the worker process:\n{error.traceback_text.rstrip()}")
    except Exception:
        # An exception type with __slots__ or a read-only __dict__ keeps its message, if not the extras.
        pass
    return exc
