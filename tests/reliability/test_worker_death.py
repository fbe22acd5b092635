"""A worker that dies mid-task (SIGKILL, segfault, os._exit) is a prompt, named error, never a hang."""

from __future__ import annotations

import ctypes
import faulthandler
import signal
import time
from pathlib import Path
from typing import Any

import multiprocess
import numpy as np
import pytest

import lakecompute as lc
from tests.helpers import make_numbers, make_out
from tests.reliability.reliability_helpers import EXIT_AT, KILL_AT, SEGV_AT, double, doubled_prefix

N = 100
INTERVAL = 10


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("fault", "how"),
    [(KILL_AT, "signal SIGKILL"), (SEGV_AT, "signal SIGSEGV"), (EXIT_AT, "exit code 7")],
    ids=["sigkill", "segfault", "os-exit"],
)
def test_worker_death_names_task_range_and_commits_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, how: str
) -> None:
    """A worker dying on input 57 raises WorkerDiedError naming data_in[50:60] at once; a rerun resumes."""
    out = make_out(tmp_path / "out")
    monkeypatch.setenv(fault, "57")
    t0 = time.monotonic()
    match = rf"died with {how} while running task .*data_in\[50:60\]"
    with pytest.raises(lc.WorkerDiedError, match=match) as info:
        double().eval(list(range(N)), out, num_workers=2, checkpoint_interval=INTERVAL, progressbar=False)
    assert time.monotonic() - t0 < 30
    err = info.value
    assert isinstance(err, lc.LakeComputeError)
    assert (err.task.start, err.task.stop) == (50, 60)
    assert err.exitcode == {KILL_AT: -signal.SIGKILL, SEGV_AT: -signal.SIGSEGV, EXIT_AT: 7}[fault]
    assert "num_workers=0 to debug it" in str(err)
    assert multiprocess.active_children() == []
    k = doubled_prefix(lc.load(str(tmp_path / "out")), INTERVAL)
    assert k <= 50

    monkeypatch.delenv(fault)
    out = lc.load(str(tmp_path / "out"))
    kw = {"num_workers": 2, "checkpoint_interval": INTERVAL, "progressbar": False}
    result = double().eval(list(range(N)), out, **kw)
    assert result.resumed_from == k
    np.testing.assert_array_equal(lc.load(str(tmp_path / "out")).x.numpy(), 2 * np.arange(N))


@pytest.mark.timeout(90)
def test_worker_death_in_place_keeps_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed in an in-place eval without checkpoints leaves the dataset exactly as it was."""
    ds = make_numbers(tmp_path / "ds", N)
    version = ds.version
    monkeypatch.setenv(KILL_AT, "80")
    with pytest.raises(lc.WorkerDiedError, match=r"data_in\[\d+:\d+\]"):
        double().eval(ds, num_workers=2, progressbar=False)
    assert multiprocess.active_children() == []
    again = lc.load(str(tmp_path / "ds"))
    assert again.version == version
    np.testing.assert_array_equal(again.x.numpy(), np.arange(N))
    # The handle that ran the eval is usable again and sees the old content too.
    np.testing.assert_array_equal(ds.x.numpy(), np.arange(N))


@lc.compute
def crash_loudly_at_57(sample_in: Any, sample_out: Any) -> None:
    """Write ``x = 2 * i``; on input 57 crash the worker with a segfault that faulthandler reports."""
    i = int(sample_in)
    if i == 57:
        faulthandler.enable(file=2)  # the worker's stderr, as a crashing C library would write there
        ctypes.string_at(0)
    sample_out.append({"x": np.int64(2 * i)})


@pytest.mark.timeout(90)
def test_worker_death_quotes_what_the_worker_wrote_last(tmp_path: Path) -> None:
    """A worker that crashes says why in its last stderr lines, and WorkerDiedError quotes them."""
    out = make_out(tmp_path / "out")
    with pytest.raises(lc.WorkerDiedError) as info:
        crash_loudly_at_57().eval(
            list(range(N)), out, num_workers=2, checkpoint_interval=INTERVAL, progressbar=False
        )
    message = str(info.value)
    assert "died with signal SIGSEGV while running task" in message
    head, _, tail = message.partition("Its stderr ended with:\n")
    assert "data_in[50:60]" in head
    # The crash dump's first line, kept even when the dump is longer than the tail.
    assert tail.startswith("    Fatal Python error: Segmentation fault\n")
    assert multiprocess.active_children() == []


_PLAIN_CRASH = """
import ctypes, faulthandler, sys
import numpy as np
import lakecompute as lc

@lc.compute
def crash_at_7(x, sample_out):
    if int(x) == 7:
        ctypes.string_at(0)
    sample_out.append({"x": np.int64(x)})

assert not faulthandler.is_enabled()
out = lc.empty(sys.argv[1], overwrite=True)
out.create_tensor("x", dtype="int64")
try:
    crash_at_7().eval(list(range(20)), out, num_workers=2, progressbar=False)
except lc.WorkerDiedError as exc:
    print(exc)
"""


@pytest.mark.timeout(90)
def test_worker_crash_is_quoted_without_faulthandler_in_the_script(tmp_path: Path) -> None:
    """A script that never enables faulthandler still gets the crash's cause and Python stack quoted:
    every worker installs its own crash handler at start."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PLAIN_CRASH, str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=80)  # fmt: skip
    assert "died with signal SIGSEGV" in done.stdout, done.stderr
    assert "Fatal Python error: Segmentation fault" in done.stdout
