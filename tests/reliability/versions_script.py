"""Version operations in a process of their own, for the tests that kill them or race them.

Usage: ``versions_script.py PATH OP [ARGS ...]`` with OP one of

- ``eval BRANCH INTERVAL``: double tensor ``x`` in place on BRANCH (the others kept), with checkpoints every
  INTERVAL inputs;
- ``append BRANCH VALUE COUNT``: append VALUE to ``x`` on BRANCH, COUNT times (a commit each), the
  branch opened before ``START`` (so that writers released together start from one version);
- ``checkout NAME``: create branch NAME from ``main``'s head;
- ``tag NAME``: tag ``main``'s head;
- ``restore BRANCH VERSION``: restore VERSION on BRANCH;
- ``merge BRANCH SOURCE``: merge SOURCE into BRANCH;
- ``delete-branch NAME``: delete branch NAME;
- ``save ROWS DEST INTERVAL``: save every ROWS-th row of PATH as a new dataset at DEST, with checkpoints;
- ``vacuum KEEP``: ``vacuum(grace_seconds=0, keep_versions=KEEP)``.

Prints ``START`` before the operation and ``DONE <version>`` after it, or ``CONFLICT`` when the commit lost
to another writer (``lc.CommitConflictError``). Environment:

- ``LC_TEST_GO=FILE``: wait after ``START`` until FILE exists (a start line shared with other writers);
- ``LC_TEST_KILL_AT_STEP=k``: SIGKILL this process just before its k-th storage step (a change of a file:
  writing, linking or deleting one; a file half written counts as a step of its own), so a test can stop
  an operation between any two of its steps;
- ``LC_TEST_STORAGE``: storage options as JSON (for ``s3://`` paths).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import lakecompute as lc
from lakecompute.storage import LocalBackend
from tests.reliability.reliability_helpers import double

_STEPS = [0]


def _arm(kill_at: int) -> None:
    """Count the storage steps of the calling thread (the lease keeper's renewals are not counted: they
    come at times of their own) and die before step ``kill_at``."""
    main = threading.main_thread()

    def step() -> None:
        if threading.current_thread() is main:
            _STEPS[0] += 1
            if _STEPS[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    def counted(method: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            step()
            return method(self, *args, **kwargs)

        return wrapper

    classes: list[Any] = [LocalBackend]
    try:
        from lakecompute.storage._s3 import S3Backend

        classes.append(S3Backend)
    except ImportError:  # pragma: no cover (the s3 extra is part of the dev environment)
        pass
    for cls in classes:
        for name in ("write", "write_hint", "create_exclusive", "delete", "delete_tree"):
            setattr(cls, name, counted(getattr(cls, name)))
    write_temp = LocalBackend._write_temp

    def half_written(self: Any, key: str, data: bytes) -> Any:
        tmp = write_temp(self, key, data)
        step()  # the temp file is there, its name not yet linked or renamed into place
        return tmp

    LocalBackend._write_temp = half_written  # type: ignore[method-assign]


def _eval(path: str, args: list[str], options: dict[str, Any]) -> int:
    ds = lc.load(path, branch=args[0], storage_options=options)
    result = double().eval(ds, checkpoint_interval=int(args[1]), progressbar=False, skip_ok=True)
    return result.version


def _append(path: str, args: list[str], options: dict[str, Any]) -> Callable[[], int]:
    """Opens the branch now (before ``START``: writers started together all append to the version they
    found then, whoever commits first), appends when called."""
    ds = lc.load(path, branch=args[0], storage_options=options)

    def append() -> int:
        for _ in range(int(args[2])):
            ds.x.append(int(args[1]))
        return ds.version

    return append


def _save(path: str, args: list[str], options: dict[str, Any]) -> int:
    ds = lc.load(path, storage_options=options)
    view = ds[:: int(args[0])]
    out = view.save(args[1], storage_options=options, progressbar=False, checkpoint_interval=int(args[2]))
    return out.version


def _on(path: str, branch: str | None, options: dict[str, Any]) -> lc.Dataset:
    return lc.load(path, branch=branch, storage_options=options)


def _checkout(path: str, args: list[str], options: dict[str, Any]) -> int:
    ds = _on(path, None, options)
    ds.checkout(args[0], create=True)
    return ds.version


def _delete_branch(path: str, args: list[str], options: dict[str, Any]) -> int:
    ds = _on(path, None, options)
    ds.delete_branch(args[0])
    return ds.version


#: Operations that open the dataset before ``START`` and run when called after it.
OPENED_FIRST: dict[str, Callable[[str, list[str], dict[str, Any]], Callable[[], int]]] = {"append": _append}

OPS: dict[str, Any] = {
    "eval": _eval,
    "save": _save,
    "checkout": _checkout,
    "tag": lambda path, args, options: _on(path, None, options).tag(args[0]),
    "restore": lambda path, args, options: _on(path, args[0], options).restore(int(args[1])),
    "merge": lambda path, args, options: _on(path, args[0], options).merge(args[1]),
    "delete-branch": _delete_branch,
    "vacuum": lambda path, args, options: _vacuum(_on(path, None, options), int(args[0])),
}


def _vacuum(ds: lc.Dataset, keep: int) -> int:
    ds.vacuum(grace_seconds=0, keep_versions=keep)
    return ds.version


def main(argv: list[str]) -> None:
    """Parse the arguments, run the operation, report."""
    path, op, args = argv[0], argv[1], argv[2:]
    options = json.loads(os.environ.get("LC_TEST_STORAGE", "{}"))
    if op in OPENED_FIRST:
        run = OPENED_FIRST[op](path, args, options)
    else:
        run = functools.partial(OPS[op], path, args, options)
    print("START", flush=True)
    go = os.environ.get("LC_TEST_GO")
    while go and not os.path.exists(go):
        time.sleep(0.002)
    kill_at = int(os.environ.get("LC_TEST_KILL_AT_STEP", "0"))
    if kill_at:
        _arm(kill_at)
    try:
        version = int(run())
    except lc.CommitConflictError as exc:
        print(f"CONFLICT {exc}", flush=True)
        return
    print(f"DONE {version} {_STEPS[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
