"""Checkpoint resume: any worker count and scheduler, in place, completed reruns, unfingerprintable evals."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.datasets import evals_of
from lakecompute.testing.internals import dataset_core
from tests.helpers import make_numbers, make_out
from tests.reliability.reliability_helpers import (
    CALLS,
    FAIL_AT,
    double,
    double_with,
    doubled_prefix,
    versions,
)

N = 100
INTERVAL = 10
FAIL = 57  # the crashed run dies here, so its last checkpoint is at 50


def _calls(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytest.mark.parametrize(
    ("crashed", "rerun"),
    [
        (("processed", 2), ("serial", 0)),
        (("serial", 0), ("processed", 3)),
        (("threaded", 2), ("processed", 2)),
    ],
    ids=["processed2-then-serial", "serial-then-processed3", "threaded2-then-processed2"],
)
def test_resume_with_other_num_workers_writes_each_output_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crashed: tuple[str, int], rerun: tuple[str, int]
) -> None:
    """A rerun with another scheduler and worker count resumes at the last checkpoint, each output once."""
    out = make_out(tmp_path / "out")
    monkeypatch.setenv(FAIL_AT, str(FAIL))
    with pytest.raises(lc.TransformError, match=r"data_in\[57\]: RuntimeError: injected failure at 57"):
        double().eval(
            list(range(N)), out, scheduler=crashed[0], num_workers=crashed[1], checkpoint_interval=INTERVAL,
            progressbar=False,
        )  # fmt: skip
    # Parallel tasks may fail before an earlier one is applied: the last checkpoint is 50 or before
    # (even 0, when the failing task reports first). In the calling thread it is exactly 50.
    k = doubled_prefix(lc.load(str(tmp_path / "out")), INTERVAL)
    assert 0 <= k <= 50
    if crashed[1] == 0:
        assert k == 50

    monkeypatch.delenv(FAIL_AT)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv(CALLS, str(calls))
    out = lc.load(str(tmp_path / "out"))
    result = double().eval(
        list(range(N)),
        out,
        scheduler=rerun[0],
        num_workers=rerun[1],
        checkpoint_interval=INTERVAL,
        progressbar=False,
    )
    assert (result.inputs, result.outputs, result.resumed_from) == (N, {"x": N}, k)
    np.testing.assert_array_equal(lc.load(str(tmp_path / "out")).x.numpy(), 2 * np.arange(N))
    # The kept inputs never run again; every other input runs once (the preflight's included).
    assert sorted(_calls(calls)) == list(range(k, N))


def test_resume_in_place_keeps_old_content_until_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted in-place eval leaves the old content visible; a rerun resumes it to the full result."""
    ds = make_numbers(tmp_path / "ds", N)
    start = ds.version
    monkeypatch.setenv(FAIL_AT, str(FAIL))
    # The crashed run is serial so its last checkpoint is exactly 50 (with workers, the failing task
    # may report before earlier ones are applied); the rerun uses two workers.
    with pytest.raises(lc.TransformError, match=r"data_in\[57\]"):
        double().eval(ds, num_workers=0, checkpoint_interval=INTERVAL, progressbar=False)
    crashed = lc.load(str(tmp_path / "ds"))
    (record,) = dataset_core(crashed).txn.base.evals.values()
    k = record["done"]
    assert record["status"] == "running"
    assert k == 50
    # One version per checkpoint, none of them visible as data: readers still see the old content.
    assert crashed.version == start + k // INTERVAL
    np.testing.assert_array_equal(crashed.x.numpy(), np.arange(N))

    monkeypatch.delenv(FAIL_AT)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv(CALLS, str(calls))
    result = double().eval(crashed, num_workers=2, checkpoint_interval=INTERVAL, progressbar=False)
    assert (result.inputs, result.resumed_from) == (N, k)
    assert sorted(_calls(calls)) == list(range(k, N))  # each input once, the preflight's included
    np.testing.assert_array_equal(lc.load(str(tmp_path / "ds")).x.numpy(), 2 * np.arange(N))
    # The version the eval started from is still there, unchanged.
    np.testing.assert_array_equal(lc.load(str(tmp_path / "ds"), version=start).x.numpy(), np.arange(N))


