"""The same eval twice writes its outputs once; evals run inside `with ds:` and after pending writes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_numbers, make_out

OFFSET = 100


@lc.compute
def shift(sample_in: Any, sample_out: Any, by: int) -> None:
    sample_out.y.append(int(sample_in) + by)


@lc.compute
def shift_global(sample_in: Any, sample_out: Any) -> None:
    sample_out.y.append(int(sample_in) + OFFSET)


def make_shift(k: int) -> Any:
    """A compute function whose behaviour comes from a captured variable."""

    @lc.compute
    def shift_by_k(sample_in: Any, sample_out: Any) -> None:
        sample_out.y.append(int(sample_in) + k)

    return shift_by_k


@lc.compute
def double_x(sample_in: Any, sample_out: Any) -> None:
    sample_out.x.append(sample_in.x.numpy() * 2)


def _out(tmp_path: Path) -> lc.Dataset:
    return make_out(tmp_path / "out", y={"dtype": "int64"})


def test_identical_rerun_is_a_noop_that_warns(scheduler: Sched, tmp_path: Path) -> None:
    """The second identical eval writes nothing, warns naming the version, and returns the first result."""
    out = _out(tmp_path)
    first = shift(by=1).eval(list(range(64)), out, **scheduler.kw)
    with pytest.warns(lc.LakeComputeWarning, match=rf"already completed .* at version {first.version}"):
        again = shift(by=1).eval(list(range(64)), out, **scheduler.kw)
    assert (again.inputs, again.outputs, again.version) == (64, {"y": 64}, first.version)
    assert len(lc.load(str(tmp_path / "out")).y) == 64


def test_rerun_true_writes_again(scheduler: Sched, tmp_path: Path) -> None:
    """rerun=True appends the outputs a second time, as asked."""
    out = _out(tmp_path)
    shift(by=1).eval(list(range(64)), out, **scheduler.kw)
    shift(by=1).eval(list(range(64)), out, rerun=True, **scheduler.kw)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == list(range(1, 65)) * 2


def test_changed_argument_or_input_is_a_new_eval(tmp_path: Path) -> None:
    """Another bound argument or another input is another eval: it writes."""
    out = _out(tmp_path)
    shift(by=1).eval(list(range(4)), out, progressbar=False)
    shift(by=2).eval(list(range(4)), out, progressbar=False)
    shift(by=2).eval(list(range(5)), out, progressbar=False)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [1, 2, 3, 4, 2, 3, 4, 5, 2, 3, 4, 5, 6]


def test_captured_variable_is_part_of_the_eval(tmp_path: Path) -> None:
    """Functions that differ only in a captured variable are different evals (k=2 does not skip k=3)."""
    out = _out(tmp_path)
    make_shift(2)().eval(list(range(3)), out, progressbar=False)
    make_shift(3)().eval(list(range(3)), out, progressbar=False)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [2, 3, 4, 3, 4, 5]


def test_global_read_by_the_function_is_part_of_the_eval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changing a module global the function reads makes the next run a new eval."""
    out = _out(tmp_path)
    shift_global().eval(list(range(3)), out, progressbar=False)
    monkeypatch.setattr(f"{__name__}.OFFSET", 200)
    shift_global().eval(list(range(3)), out, progressbar=False)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [100, 101, 102, 200, 201, 202]


def test_unfingerprintable_eval_is_recorded_by_type_and_warns(tmp_path: Path) -> None:
    """An eval whose function captures a value without identity (a lock) warns naming it; it is recorded
    with the value known by its type, so the same eval again is a no-op and rerun=True writes again."""
    out = _out(tmp_path)
    lock = threading.Lock()

    @lc.compute
    def with_lock(sample_in: Any, sample_out: Any) -> None:
        with lock:
            sample_out.y.append(int(sample_in))

    with pytest.warns(
        lc.LakeComputeWarning, match=r"cannot fingerprint variable 'lock' captured by .*rerun=True"
    ):
        with_lock().eval(list(range(3)), out, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning) as seen:
        with_lock().eval(list(range(3)), out, progressbar=False)
    assert ["cannot fingerprint" in str(w.message) for w in seen] == [True, False]  # then "already completed"
    with pytest.warns(lc.LakeComputeWarning, match="cannot fingerprint variable 'lock'"):
        with_lock().eval(list(range(3)), out, rerun=True, progressbar=False)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [0, 1, 2, 0, 1, 2]


def test_in_place_rerun_right_after_is_a_noop(tmp_path: Path) -> None:
    """In place, the same eval right after itself does nothing; after another commit it runs again."""
    ds = make_numbers(tmp_path / "ds", 5)
    double_x().eval(ds, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        double_x().eval(ds, progressbar=False)
    assert lc.load(str(tmp_path / "ds")).x.numpy().tolist() == [0, 2, 4, 6, 8]
    ds.x.append(5)
    double_x().eval(ds, progressbar=False)
    assert lc.load(str(tmp_path / "ds")).x.numpy().tolist() == [0, 4, 8, 12, 16, 10]


def test_eval_inside_with_block_commits_pending_changes_first(scheduler: Sched, tmp_path: Path) -> None:
    """Inside `with out:` the tensors created so far are committed as their own version, then the eval."""
    out = lc.empty(str(tmp_path / "out"))
    with out:
        out.create_tensor("y", dtype="int64")
        shift(by=0).eval(list(range(10)), out, **scheduler.kw)
        out.y.append(99)  # after the eval, the block goes on as usual
    again = lc.load(str(tmp_path / "out"))
    assert again.y.numpy().tolist() == [*range(10), 99]
    assert [e["message"] for e in again.log()][1:] == ["changes before eval", "eval shift", "append y"]


def test_eval_after_uncommitted_input_writes_reads_them(scheduler: Sched, tmp_path: Path) -> None:
    """Pending appends to data_in are committed first, so the workers read what the caller sees."""
    src = make_numbers(tmp_path / "src", 4)
    out = make_out(tmp_path / "out", x={"dtype": "int64"})
    with src:
        src.x.extend(np.arange(4, 8))
        double_x().eval(src, out, **scheduler.kw)
    assert lc.load(str(tmp_path / "out")).x.numpy().tolist() == [2 * i for i in range(8)]
    assert lc.load(str(tmp_path / "src")).x.numpy().tolist() == list(range(8))


def test_exception_after_eval_in_with_block_rolls_back_only_later_writes(tmp_path: Path) -> None:
    """The eval's commit stands; what the block wrote after it is rolled back with the exception."""
    out = lc.empty(str(tmp_path / "out"))

    def block() -> None:
        with out:
            out.create_tensor("y", dtype="int64")
            shift(by=0).eval(list(range(3)), out, progressbar=False)
            out.y.append(99)
            raise RuntimeError("later")

    with pytest.raises(RuntimeError, match="later"):
        block()
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [0, 1, 2]
