"""Fix and rerun: data_out holding the kept outputs of an unfinished eval is continued, or refused.

The same eval resumes; the same eval with its code, arguments or globals changed resumes after the kept
outputs and warns; any other eval raises EvalConflictError, and ``rerun=True`` drops the kept outputs
first. Nothing is ever appended after an unfinished eval's outputs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.datasets import evals_of
from tests.compute.compute_helpers import Sched
from tests.helpers import make_numbers, make_out

N = 1000
FAIL_AT = 700
INTERVAL = 100

SCRIPT = """
import os, sys, uuid
import lakecompute as lc
from lakecompute.datasets import evals_of

OUT, SCHEDULER, WORKERS, CALLS = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
LIMIT = {limit}


@lc.compute
def scale(sample_in, sample_out):
    with open(os.path.join(CALLS, f"{{sample_in}}.{{uuid.uuid4().hex}}"), "w"):
        pass  # one file per call
    {bug}
    sample_out.y.append(sample_in * 2)


result = scale().eval(list(range({n})), lc.load(OUT), checkpoint_interval={interval},
                      scheduler=SCHEDULER, num_workers=WORKERS, progressbar=False)
print("RESUMED", result.resumed_from)
"""

BUGGY_CODE = {"limit": N, "bug": f"if sample_in == {FAIL_AT}: raise ValueError('a bug')"}
FIXED_CODE = {"limit": N, "bug": ""}
BUGGY_GLOBAL = {"limit": FAIL_AT, "bug": "if sample_in >= LIMIT: raise ValueError('a bug')"}
FIXED_GLOBAL = {"limit": N, "bug": "if sample_in >= LIMIT: raise ValueError('a bug')"}


def _run_script(
    tmp_path: Path, scheduler: Sched, calls: Path, **code: Any
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"  # the same file, edited between the runs, as a user fixes a script
    script.write_text(textwrap.dedent(SCRIPT.format(n=N, interval=INTERVAL, **code)))
    calls.mkdir(exist_ok=True)
    args = [str(tmp_path / "out"), scheduler.name, str(scheduler.num_workers), str(calls)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=240
    )


def _calls(calls: Path) -> Counter[int]:
    return Counter(int(p.name.split(".")[0]) for p in calls.iterdir())


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("buggy", "fixed"), [(BUGGY_CODE, FIXED_CODE), (BUGGY_GLOBAL, FIXED_GLOBAL)], ids=["code", "global"]
)
def test_fix_the_bug_and_rerun_resumes_after_the_kept_outputs(
    scheduler: Sched, tmp_path: Path, buggy: dict[str, Any], fixed: dict[str, Any]
) -> None:
    """A script failing at input 700 (checkpoints every 100), fixed and run again: 700 kept + 300 resumed."""
    make_out(tmp_path / "out", y={"dtype": "int64"})
    first = _run_script(tmp_path, scheduler, tmp_path / "calls1", **buggy)
    assert first.returncode != 0
    assert "TransformError" in first.stderr
    assert "ValueError: a bug" in first.stderr
    assert len(lc.load(str(tmp_path / "out")).y) == FAIL_AT

    second = _run_script(tmp_path, scheduler, tmp_path / "calls2", **fixed)
    assert second.returncode == 0, second.stderr
    assert f"RESUMED {FAIL_AT}" in second.stdout
    assert "LakeComputeWarning: Resuming the unfinished eval (scale)" in second.stderr
    assert "made by the earlier code. Pass rerun=True to drop them and start over." in second.stderr
    np.testing.assert_array_equal(lc.load(str(tmp_path / "out")).y.numpy(), 2 * np.arange(N))
    assert _calls(tmp_path / "calls2") == Counter(range(FAIL_AT, N))  # each resumed input once, no kept one


@lc.compute
def double(sample_in: Any, sample_out: Any) -> None:
    """y = 2 * x, failing on x == 25 when FAIL is set."""
    x = int(sample_in.x.numpy()) if hasattr(sample_in, "x") else int(sample_in)
    if FAIL and x == 25:
        raise ValueError("a bug")
    sample_out.y.append(2 * x)


@lc.compute
def triple(sample_in: Any, sample_out: Any) -> None:
    """y = 3 * x."""
    sample_out.y.append(3 * int(sample_in))


FAIL = True


def _fail_first(out: lc.Dataset, data_in: Any, **kw: Any) -> None:
    """Run `double` failing at 25 with checkpoints every 10: 20 inputs kept."""
    global FAIL
    FAIL = True
    try:
        with pytest.raises(lc.TransformError):
            double().eval(data_in, out, checkpoint_interval=10, **kw)
    finally:
        FAIL = False


def test_other_eval_into_an_unfinished_output_is_refused(scheduler: Sched, tmp_path: Path) -> None:
    """Another eval raises EvalConflictError naming the unfinished eval; rerun=True drops its outputs."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    before = out.version
    _fail_first(out, list(range(40)), **scheduler.kw)
    kept = out.version
    for other in (triple(), double()):  # another function; the same one on other input
        with pytest.raises(lc.EvalConflictError) as info:
            other.eval(list(range(30)), out, **scheduler.kw)
        err = info.value
        assert (err.path, err.done, err.checkpoint_version, err.version, err.label) == (
            str(tmp_path / "out"),
            20,
            kept,
            kept,
            "double",
        )
        assert "holds the outputs of the first 20 inputs of an unfinished eval (double" in str(err)
        assert "Pass rerun=True to drop the unfinished eval's outputs" in str(err)
        assert "or write into a fresh data_out" in str(err)
        assert lc.load(str(tmp_path / "out")).version == kept  # nothing written

    result = triple().eval(list(range(30)), out, rerun=True, **scheduler.kw)
    reloaded = lc.load(str(tmp_path / "out"))
    np.testing.assert_array_equal(reloaded.y.numpy(), 3 * np.arange(30))  # only the new eval
    assert result.resumed_from == 0
    dropped = lc.load(str(tmp_path / "out"), version=kept + 1)
    assert len(dropped.y) == 0
    assert evals_of(dropped).records() == evals_of(lc.load(str(tmp_path / "out"), version=before)).records()
    assert [e["message"] for e in reloaded.log()][-2:] == [
        "drop unfinished eval double (rerun=True)",
        "eval triple",
    ]