@pytest.mark.parametrize("in_place", [False, True], ids=["into-other", "in-place"])
def test_completed_rerun_is_a_noop_returning_the_earlier_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    """Rerunning a completed checkpointed eval commits nothing and returns the first run's EvalResult."""
    src = make_numbers(tmp_path / "src", N)
    out = None if in_place else make_out(tmp_path / "out")
    path = tmp_path / ("src" if in_place else "out")
    first = double().eval(src, out, num_workers=2, checkpoint_interval=INTERVAL, progressbar=False)
    before = versions(path)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv(CALLS, str(calls))
    with pytest.warns(lc.LakeComputeWarning, match=r"already completed .* at version \d+; nothing was"):
        again = double().eval(src, out, num_workers=2, checkpoint_interval=INTERVAL, progressbar=False)
    assert (again.inputs, again.outputs, again.failed, again.version) == (
        first.inputs,
        first.outputs,
        first.failed,
        first.version,
    )
    assert again.resumed_from == 0  # nothing was resumed: the eval had completed
    assert versions(path) == before
    assert _calls(calls) == []  # not even the preflight sample runs
    np.testing.assert_array_equal(lc.load(str(path)).x.numpy(), 2 * np.arange(N))


def test_completed_rerun_keeps_ignored_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A no-op rerun of an eval run with ignore_errors reports the same skipped samples as the first run."""
    out = make_out(tmp_path / "out")
    monkeypatch.setenv(FAIL_AT, "33")
    kw = {"num_workers": 2, "checkpoint_interval": INTERVAL, "ignore_errors": True, "progressbar": False}
    first = double().eval(list(range(N)), out, **kw)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        again = double().eval(list(range(N)), out, **kw)
    assert first.failed_indices == again.failed_indices == [33]
    assert again.failed[0].message == "injected failure at 33"
    assert again.version == first.version


def test_unfingerprintable_argument_is_named(tmp_path: Path) -> None:
    """An argument without a stable identity is named in a warning (with rerun=True as the way out), and
    the checkpointed eval runs, recorded with the argument known by its type."""
    out = make_out(tmp_path / "out")
    with pytest.warns(lc.LakeComputeWarning, match=r"argument 'extra' of double_with \(a lock\).*rerun=True"):
        double_with(extra=threading.Lock()).eval(
            list(range(N)), out, checkpoint_interval=INTERVAL, progressbar=False
        )
    np.testing.assert_array_equal(lc.load(str(tmp_path / "out")).x.numpy(), 2 * np.arange(N))
    assert evals_of(lc.load(str(tmp_path / "out"))).records()  # recorded: a rerun is recognised


def test_streamed_input_cannot_be_checkpointed(tmp_path: Path) -> None:
    """A length-less iterable with checkpoint_interval raises FingerprintError naming data_in's type."""
    out = make_out(tmp_path / "out")
    stream = (i for i in range(N))
    with pytest.raises(lc.FingerprintError, match=r"data_in, a generator, is a stream without a length"):
        double().eval(stream, out, checkpoint_interval=INTERVAL, progressbar=False)
    assert lc.load(str(tmp_path / "out")).version == out.version


def test_changed_argument_is_a_new_eval(tmp_path: Path) -> None:
    """A rerun with different bound arguments does not reuse the first eval's checkpoint record."""
    out = make_out(tmp_path / "out")
    double_with(extra=[1, 2]).eval(list(range(N)), out, checkpoint_interval=INTERVAL, progressbar=False)
    second = double_with(extra=[1, 3]).eval(
        list(range(N)), out, checkpoint_interval=INTERVAL, progressbar=False
    )
    assert second.resumed_from == 0
    assert len(lc.load(str(tmp_path / "out")).x) == 2 * N
