"""Helpers for the reliability tests: compute functions with injectable faults, datasets, process checks.

Faults are injected through environment variables read inside the compute function, so that the
function's code and arguments (and with them the eval's fingerprint) are the same whether a fault is
armed or not: a rerun without the fault resumes the crashed run.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import lakecompute as lc
from lakecompute.storage import open_backend
from lakecompute.versioned._reads import read_manifest
from lakecompute.versioned._versions import is_committed

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
EVAL_SCRIPT = HERE / "eval_script.py"

FAIL_AT = "LC_TEST_FAIL_AT"  # raise RuntimeError on this input
KILL_AT = "LC_TEST_KILL_AT"  # the process running this input SIGKILLs itself
EXIT_AT = "LC_TEST_EXIT_AT"  # the process running this input leaves with os._exit(7)
SEGV_AT = "LC_TEST_SEGV_AT"  # the process running this input crashes with a segmentation fault
SLEEP = "LC_TEST_SLEEP"  # seconds to sleep per input
CALLS = "LC_TEST_CALLS"  # a file every call appends its input to


def _armed(name: str) -> int:
    return int(os.environ.get(name, "-1"))


@lc.compute
def double(sample_in: Any, sample_out: Any) -> None:
    """Write ``x = 2 * i`` for input ``i`` (an int, or a row with tensor ``x``); faults come from the env."""
    i = int(sample_in.x.numpy()) if hasattr(sample_in, "x") else int(sample_in)
    delay = float(os.environ.get(SLEEP, "0"))
    if delay:
        time.sleep(delay)
    calls = os.environ.get(CALLS)
    if calls:
        with open(calls, "a") as fh:
            fh.write(f"{i}\n")
    if i == _armed(FAIL_AT):
        raise RuntimeError(f"injected failure at {i}")
    if i == _armed(KILL_AT):
        os.kill(os.getpid(), signal.SIGKILL)
    if i == _armed(EXIT_AT):
        os._exit(7)
    if i == _armed(SEGV_AT):
        faulthandler.disable()  # die of the signal itself, quietly
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    sample_out.append({"x": np.int64(2 * i)})


@lc.compute
def double_with(sample_in: Any, sample_out: Any, extra: Any) -> None:
    """Write ``x = 2 * i``; ``extra`` is only there to be fingerprinted."""
    sample_out.append({"x": np.int64(int(sample_in) * 2)})


def doubled_prefix(ds: lc.Dataset, step: int) -> int:
    """Assert that ``ds.x`` is exactly ``2 * arange(k)``, ``k`` a multiple of ``step``; return k."""
    values = ds.x.numpy() if len(ds.x) else np.zeros(0, dtype=np.int64)
    k = len(values)
    np.testing.assert_array_equal(values, 2 * np.arange(k, dtype=np.int64))
    assert k % step == 0, f"{k} outputs is not a whole number of checkpoints of {step}"
    return k


def eval_command(path: str, n: int, *, workers: int, interval: int, in_place: bool = False) -> list[str]:
    """The command line that runs ``eval_script.py`` for one eval of ``double``."""
    cmd = [sys.executable, str(EVAL_SCRIPT), path, str(n), str(workers), str(interval)]
    return [*cmd, "in-place"] if in_place else cmd


def script_env(**extra: str) -> dict[str, str]:
    """The environment for eval subprocesses: this repository and this folder importable, faults given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_TEST_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def start_eval(path: str, n: int, *, workers: int, interval: int, in_place: bool = False, **env: str) -> Any:
    """Start ``eval_script.py`` in its own session (so every process it starts can be found by session id)."""
    return subprocess.Popen(
        eval_command(path, n, workers=workers, interval=interval, in_place=in_place),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=script_env(**env),
        start_new_session=True,
    )


def kill_session(session: int) -> None:
    """SIGKILL whatever is left of a session this test started (cleanup after a failed assertion)."""
    try:
        os.killpg(session, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def versions(path: str | Path) -> list[str]:
    """The manifest files of a local dataset's committed versions (a manifest a commit stored but never
    moved its branch to, because it was killed in between or lost a race, is no version)."""
    backend = open_backend(str(path))
    out = []
    for name in sorted(os.listdir(Path(path) / "versions")):
        if not (name.endswith(".json") and name[:-5].isdigit()):
            continue
        try:
            manifest = read_manifest(backend, int(name[:-5]))
        except lc.DatasetNotFoundError:
            continue  # removed since the listing (a commit that lost its race cleans up)
        if is_committed(backend, manifest):
            out.append(name)
    return out


def segments(path: str | Path) -> set[str]:
    """The segment folders of a local dataset."""
    root = Path(path) / "segments"
    return {p.name for p in root.iterdir() if p.is_dir()} if root.exists() else set()