def test_rerun_true_starts_an_unfinished_eval_over(scheduler: Sched, tmp_path: Path) -> None:
    """rerun=True on the unfinished eval itself drops its kept outputs and writes each output once."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    _fail_first(out, list(range(40)), **scheduler.kw)
    result = double().eval(list(range(40)), out, rerun=True, checkpoint_interval=10, **scheduler.kw)
    assert result.resumed_from == 0
    np.testing.assert_array_equal(lc.load(str(tmp_path / "out")).y.numpy(), 2 * np.arange(40))


def test_same_eval_resumes_without_a_warning(tmp_path: Path) -> None:
    """The unchanged eval resumes after its checkpoint, silently (pytest turns warnings into errors)."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    global FAIL
    FAIL = True
    with pytest.raises(lc.TransformError):
        double().eval(list(range(40)), out, checkpoint_interval=10, progressbar=False)
    # The same code and globals as the failed run (FAIL is read by value: it must not change).
    try:
        with pytest.raises(lc.TransformError):
            double().eval(list(range(40)), out, checkpoint_interval=10, progressbar=False)
        assert len(lc.load(str(tmp_path / "out")).y) == 20
    finally:
        FAIL = False


def test_fixed_in_place_eval_resumes_with_a_warning(tmp_path: Path) -> None:
    """In place, an unfinished eval's parked outputs are continued by its fixed code, with the warning."""
    ds = make_numbers(tmp_path / "ds", 40)
    ds.create_tensor("y", dtype="int64")
    _fail_first(ds, ds, progressbar=False, skip_ok=True)
    assert len(lc.load(str(tmp_path / "ds")).y) == 0  # in place: nothing visible before the end
    with pytest.warns(
        lc.LakeComputeWarning, match=r"Resuming the unfinished eval \(double\).* first 20 inputs"
    ):
        result = double().eval(ds, checkpoint_interval=10, skip_ok=True, progressbar=False)
    assert result.resumed_from == 20
    final = lc.load(str(tmp_path / "ds"))
    np.testing.assert_array_equal(final.y.numpy(), 2 * np.arange(40))
    np.testing.assert_array_equal(final.x.numpy(), np.arange(40))
