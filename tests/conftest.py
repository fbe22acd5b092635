"""What every test shares: the two lanes of the suite, and settings that keep tests steady on a busy machine.

The light lane (``make test``) has a CPU build of torch and no package that needs a CUDA build of it. A test
that needs one (torchvision, Lightning, Accelerate, torchdata, ultralytics) carries ``needs``::

    @pytest.mark.needs("torchvision")

In the light lane such a test is skipped, and ``-ra`` lists it with the reason. The full lane (``make
test-full``) installs those packages and runs exactly these tests (``-m needs --full-lane``); there a module
that does not import fails the test, so that a broken install never passes as a skip. The helpers shared by
every folder (``wait_until``, ``make_out``, ...) are in ``tests/helpers.py``.

Both lanes run on two processes (pytest-xdist, ``-n 2 --dist loadfile``): a file's tests run in one of
them, in order, so a module's fixtures start once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

_import_errors: dict[str, str | None] = {}


def _import_error(module: str) -> str | None:
    """Why ``module`` does not import here (``None`` if it does), tried once a process, in a child process:
    importing some of these changes the process that imports them (ultralytics patches Pillow), and a wheel
    that does not fit the torch beside it fails with more than ImportError."""
    if module not in _import_errors:
        child = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        lines = child.stderr.strip().splitlines()
        _import_errors[module] = (
            (lines[-1] if lines else f"exit code {child.returncode}") if child.returncode else None
        )
    return _import_errors[module]


def _needed(item: pytest.Item) -> Iterable[str]:
    for mark in item.iter_markers("needs"):
        yield from mark.args


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--full-lane``: a test marked ``needs`` fails, instead of being skipped, where a module is missing."""
    parser.addoption(
        "--full-lane",
        action="store_true",
        help="fail (do not skip) a test marked `needs` whose packages do not import (make test-full)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register ``needs``, and give hypothesis no deadline: a busy machine makes any example slow."""
    config.addinivalue_line(
        "markers",
        "needs(*modules): the test imports packages only the full lane installs (make test-full runs it)",
    )
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:
        return
    settings.register_profile(
        "lakecompute", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
    )
    settings.load_profile("lakecompute")


def _sigint_disabled() -> bool:
    """Whether SIGINT is ignored here (as Python sees it, or as the kernel does: code outside Python may have
    set it) or blocked in this thread. Both survive fork and exec: every process started from here inherits
    them."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return True
    if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        return True
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    ignored = next((line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), "0")
    return bool(int(ignored, 16) & (1 << (signal.SIGINT - 1)))


@pytest.fixture(autouse=True)
def _sigint_raises_keyboard_interrupt() -> None:
    """Each test starts with Ctrl-C raising KeyboardInterrupt in this process, as in a terminal. A pytest
    started in the background of a shell without job control (``make test &``, a CI runner's script)
    inherits SIGINT ignored, and so does every process it starts: the tests that interrupt an eval with
    SIGINT would then see it ignored. So would the processes started after a test that left it ignored
    or blocked."""
    if _sigint_disabled():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (light lane) or fail (``--full-lane``) a test whose ``needs`` do not import, naming them."""
    missing = {module: error for module in _needed(item) if (error := _import_error(module))}
    if not missing:
        return
    names = ", ".join(sorted(missing))
    if item.config.getoption("--full-lane"):
        pytest.fail(f"the full lane lacks {names}: {'; '.join(missing.values())}", pytrace=False)
    pytest.skip(f"needs {names}, which only the full lane installs (make test-full)")
