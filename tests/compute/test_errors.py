"""Error paths: TransformError's index, sample, function and cause; fail fast; nothing committed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import multiprocess
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched, read_lines, snapshot, unrecorded
from tests.helpers import make_numbers, make_out, numbers


class BadPixelError(ValueError):
    """A user exception that pickles: it must arrive as itself, also from a worker process."""


class UnpicklableError(Exception):
    """A user exception whose constructor takes other arguments than ``.args``: it cannot be unpickled."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")
        self.code = code


def _value(sample_in: Any) -> int:
    """The number a sample holds, for list and dataset input alike."""
    if hasattr(sample_in, "keys"):
        return int(sample_in.x.numpy())
    return int(sample_in)


@lc.compute
def fail_at(sample_in, sample_out, bad):
    x = _value(sample_in)
    if x == bad:
        raise BadPixelError(f"pixel {x} is bad")
    sample_out.y.append(x)


@lc.compute
def duplicate(sample_in, sample_out):
    sample_out.x.extend([int(sample_in), int(sample_in)])


@lc.compute
def pass_y(sample_in, sample_out):
    sample_out.y.append(sample_in.y.numpy())


@lc.compute
def fail_on_second_copy(sample_in, sample_out, bad):
    # Sees each input twice (after `duplicate`); fails on one copy of input `bad`.
    x = int(sample_in.x.numpy())
    if x == bad:
        raise BadPixelError(f"copy of {x} is bad")
    sample_out.y.append(x)


@lc.compute
def fail_unpicklable(sample_in, sample_out, bad):
    if sample_in == bad:
        raise UnpicklableError(7, f"sample {sample_in} cannot be read")
    sample_out.y.append(sample_in)


@lc.compute
def counted(sample_in, sample_out, log, bad, delay):
    with open(log, "a") as f:
        f.write(f"{sample_in}\n")
    if sample_in == bad:
        raise BadPixelError(f"sample {sample_in} is bad")
    time.sleep(delay)
    sample_out.y.append(sample_in)


@lc.compute
def fail_every_seventh(sample_in, sample_out):
    if sample_in % 7 == 0:
        raise (KeyError if sample_in % 2 else BadPixelError)(f"no {sample_in}")
    sample_out.y.append(sample_in if sample_in != 10 else 300)


@lc.compute
def write_unknown_at(sample_in, sample_out, bad):
    sample_out.y.append(sample_in)
    if sample_in == bad:
        sample_out.labelz.append(1)


@lc.compute
def logged_value(sample_in, sample_out, log, value_at_bad, bad):
    with open(log, "a") as f:
        f.write(f"{sample_in} {os.getpid()} {threading.current_thread().name}\n")
    sample_out.y.append(value_at_bad if sample_in == bad else sample_in)


@lc.compute
def logged_unknown(sample_in, sample_out, log):
    with open(log, "a") as f:
        f.write(f"{sample_in} {os.getpid()} {threading.current_thread().name}\n")
    sample_out.append({"y": sample_in, "nope": sample_in})


@lc.compute
def flip_rows(sample_in, sample_out, bad):
    x = int(sample_in.x.numpy())
    if x == bad:
        raise BadPixelError(f"pixel {x} is bad")
    sample_out.x.append(-x)


def _assert_no_workers_left() -> None:
    assert multiprocess.active_children() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("lakecompute-worker")]


INPUT_KINDS = ["list", "dataset", "generator"]


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_transform_error_attributes(scheduler: Sched, tmp_path: Path, kind: str) -> None:
    """A failure in a worker raises TransformError with index, sample, function, cause and message."""
    n, bad = 40, 13
    data_in: Any = {"list": list(range(n)), "generator": numbers(n)}.get(kind)
    if kind == "dataset":
        data_in = make_numbers(tmp_path / "in", n)
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with unrecorded(kind == "generator"), pytest.raises(lc.TransformError) as info:
        fail_at(bad=bad).eval(data_in, out, **scheduler.kw)
    err = info.value
    assert err.index == bad
    assert err.function == "fail_at"
    assert _value(err.sample) == bad
    assert type(err.__cause__) is BadPixelError
    assert str(err.__cause__) == "pixel 13 is bad"
    where = "data_in[13] (dataset row 13)" if kind == "dataset" else "data_in[13]"
    assert err.row == (bad if kind == "dataset" else None)
    assert str(err).startswith(f"Transform 'fail_at' failed on {where}: BadPixelError: pixel 13 is bad")
    _assert_no_workers_left()


