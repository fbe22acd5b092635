"""What an eval writes: 1:N, filters, order under stragglers, batches, skip_ok, check_lengths, padding."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched, assert_same, reference, snapshot
from tests.helpers import make_numbers, make_out


@lc.compute
def three_each(sample_in, sample_out):
    for k in range(3):
        sample_out.append({"y": int(sample_in) * 10 + k, "tag": f"{int(sample_in)}.{k}"})


@lc.compute
def keep_odd(sample_in, sample_out):
    if int(sample_in.x.numpy()) % 2:
        sample_out.y.append(sample_in.x.numpy())


@lc.compute
def drop_below(sample_in, sample_out, limit):
    if sample_in >= limit:
        sample_out.append({"y": sample_in, "z": -sample_in})


@lc.compute
def slow_head(sample_in, sample_out, slow_until, delay):
    # The first samples are stragglers: their task finishes after the tasks that follow it.
    if sample_in < slow_until:
        time.sleep(delay)
    sample_out.y.append(sample_in)


@lc.compute
def double_batch(sample_in, sample_out):
    x = sample_in.x.numpy()
    sample_out.y.extend(x * 2)
    sample_out.batch_len.extend([len(x)] * len(x))


@lc.compute
def sum_list_batch(sample_in, sample_out):
    sample_out.y.extend([v + 100 for v in sample_in])


@lc.compute
def only_x(sample_in, sample_out):
    sample_out.x.append(sample_in)


@lc.compute
def x_twice_y_once(sample_in, sample_out):
    sample_out.x.extend([sample_in, sample_in])
    sample_out.y.append(sample_in)


@lc.compute
def copy_padded(sample_in, sample_out):
    sample_out.a.append(sample_in.a.numpy())
    sample_out.b_size.append(sample_in.b.numpy().size)


@lc.compute
def to_scratch(sample_in, sample_out):
    sample_out.append({"scratch": np.full(3, sample_in), "note": f"n{sample_in}"})


@lc.compute
def from_scratch(sample_in, sample_out):
    sample_out.x.append(int(sample_in.scratch.numpy().sum()) + len(sample_in.note.text()))


@lc.compute
def ints_then_floats(sample_in, sample_out, switch):
    sample_out.x.append(sample_in if sample_in < switch else sample_in + 0.5)


def test_eval_one_to_many(scheduler: Sched, tmp_path: Path) -> None:
    """One input giving three outputs writes all of them, grouped by input and in input order."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"}, tag={"htype": "text"})
    result = three_each().eval(list(range(25)), out, **scheduler.kw)
    rows = [{"y": i * 10 + k, "tag": f"{i}.{k}"} for i in range(25) for k in range(3)]
    assert_same(out, reference(tmp_path / "ref", out, rows))
    assert result.inputs == 25
    assert result.outputs == {"y": 75, "tag": 75}


def test_eval_filter_keeps_order(scheduler: Sched, tmp_path: Path) -> None:
    """A filter (N:0 for the dropped inputs) keeps the survivors in input order."""
    ds = make_numbers(tmp_path / "in", 50)
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    result = keep_odd().eval(ds, out, **scheduler.kw)
    assert_same(out, reference(tmp_path / "ref", out, [{"y": i} for i in range(1, 50, 2)]))
    assert result.inputs == 50
    assert result.outputs == {"y": 25}


def test_eval_filter_with_empty_start_needs_no_skip_ok(scheduler: Sched, tmp_path: Path) -> None:
    """A filter whose first outputs (including the preflight sample's) are empty works without skip_ok."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"}, z={"dtype": "int64"})
    result = drop_below(limit=30).eval(list(range(40)), out, **scheduler.kw)
    rows = [{"y": i, "z": -i} for i in range(30, 40)]
    assert_same(out, reference(tmp_path / "ref", out, rows))
    assert result.outputs == {"y": 10, "z": 10}


def test_eval_stragglers_keep_order(scheduler: Sched, tmp_path: Path) -> None:
    """When the first task is much slower than the rest, outputs still come in input order."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    slow_head(slow_until=8, delay=0.02).eval(list(range(64)), out, **scheduler.kw)
    assert out.y.numpy().tolist() == list(range(64))
    assert str(out.y.dtype) == "int64"


def test_eval_batch_size(scheduler: Sched, tmp_path: Path) -> None:
    """``batch_size=4`` gives the function stacked batches of 4 (the last one shorter), outputs in order."""
    ds = make_numbers(tmp_path / "in", 30)
    out = make_out(tmp_path / "out", y={"dtype": "int64"}, batch_len={"dtype": "int64"})
    result = double_batch().eval(ds, out, batch_size=4, **scheduler.kw)
    assert out.y.numpy().tolist() == [2 * i for i in range(30)]
    assert out.batch_len.numpy().tolist() == [4] * 28 + [2] * 2
    assert result.inputs == 30
    assert result.outputs == {"y": 30, "batch_len": 30}


