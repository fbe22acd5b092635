"""compact, vacuum and lc.copy show a progress bar, as ingests and evals do (``progressbar=True``, the
default; False shows nothing; anything else is refused before any work)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.helpers import run_cli


def _fragmented(path: Path) -> lc.Dataset:
    """Two tensors of 30 samples each, written in three commits (three fragments each)."""
    ds = lc.empty(path)
    ds.create_tensor("x", dtype="int64")
    ds.create_tensor("t", htype="text")
    for k in range(3):
        ds.extend({"x": np.arange(10) + 10 * k, "t": [f"row {i}" for i in range(10)]})
    return ds


def test_compact_counts_the_samples_it_rewrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = _fragmented(tmp_path / "ds")
    capsys.readouterr()
    ds.compact()
    err = capsys.readouterr().err
    assert "compact" in err
    done = re.search(r"\b(\d+)/\1\b", err)  # the bar ends full: every sample of the tensors rewritten
    assert done is not None
    assert int(done.group(1)) in (30, 60)  # one or both tensors of 30 (one may be one run already)
    assert ds.x.numpy().tolist() == list(range(30))
    ds.extend({"x": [30], "t": ["last"]})
    ds.compact(progressbar=False)
    assert capsys.readouterr().err == ""


def test_vacuum_counts_the_stored_arrays_it_looks_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = _fragmented(tmp_path / "ds")
    ds.compact(progressbar=False)
    capsys.readouterr()
    removed = ds.vacuum(grace_seconds=0, keep_versions=1)
    err = capsys.readouterr().err
    assert "vacuum" in err
    done = re.search(r"\b(\d+)/\1\b", err)  # the bar ends full
    assert done is not None
    assert int(done.group(1)) > 0
    assert removed["segments"] > 0
    assert ds.x.numpy().tolist() == list(range(30))
    ds.vacuum(grace_seconds=0, progressbar=False)
    assert capsys.readouterr().err == ""


def test_a_progressbar_that_is_not_a_flag_is_refused_before_any_work(tmp_path: Path) -> None:
    ds = _fragmented(tmp_path / "ds")
    version = ds.version
    with pytest.raises(lc.InvalidTypeError, match="progressbar"):
        ds.compact(progressbar="yes")  # type: ignore[arg-type]
    with pytest.raises(lc.InvalidTypeError, match="progressbar"):
        ds.vacuum(grace_seconds=0, keep_versions=1, progressbar=1)  # type: ignore[arg-type]
    assert lc.load(tmp_path / "ds", version=1).version == 1  # no version was removed
    assert ds.version == version


def test_lc_copy_counts_the_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = _fragmented(tmp_path / "ds")
    capsys.readouterr()
    lc.copy(ds[::2], tmp_path / "copy")
    assert re.search(r"\b15/15\b", capsys.readouterr().err)
    lc.copy(ds, tmp_path / "copy2", progressbar=False)
    assert capsys.readouterr().err == ""


def test_the_cli_hides_the_bars_with_no_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fragmented(tmp_path / "ds")
    code, _, err = run_cli(capsys, "compact", str(tmp_path / "ds"), "--no-progress")
    assert (code, err) == (0, "")
    code, _, err = run_cli(capsys, "vacuum", str(tmp_path / "ds"), "--grace-seconds", "0", "--no-progress")
    assert (code, err) == (0, "")
    code, _, err = run_cli(capsys, "compact", str(tmp_path / "ds"))
    assert code == 0
    assert "compact" in err
