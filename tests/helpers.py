"""Helpers every test folder shares, written once: waiting on a condition, the small datasets most tests
start from, two torch.distributed ranks on gloo, what the full lane's packages are, and running the command
line in-process.

Plain functions (not fixtures), so that worker processes and the scripts tests start can import them too
(``from tests.helpers import wait_until``). The fixtures built on them live in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

import lakecompute as lc

T = TypeVar("T")

#: How long a test waits for something another process or thread does, unless it says otherwise. Generous,
#: because a busy machine (load 8 on 2 cores) slows everything; a wait that passes returns at once anyway.
WAIT_SECONDS = 60.0


#: The packages only the full lane installs (``pip install -e ".[dev,full]"``), by import name.
FULL_LANE_MODULES = (
    "torchvision",
    "pytorch_lightning",
    "lightning",
    "accelerate",
    "torchdata",
    "ultralytics",
)

_IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", re.MULTILINE)


def full_lane_imports(source: str) -> tuple[str, ...]:
    """The full-lane packages that Python ``source`` (a script, a page's code blocks) imports, sorted."""
    return tuple(sorted(set(_IMPORT.findall(source)) & set(FULL_LANE_MODULES)))


def needs_marks(source: str) -> list[pytest.MarkDecorator]:
    """``[pytest.mark.needs(...)]`` for the full-lane packages ``source`` imports, or ``[]``: for a test
    parametrized over scripts or pages, so that each case says what it needs."""
    modules = full_lane_imports(source)
    return [pytest.mark.needs(*modules)] if modules else []


def wait_until(predicate: Callable[[], T], timeout: float = WAIT_SECONDS, what: str = "the condition") -> T:
    """Call ``predicate`` until it returns a true value, and return that value.

    Polls quickly at first and more slowly later (every 5 ms, growing to 100 ms), so that a wait that is
    over at once costs nothing and a long one does not busy the machine. Raises ``AssertionError`` naming
    ``what`` after ``timeout`` seconds: a test waits on a condition, never on a fixed sleep.
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}, in vain")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def touch(path: str | Path) -> None:
    """Create the file ``path`` (empty): a signal another process waits for with :func:`wait_for_file`."""
    Path(path).touch()


def wait_for_file(path: str | Path, timeout: float = WAIT_SECONDS) -> None:
    """Wait until the file ``path`` exists (see :func:`touch`)."""
    wait_until(Path(path).exists, timeout, f"the file {str(path)!r}")


def numbers(n: int) -> Iterator[int]:
    """A generator of ``0..n-1``: streamed input without a length."""
    yield from range(n)


def make_out(
    path: str | Path, storage_options: dict[str, Any] | None = None, **tensors: dict[str, Any]
) -> lc.Dataset:
    """A new, empty dataset at ``path`` (replacing what is there) with the given tensors (name →
    ``create_tensor`` keyword arguments); by default one int64 tensor ``x``."""
    ds = lc.empty(str(path), overwrite=True, storage_options=storage_options)
    for name, kwargs in (tensors or {"x": {"dtype": "int64"}}).items():
        ds.create_tensor(name, **kwargs)
    return ds


def make_numbers(
    path: str | Path, n: int, dtype: str = "int64", storage_options: dict[str, Any] | None = None
) -> lc.Dataset:
    """A new dataset at ``path`` whose one tensor ``x`` holds ``0..n-1``."""
    ds = make_out(path, storage_options, x={"dtype": dtype})
    if n:
        ds.x.extend(np.arange(n, dtype=dtype))
    return ds


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, for a launcher that must be given one
    (Lightning's and torchrun's ``MASTER_PORT``); :func:`run_two_ranks` needs none."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_two_ranks(target: Callable[..., None], args: tuple[Any, ...], tmp_path: Path) -> list[Any]:
    """Run ``target(init_method, rank, out, *args)`` in two spawned processes, ranks 0 and 1 of a
    torch.distributed group, and return what each wrote to its ``out`` file as JSON.

    ``target`` (module level, so that spawn can find it) calls ``init_process_group("gloo",
    init_method=init_method, rank=rank, world_size=2)``. The ranks meet through a file in ``tmp_path``, not a
    TCP port, so no other process on the machine can take their meeting place between choosing and binding.
    A rank that fails or hangs fails the test, and no process outlives it.
    """
    ctx = multiprocessing.get_context("spawn")
    init_method = f"file://{tmp_path / 'gloo-rendezvous'}"
    outs = [tmp_path / f"rank{rank}.json" for rank in range(2)]
    procs = [
        ctx.Process(target=target, args=(init_method, rank, str(outs[rank]), *args)) for rank in range(2)
    ]
    for proc in procs:
        proc.start()
    try:
        for rank, proc in enumerate(procs):
            proc.join(WAIT_SECONDS * 2)
            assert proc.exitcode == 0, f"rank {rank} ended with exit code {proc.exitcode}"
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    return [json.loads(out.read_text()) for out in outs]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the ``lakecompute`` command line in this process: exit code (usage errors included), stdout,
    stderr."""
    from lakecompute.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


class WeightsMissingError(OSError):
    """What a model load raises in the class-init failure tests."""


@lc.compute
class NeedsWeights:
    """A class compute whose model file is missing: its ``__init__`` raises wherever it is built."""

    def __init__(self, path: str) -> None:
        raise WeightsMissingError(f"no weights at {path}")

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        sample_out.y.append(int(sample_in))