def test_eval_batch_size_on_a_list(scheduler: Sched, tmp_path: Path) -> None:
    """With sequence input, a batch is a slice of the sequence."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    sum_list_batch().eval(list(range(23)), out, batch_size=5, **scheduler.kw)
    assert out.y.numpy().tolist() == [i + 100 for i in range(23)]


def test_eval_skip_ok(scheduler: Sched, tmp_path: Path) -> None:
    """A tensor of data_out the function never writes is an error naming it, unless ``skip_ok=True``."""
    out = make_out(tmp_path / "out", x={"dtype": "int64"}, y={"dtype": "int64"})
    with pytest.raises(lc.TransformError, match=r"but not \['y'\] of data_out") as info:
        only_x().eval(list(range(10)), out, **scheduler.kw)
    assert info.value.index == 0
    assert "skip_ok=True" in str(info.value.__cause__)
    assert len(out.x) == 0
    only_x().eval(list(range(10)), out, skip_ok=True, **scheduler.kw)
    assert out.x.numpy().tolist() == list(range(10))
    assert len(out.y) == 0


def test_eval_check_lengths(scheduler: Sched, tmp_path: Path) -> None:
    """Different counts per tensor for one input fail with check_lengths, and are allowed without it."""
    out = make_out(tmp_path / "out", x={"dtype": "int64"}, y={"dtype": "int64"})
    with pytest.raises(lc.TransformError, match=r"x_twice_y_once.*data_in\[0\]") as info:
        x_twice_y_once().eval(list(range(10)), out, **scheduler.kw)
    assert isinstance(info.value.__cause__, lc.InvalidArgumentError)
    assert "different numbers of samples per tensor" in str(info.value.__cause__)
    assert "check_lengths=False" in str(info.value.__cause__)
    assert info.value.sample == 0
    assert len(out.x) == len(out.y) == 0
    result = x_twice_y_once().eval(list(range(10)), out, check_lengths=False, **scheduler.kw)
    assert out.x.numpy().tolist() == [i for i in range(10) for _ in range(2)]
    assert out.y.numpy().tolist() == list(range(10))
    assert result.outputs == {"x": 20, "y": 10}


def test_eval_pad_data_in(scheduler: Sched, tmp_path: Path) -> None:
    """``pad_data_in=True`` runs to the longest tensor, giving empty samples for the shorter ones."""
    ds = make_out(tmp_path / "in", a={"dtype": "int32"}, b={"dtype": "int32"})
    ds.a.extend(np.arange(7, dtype="int32"))
    ds.b.extend(np.arange(4, dtype="int32"))
    out = make_out(tmp_path / "out", a={"dtype": "int32"}, b_size={"dtype": "int64"})
    with pytest.raises(lc.InvalidArgumentError, match=r"differ in length \('b' has 4, 'a' has 7\)"):
        copy_padded().eval(ds, out, **scheduler.kw)  # without padding: refused, never 4 rows silently
    assert copy_padded().eval(ds[:4], out, **scheduler.kw).inputs == 4  # a view of the shared rows
    assert out.a.numpy().tolist() == list(range(4))
    out = make_out(tmp_path / "out2", a={"dtype": "int32"}, b_size={"dtype": "int64"})
    result = copy_padded().eval(ds, out, pad_data_in=True, **scheduler.kw)
    assert result.inputs == 7
    assert out.a.numpy().tolist() == list(range(7))
    assert out.b_size.numpy().tolist() == [1] * 7  # a missing scalar is padded with 0 (one value)


def test_eval_pipeline_intermediate_tensors(scheduler: Sched, tmp_path: Path) -> None:
    """A middle step may write tensors data_out does not have; only the last step's outputs are stored."""
    out = make_out(tmp_path / "out", x={"dtype": "int64"})
    lc.compose([to_scratch(), from_scratch()]).eval(list(range(20)), out, **scheduler.kw)
    assert_same(out, reference(tmp_path / "ref", out, [{"x": 3 * i + len(f"n{i}")} for i in range(20)]))
    assert list(out.tensors) == ["x"]


@pytest.mark.parametrize("n", [40, 1000])
def test_eval_inferred_dtype_is_the_same_everywhere(scheduler: Sched, tmp_path: Path, n: int) -> None:
    """A generic tensor without a dtype gets one dtype, whatever tasks saw ints and which saw floats."""
    out = make_out(tmp_path / "out", x={})
    ints_then_floats(switch=n // 2).eval(list(range(n)), out, **scheduler.kw)
    rows = [{"x": i if i < n // 2 else i + 0.5} for i in range(n)]
    ref = reference(tmp_path / "ref", make_out(tmp_path / "template", x={}), rows)
    assert str(out.x.dtype) == "float64"
    assert_same(out, ref)
    assert snapshot(lc.load(str(tmp_path / "out"))) == snapshot(ref)


@lc.compute
def rank_switch(sample_in, sample_out, switch):
    i = int(sample_in.x.numpy()) if hasattr(sample_in, "keys") else sample_in
    sample_out.x.append(np.zeros(2, np.int64) if i < switch else np.zeros((2, 2), np.int64))


@pytest.mark.parametrize("in_place", [False, True])
def test_eval_rank_is_decided_once(scheduler: Sched, tmp_path: Path, in_place: bool) -> None:
    """The first sample fixes a new tensor's rank: a later sample of another rank is blamed by its index."""
    if in_place:
        data_in = out = make_numbers(tmp_path / "ds", 40)
        before = snapshot(out)
    else:
        data_in, out = list(range(40)), make_out(tmp_path / "out", x={})
    with pytest.raises(lc.TransformError, match=r"'rank_switch' failed on data_in\[\d+\]") as info:
        rank_switch(switch=20).eval(data_in, None if in_place else out, **scheduler.kw)
    # Every input from 20 on is bad; in parallel, whichever failing task reports first stops the run.
    assert info.value.index == 20 if scheduler.name == "serial" else info.value.index >= 20
    assert f"data_in[{info.value.index}]" in str(info.value)
    assert isinstance(info.value.__cause__, lc.InvalidSampleError)
    assert "same number of dimensions: expected 1, got 2" in str(info.value.__cause__)
    if in_place:
        assert snapshot(out) == before
    else:
        assert len(out.x) == 0
