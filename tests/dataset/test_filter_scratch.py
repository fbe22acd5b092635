"""ds.filter(fn) writes nothing: no scratch dataset in the temp folder or in the source, after a run, a
failure or a kill -9; its failures name the first row that failed, on every scheduler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import SCHEDULERS, Sched

REPO = Path(__file__).resolve().parents[2]
N = 300

SCRIPT = """
import os, signal, sys
import lakecompute as lc

SRC, MODE, WORKERS = sys.argv[1], sys.argv[2], int(sys.argv[3])


def keep(row):
    x = int(row.x.numpy())
    if MODE == "fail" and x == 150:
        raise ValueError("bad row 150")
    if MODE == "kill" and x == 150:
        os.kill(os.getppid() if WORKERS else os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    return x % 3 == 0


ds = lc.load(SRC)
try:
    view = ds.filter(keep, num_workers=WORKERS, scheduler="processed" if WORKERS else "serial",
                     progressbar=False)
    print("KEPT", len(view), flush=True)
except lc.TransformError as err:
    print("FAILED", err.index, flush=True)
"""


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _source(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(N))
    return ds


def _run(tmp_path: Path, mode: str, workers: int) -> subprocess.CompletedProcess[str]:
    """Run the filter script in a new process whose temp folder is ``tmp_path / "tmp"`` (empty)."""
    script = tmp_path / "filter_job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp), "TEMP": str(temp), "TMP": str(temp)}
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "src"), mode, str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("mode", ["ok", "fail", "kill"])
def test_filter_leaves_the_temp_folder_and_the_source_as_they_were(
    tmp_path: Path, mode: str, workers: int
) -> None:
    """A filter that succeeds, fails on row 150, or whose process is SIGKILLed at row 150 (serial or with
    2 worker processes) leaves its temp folder empty and the source dataset's files unchanged."""
    _source(tmp_path / "src")
    before = _files(tmp_path / "src")
    done = _run(tmp_path, mode, workers)
    if mode == "kill":
        assert done.returncode == -signal.SIGKILL, done.stderr
    else:
        assert done.returncode == 0, done.stderr
        expected = "KEPT 100" if mode == "ok" else "FAILED 150"
        assert done.stdout.strip() == expected
    assert _files(tmp_path / "tmp") == []
    assert _files(tmp_path / "src") == before
    assert lc.load(str(tmp_path / "src")).x.numpy().tolist() == list(range(N))


def fails_on_multiples_of_seven(row: Any) -> bool:
    """Raise on x = 7, 14, ...; keep the rest."""
    x = int(row.x.numpy())
    if x and x % 7 == 0:
        raise ArithmeticError(f"{x} is a multiple of 7")
    return True


def keeps_even(row: Any) -> bool:
    """Keep even x."""
    return int(row.x.numpy()) % 2 == 0


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=str)
def test_filter_failure_names_the_first_failing_row(scheduler: Sched, tmp_path: Path) -> None:
    """Rows 7, 14, ... raise: the TransformError names row 7 (the first), its sample and the cause, on
    every scheduler; nothing is written into the dataset."""
    ds = _source(tmp_path / "src")
    version = ds.version
    with pytest.raises(lc.TransformError) as info:
        ds.filter(fails_on_multiples_of_seven, **scheduler.kw)
    err = info.value
    assert err.index == 7
    assert int(err.sample.x.numpy()) == 7
    assert err.function == "fails_on_multiples_of_seven"
    assert type(err.__cause__) is ArithmeticError
    assert str(err).startswith(
        "Transform 'fails_on_multiples_of_seven' failed on data_in[7] (dataset row 7): "
        "ArithmeticError: 7 is a multiple of 7"
    )
    assert lc.load(str(tmp_path / "src")).version == version


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=str)
def test_filter_of_a_view_keeps_the_views_rows(scheduler: Sched, tmp_path: Path) -> None:
    """Filtering a view (a step slice) with workers keeps the same rows as a plain loop, in order."""
    ds = _source(tmp_path / "src")
    view = ds[5:290:3]
    kept = view.filter(keeps_even, **scheduler.kw)
    assert kept.x.numpy().tolist() == [x for x in range(5, 290, 3) if x % 2 == 0]


def test_filter_progress_bar_names_the_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With progressbar=True the bar says what runs and counts every row."""
    ds = _source(tmp_path / "src")
    ds.filter(keeps_even, progressbar=True)
    err = capsys.readouterr().err
    assert "filter keeps_even" in err
    assert f"{N}/{N}" in err


def test_filter_refuses_bad_options(tmp_path: Path) -> None:
    """Options are checked as eval's: a negative worker count or an unknown scheduler."""
    ds = _source(tmp_path / "src")
    with pytest.raises(lc.InvalidArgumentError, match=r"Expected num_workers >= 0\. Got -1\."):
        ds.filter(keeps_even, num_workers=-1)
    with pytest.raises(lc.InvalidArgumentError, match="Unknown scheduler 'dask'"):
        ds.filter(keeps_even, num_workers=2, scheduler="dask", progressbar=False)