def test_transform_error_in_a_later_pipeline_stage(scheduler: Sched, tmp_path: Path) -> None:
    """A failure in step 2 of a pipeline names step 2 and the index of the input in data_in."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    pipeline = lc.compose([duplicate(), fail_on_second_copy(bad=21)])
    with pytest.raises(lc.TransformError, match=r"'fail_on_second_copy' failed on data_in\[21\]") as info:
        pipeline.eval(list(range(30)), out, **scheduler.kw)
    assert info.value.index == 21
    assert info.value.sample == 21
    assert info.value.function == "fail_on_second_copy"
    assert type(info.value.__cause__) is BadPixelError
    assert str(info.value.__cause__) == "copy of 21 is bad"
    assert info.value.step == (1, "fail_on_second_copy")
    assert info.value.step_input == {"x": 21}  # the row step 1 was given (written by duplicate)


def test_transform_error_step_of_a_first_step(scheduler: Sched, tmp_path: Path) -> None:
    """A failure in the first step (or a single function) says step 0, whose input is the sample."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    pipeline = lc.compose([fail_at(bad=7), pass_y()])
    with pytest.raises(lc.TransformError) as info:
        pipeline.eval(list(range(30)), out, **scheduler.kw)
    assert (info.value.step, info.value.step_input, info.value.sample) == ((0, "fail_at"), 7, 7)
    with pytest.raises(lc.TransformError) as info:
        fail_at(bad=7).eval(
            list(range(30)), make_out(tmp_path / "out2", y={"dtype": "int64"}), **scheduler.kw
        )
    assert (info.value.step, info.value.step_input) == ((0, "fail_at"), 7)


def test_transform_error_cause_survives_processes(tmp_path: Path) -> None:
    """Across processes the cause is the user's exception itself, with the worker's traceback attached."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with pytest.raises(lc.TransformError) as info:
        fail_at(bad=17).eval(list(range(40)), out, num_workers=2, scheduler="processed", progressbar=False)
    cause = info.value.__cause__
    assert type(cause) is BadPixelError
    assert cause.args == ("pixel 17 is bad",)
    assert "in fail_at" in info.value.remote_traceback
    assert 'raise BadPixelError(f"pixel {x} is bad")' in info.value.remote_traceback


def test_transform_error_unpicklable_cause(scheduler: Sched, tmp_path: Path) -> None:
    """An exception that cannot travel arrives as RemoteError with its type name, message and traceback."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with pytest.raises(lc.TransformError) as info:
        fail_unpicklable(bad=9).eval(list(range(30)), out, **scheduler.kw)
    err = info.value
    assert (err.index, err.sample, err.function) == (9, 9, "fail_unpicklable")
    assert "UnpicklableError: code 7: sample 9 cannot be read" in str(err)
    cause = err.__cause__
    if scheduler.name == "processed":
        assert isinstance(cause, lc.RemoteError)
        assert cause.type_name.endswith("UnpicklableError")
        assert cause.message == "code 7: sample 9 cannot be read"
        assert "in fail_unpicklable" in cause.traceback_text
        assert "raise UnpicklableError(7" in cause.traceback_text
    else:
        assert type(cause) is UnpicklableError
        assert cause.code == 7


def test_fail_fast_at_index_zero_runs_one_sample(scheduler: Sched, tmp_path: Path) -> None:
    """A failure at index 0 is found by the preflight: one sample runs, and no worker ever starts."""
    log = tmp_path / "log"
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with pytest.raises(lc.TransformError) as info:
        counted(log=str(log), bad=0, delay=0.0).eval(list(range(2000)), out, **scheduler.kw)
    assert (info.value.index, info.value.sample) == (0, 0)
    assert read_lines(log) == ["0"]


def test_fail_fast_cancels_outstanding_work(scheduler: Sched, tmp_path: Path) -> None:
    """A failure early in the first task stops the run long before the rest of the input is processed."""
    n = 4000
    log = tmp_path / "log"
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with pytest.raises(lc.TransformError) as info:
        counted(log=str(log), bad=2, delay=0.001).eval(list(range(n)), out, **scheduler.kw)
    assert info.value.index == 2
    done = len(read_lines(log))
    # Tasks hold n / (4 * workers) = 500 inputs: at most the failing task's start and one other task ran.
    assert done < n // 4, done
    _assert_no_workers_left()  # no process or thread is left that could write to the log
    assert len(read_lines(log)) == done
    assert len(out.y) == 0


def _filled_out(path: Path) -> lc.Dataset:
    out = make_out(path, y={"dtype": "int64"})
    out.y.extend([-1, -2, -3])
    return out


