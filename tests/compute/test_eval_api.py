"""The eval surface: argument checks with clear messages, the progress bar, and EvalResult."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_numbers, make_out, numbers


@lc.compute
def never_called(sample_in, sample_out):
    raise AssertionError("a rejected eval must not run the function")


@lc.compute
def square(sample_in, sample_out):
    sample_out.y.append(int(sample_in) ** 2)


@lc.compute
def square_row(sample_in, sample_out):
    sample_out.x.append(int(sample_in.x.numpy()) ** 2)


BadCall = Callable[[Path], tuple[Any, Any, dict[str, Any]]]


def _out(p: Path) -> lc.Dataset:
    return make_out(p / "out", y={"dtype": "int64"})


def _mem_out(url: str) -> lc.Dataset:
    return make_out(url, y={"dtype": "int64"})


BAD_ARGUMENTS: dict[str, tuple[BadCall, type[Exception], str]] = {
    # name: (build (data_in, data_out, kwargs), expected error type, message regex)
    "num_workers-negative": (
        lambda p: ([1], _out(p), {"num_workers": -1}),
        lc.InvalidArgumentError,
        r"^Expected num_workers >= 0\. Got -1\.$",
    ),
    "num_workers-float": (
        lambda p: ([1], _out(p), {"num_workers": 2.0}),
        lc.InvalidTypeError,
        r"^Expected num_workers to be an int\. Got float: 2\.0\.$",
    ),
    "scheduler-unknown": (
        lambda p: ([1], _out(p), {"scheduler": "gpu-magic", "num_workers": 2}),
        lc.InvalidArgumentError,
        r"Unknown scheduler 'gpu-magic'\. Expected one of \[.*'processed'.*'serial'.*'threaded'.*\]",
    ),
    "scheduler-unknown-no-workers": (
        lambda p: ([1], _out(p), {"scheduler": "gpu-magic", "num_workers": 0}),
        lc.InvalidArgumentError,
        r"Unknown scheduler 'gpu-magic'",
    ),
    "scheduler-not-a-str": (
        lambda p: ([1], _out(p), {"scheduler": 3}),
        lc.InvalidTypeError,
        r"^Expected scheduler to be a name such as 'processed', or lc\.schedulers\.Ray\(\.\.\.\)\. Got 3\.$",
    ),
    "checkpoint_interval-negative": (
        lambda p: ([1], _out(p), {"checkpoint_interval": -1}),
        lc.InvalidArgumentError,
        r"^Expected checkpoint_interval >= 0\. Got -1\. Use 0 for no checkpoints\.$",
    ),
    "batch_size-zero": (
        lambda p: ([1], _out(p), {"batch_size": 0}),
        lc.InvalidArgumentError,
        r"^Expected batch_size >= 1\. Got 0\.$",
    ),
    "data_out-view": (
        lambda p: ([1], _out(p)[0:0], {}),
        lc.ReadOnlyError,
        r"data_out is a dataset view, which is read-only\. Pass a Dataset as data_out\.",
    ),
    "data_out-not-a-dataset": (
        lambda p: ([1], {"y": []}, {}),
        lc.InvalidTypeError,
        r"data_out must be a lakecompute Dataset\. Got dict\.",
    ),
    "data_out-without-tensors": (
        lambda p: ([1], lc.empty(str(p / "bare")), {}),
        lc.InvalidArgumentError,
        r"has no tensors\. Create them first",
    ),
    "data_in-str": (
        lambda p: ("abc", _out(p), {}),
        lc.InvalidTypeError,
        r"data_in must be a dataset, a sequence or an iterable of samples\. Got str; wrap a single sample",
    ),
    "data_in-not-iterable": (
        lambda p: (42, _out(p), {}),
        lc.InvalidTypeError,
        r"data_in must be a dataset, a sequence \(with len and indexing\) or an iterable\. Got int\.",
    ),
    "in-place-on-a-list": (
        lambda p: ([1, 2], None, {}),
        lc.InvalidArgumentError,
        r"data_out=None transforms data_in in place, so data_in must be a Dataset .* "
        r"Got list; pass a data_out",
    ),
    "in-place-on-a-view": (
        lambda p: (make_numbers(p / "in", 3)[0:2], None, {}),
        lc.InvalidArgumentError,
        r"data_in must be a Dataset \(not a view or a sequence\)\. Got DatasetView",
    ),
    "pad_data_in-on-a-list": (
        lambda p: ([1], _out(p), {"pad_data_in": True}),
        lc.InvalidArgumentError,
        r"pad_data_in=True is only for dataset input",
    ),
    "mem-data_out-with-processed": (
        lambda p: ([1], _mem_out("mem://compute-api-processed"), {"num_workers": 2}),
        lc.InvalidArgumentError,
        r"lives in this process's memory, which worker processes cannot write\. Use a local path, "
        r"or scheduler='threaded'",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_eval_rejects_bad_arguments(tmp_path: Path, case: str) -> None:
    """A bad eval argument raises a clear LakeComputeError before any sample runs or anything is written."""
    build, kind, message = BAD_ARGUMENTS[case]
    data_in, data_out, kwargs = build(tmp_path)
    version = data_out.version if isinstance(data_out, lc.Dataset) else None
    with pytest.raises(kind, match=message) as info:
        never_called().eval(data_in, data_out, progressbar=False, **kwargs)
    assert isinstance(info.value, lc.LakeComputeError)
    assert isinstance(info.value, (ValueError, TypeError, PermissionError))
    if version is not None:
        assert data_out.version == version


def test_eval_mem_data_out_works_with_threads() -> None:
    """An in-memory data_out is fine for the threaded scheduler, which shares the process."""
    out = _mem_out("mem://compute-api-threads")
    square().eval(list(range(20)), out, num_workers=2, scheduler="threaded", progressbar=False)
    assert out.y.numpy().tolist() == [i * i for i in range(20)]
    lc.delete("mem://compute-api-threads")


def test_eval_result_fields_and_repr(scheduler: Sched, tmp_path: Path) -> None:
    """EvalResult reports inputs, outputs per tensor, failures, seconds and the committed version."""
    out = _out(tmp_path)
    version = out.version
    result = square().eval(list(range(25)), out, **scheduler.kw)
    assert result.inputs == 25
    assert result.outputs == {"y": 25}
    assert result.failed == []
    assert result.failed_indices == []
    assert result.seconds > 0
    assert result.version == out.version == version + 1
    assert result.resumed_from == 0
    assert re.fullmatch(
        r"EvalResult\(inputs=25, outputs=\{'y': 25\}, failed=0, seconds=\d+\.\d{3}, "
        rf"version={version + 1}, seed={result.seed}\)",
        repr(result),
    )


def test_eval_result_in_place(tmp_path: Path) -> None:
    """An in-place eval's result names the new version of data_in."""
    ds = make_numbers(tmp_path / "ds", 10)
    version = ds.version
    result = square_row().eval(ds, num_workers=2, scheduler="threaded", progressbar=False)
    assert (result.inputs, result.outputs, result.version) == (10, {"x": 10}, version + 1)
    assert ds.x.numpy().tolist() == [i * i for i in range(10)]


def test_progressbar_shows_total(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``progressbar=True`` draws a tqdm bar on stderr, labelled with the function, totalling the input."""
    out = _out(tmp_path)
    square().eval(list(range(50)), out, num_workers=2, scheduler="threaded", progressbar=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "eval square" in captured.err
    assert re.search(r"\b0/50\b", captured.err)
    assert not re.search(r"/(?!50\b)\d+", captured.err)  # no other total ever shown
    # The bar stays on screen, followed by a line saying how the eval ended.
    assert re.search(r"eval square: 50 inputs -> 50 outputs in \d+\.\d s \(version \d+\)\n", captured.err)


def test_progressbar_streamed_input_has_no_total(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """For a generator (no length) the bar counts samples without inventing a total."""
    out = _out(tmp_path)
    square().eval(numbers(30), out, progressbar=True)
    err = capsys.readouterr().err
    assert "eval square" in err
    assert not re.search(r"\d+/\d+", err)


def test_progressbar_false_writes_nothing(
    scheduler: Sched, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``progressbar=False`` writes nothing to stdout or stderr, from this process or its workers."""
    out = _out(tmp_path)
    square().eval(list(range(50)), out, **scheduler.kw)
    assert capfd.readouterr() == ("", "")