def test_failed_eval_commits_nothing(scheduler: Sched, tmp_path: Path) -> None:
    """A failure after many tasks completed leaves data_out's version and content as they were."""
    out = _filled_out(tmp_path / "out")
    before, version = snapshot(out), out.version
    with pytest.raises(lc.TransformError):
        fail_at(bad=1900).eval(list(range(2000)), out, **scheduler.kw)
    assert out.version == version
    assert snapshot(out) == before
    reopened = lc.load(str(tmp_path / "out"))
    assert reopened.version == version
    assert snapshot(reopened) == before
    # data_out stays usable: the next eval appends after the old content, nothing of the failed one.
    fail_at(bad=-1).eval(list(range(5)), out, **scheduler.kw)
    assert out.y.numpy().tolist() == [-1, -2, -3, 0, 1, 2, 3, 4]
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [-1, -2, -3, 0, 1, 2, 3, 4]


def test_failed_in_place_eval_leaves_data_intact(scheduler: Sched, tmp_path: Path) -> None:
    """A failing in-place eval leaves the dataset's content and version as they were, also on disk."""
    ds = make_numbers(tmp_path / "ds", 1000)
    before, version = snapshot(ds), ds.version
    with pytest.raises(lc.TransformError) as info:
        flip_rows(bad=990).eval(ds, **scheduler.kw)
    assert info.value.index == 990
    assert int(info.value.sample.x.numpy()) == 990
    assert ds.version == version
    assert snapshot(ds) == before
    assert snapshot(lc.load(str(tmp_path / "ds"))) == before
    flip_rows(bad=-1).eval(ds, **scheduler.kw)
    assert ds.x.numpy().tolist() == [-i for i in range(1000)]


def test_ignore_errors_skips_and_reports(scheduler: Sched, tmp_path: Path) -> None:
    """``ignore_errors=True`` skips failing samples (index 0 too) and lists each with its error."""
    out = make_out(tmp_path / "out", y={"dtype": "uint8"})
    result = fail_every_seventh().eval(list(range(60)), out, ignore_errors=True, **scheduler.kw)
    bad = sorted([*range(0, 60, 7), 10])
    assert result.failed_indices == bad
    assert [f.index for f in result.failed] == bad
    assert out.y.numpy().tolist() == [i for i in range(60) if i not in bad]
    assert result.inputs == 60
    assert result.outputs == {"y": 60 - len(bad)}
    by_index = {f.index: f for f in result.failed}
    assert by_index[0].error_type == "BadPixelError"
    assert by_index[0].message == "no 0"
    assert by_index[7].error_type == "KeyError"
    assert by_index[10].error_type == "InvalidSampleError"
    assert "uint8" in by_index[10].message
    assert all(f.function == "fail_every_seventh" for f in result.failed)
    assert "in fail_every_seventh" in by_index[7].traceback
    assert repr(by_index[0]) == "FailedSample(index=0, BadPixelError: no 0)"


@pytest.mark.parametrize("bad", [0, 6])
def test_unknown_tensor_names_it_and_the_known_ones(scheduler: Sched, tmp_path: Path, bad: int) -> None:
    """Writing a tensor data_out lacks fails naming it and the known ones (in preflight or a worker)."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"}, z={"dtype": "int64"})
    with pytest.raises(lc.TransformError, match=r"'labelz' does not exist") as info:
        write_unknown_at(bad=bad).eval(list(range(20)), out, skip_ok=True, **scheduler.kw)
    err = info.value
    assert (err.index, err.sample, err.function) == (bad, bad, "write_unknown_at")
    assert isinstance(err.__cause__, lc.TensorDoesNotExistError)
    assert err.__cause__.name == "labelz"
    assert err.__cause__.known == ["y", "z"]
    assert "Known tensors: ['y', 'z']" in str(err)
    assert len(out.y) == 0


@pytest.mark.parametrize("bad", [0, 6])
def test_value_that_does_not_fit_the_dtype(scheduler: Sched, tmp_path: Path, bad: int) -> None:
    """300 written to a uint8 tensor fails with the index of its input, in the preflight or in a worker."""
    out = make_out(tmp_path / "out", y={"dtype": "uint8"})
    log = tmp_path / "log"
    with pytest.raises(lc.TransformError, match=rf"'logged_value' failed on data_in\[{bad}\]") as info:
        logged_value(log=str(log), value_at_bad=300, bad=bad).eval(list(range(20)), out, **scheduler.kw)
    err = info.value
    assert (err.index, err.sample, err.function) == (bad, bad, "logged_value")
    assert isinstance(err.__cause__, lc.InvalidSampleError)
    assert err.__cause__.tensor == "y"
    assert "uint8" in str(err.__cause__)
    assert "Cannot store sample in tensor 'y'" in str(err)
    assert len(out.y) == 0


def test_preflight_runs_first_sample_alone_where_tasks_run(scheduler: Sched, tmp_path: Path) -> None:
    """The first sample runs alone, before any other, where the tasks run (a worker, when there are
    workers), and its problems surface before a second sample runs."""
    here = f"{os.getpid()} {threading.current_thread().name}"
    log = tmp_path / "log"
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with pytest.raises(lc.TransformError, match=r"'nope' does not exist") as info:
        logged_unknown(log=str(log)).eval(list(range(500)), out, **scheduler.kw)
    assert info.value.index == 0
    (line,) = read_lines(log)
    assert line.startswith("0 ")
    assert (line[2:] == here) == (scheduler.name == "serial")
    out2 = make_out(tmp_path / "out2", y={"dtype": "uint8"})
    with pytest.raises(lc.TransformError, match=r"data_in\[0\]") as info:
        logged_value(log=str(log), value_at_bad=300, bad=0).eval(list(range(500)), out2, **scheduler.kw)
    assert isinstance(info.value.__cause__, lc.InvalidSampleError)
    assert [x.split()[0] for x in read_lines(log)[1:]] == ["0"]


def test_transform_error_is_a_lakecompute_error() -> None:
    """TransformError derives from LakeComputeError, so one except clause catches every lakecompute error."""
    assert issubclass(lc.TransformError, lc.LakeComputeError)
    err = lc.TransformError("msg", 3, {"x": 1}, "f")
    assert (err.index, err.sample, err.function) == (3, {"x": 1}, "f")
    assert err.args == ("msg",)


_FAILING_SCRIPT = """
import lakecompute as lc

@lc.compute
def broken(sample_in, sample_out):
    sample_out.y.append(1 // (sample_in - 3))

out = lc.empty(OUT, overwrite=True)
out.create_tensor("y", dtype="int64")
broken().eval(list(range(10)), out, num_workers=WORKERS, progressbar=False)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_transform_error_at_the_terminal_is_one_short_traceback(tmp_path: Path, workers: int) -> None:
    """An uncaught TransformError prints one traceback block: the user's call first, their failing line and
    the cause last, not the engine's internals or a second worker traceback."""
    script = tmp_path / "user_script.py"
    body = _FAILING_SCRIPT.replace("OUT", repr(str(tmp_path / "out"))).replace("WORKERS", str(workers))
    script.write_text(body)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    err = done.stderr
    assert err.count("Traceback (most recent call last)") == 1
    block = err[err.index("Traceback (most recent call last)") :].splitlines()
    assert block[1].strip() == f'File "{script}", line 10, in <module>'  # the user's own call comes first
    assert len(block) <= 12
    assert block[-3:] == [
        f'  File "{script}", line 6, in broken',
        "    sample_out.y.append(1 // (sample_in - 3))",
        "Nothing of this run was written.",
    ]
    assert "TransformError: Transform 'broken' failed on data_in[3]: ZeroDivisionError" in err
    assert err.index("ZeroDivisionError: integer division or modulo by zero") < err.index("Traceback")


@lc.compute
def fails_late_on_3_and_at_once_on_13(sample_in: Any, sample_out: Any) -> None:
    """Input 3 fails after a pause (its task is still running when input 13's fails); input 13 at once."""
    i = int(sample_in)
    if i == 3:
        time.sleep(0.5)
    if i in (3, 13):
        raise BadPixelError(f"bad input {i}")
    sample_out.x.append(i)


def test_the_first_failing_input_is_reported_whatever_finishes_first(
    scheduler: Sched, tmp_path: Path
) -> None:
    """When inputs of two tasks fail, the eval waits for the tasks before the later failure and
    reports the first failing input, not whichever task failed first."""
    out = make_out(tmp_path / "out", x={"dtype": "int64"})
    with pytest.raises(lc.TransformError) as info:
        fails_late_on_3_and_at_once_on_13().eval(list(range(20)), out, **scheduler.kw)
    assert info.value.index == 3
    assert isinstance(info.value.__cause__, BadPixelError)
    assert str(info.value.__cause__) == "bad input 3"
    assert len(lc.load(str(tmp_path / "out")).x) == 0
