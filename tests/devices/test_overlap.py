"""Decode ∥ model ∥ encode inside a worker: the next block is read while the function runs, the previous one
written behind it. Timings here are ratios of stage times measured in the same run (sleep-based stages,
which release the GIL and do not stretch on a loaded machine), never wall-clock thresholds."""

from __future__ import annotations

import glob
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.compute._overlap import SWITCH_INTERVAL, quick_switches

ITEM = 1 << 19  # float64 values per input: 4 MiB, so a 16 MiB block holds 4 inputs


class SlowDecode(Sequence[np.ndarray]):
    """Inputs that take ``seconds`` each to produce (a codec-like step that sleeps, releasing the GIL): 4 MiB
    arrays stamped with their index and when their read started and ended; reading ``fail_at`` raises."""

    def __init__(self, n: int, seconds: float, fail_at: int = -1) -> None:
        self.n, self.seconds, self.fail_at = n, seconds, fail_at

    def __len__(self) -> int:
        return self.n

    def __lakecompute_fingerprint__(self) -> object:
        """What identifies this input for resuming: its settings (it computes its items from them)."""
        return [self.n, self.seconds, self.fail_at]

    @overload
    def __getitem__(self, i: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, i: slice) -> list[np.ndarray]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if i == self.fail_at:
            raise OSError(f"cannot decode input {i}")
        t0 = time.perf_counter()
        time.sleep(self.seconds)
        item = np.zeros(ITEM)
        item[:3] = (i, t0, time.perf_counter())
        return item


@lc.compute
def slow_model(
    item: np.ndarray, sample_out: Any, seconds: float, fail_at: int = -1, bad_at: int = -1
) -> None:
    """Take ``seconds`` (a model that releases the GIL); write (index, read start, read end, run start, run
    end). Fail on input ``fail_at``; write a value its tensor refuses for input ``bad_at``."""
    t0 = time.perf_counter()
    index = int(item[0])
    if index == fail_at:
        raise ValueError(f"model failed on {index}")
    time.sleep(seconds)
    row = np.array([item[0], item[1], item[2], t0, time.perf_counter()])
    sample_out.t.append("not a number" if index == bad_at else row)


def _out(tmp_path: Path) -> lc.Dataset:
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("t", dtype="float64")
    return out


def _stage_times(rows: np.ndarray) -> tuple[float, float, float]:
    """The worker's wall time over these inputs (first read started to last run ended), and the seconds
    spent reading and running them."""
    wall = rows[:, 4].max() - rows[:, 1].min()
    return wall, float((rows[:, 2] - rows[:, 1]).sum()), float((rows[:, 4] - rows[:, 3]).sum())


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("num_workers", "n", "seconds"), [(0, 1 + 48, 0.02), (1, 1 + 128, 0.01)])
def test_worker_wall_time_approaches_the_larger_stage(
    tmp_path: Path, num_workers: int, n: int, seconds: float
) -> None:
    """When decoding a block and running the function on it take the same time T, a worker takes about T
    per block, not 2T: its wall time is within 1.3x of the larger stage, in this run's own measurements."""
    out = _out(tmp_path)
    result = slow_model(seconds=seconds).eval(SlowDecode(n, seconds), out, num_workers=num_workers,
                                              progressbar=False)  # fmt: skip
    rows = out.t.numpy()
    assert rows[:, 0].tolist() == list(range(n))  # order and exactly once
    later = rows[1:]  # the first input is the preflight's, run before the tasks
    wall, read, run = _stage_times(later)
    assert read >= seconds * len(later)  # both stages really took ~T
    assert run >= seconds * len(later)
    assert wall <= 1.3 * max(read, run), (wall, read, run)
    assert wall <= 0.7 * (read + run), (wall, read, run)
    # The eval's own account of its stages agrees: the tasks' wall time is far below the sum of stages.
    stages = result.stages
    assert set(stages) == {"read", "run", "write", "wall"}
    assert 0.9 * read <= stages["read"] <= 1.5 * read, (stages, read)
    assert stages["wall"] <= 0.7 * (stages["read"] + stages["run"] + stages["write"]), stages


@pytest.mark.timeout(120)
def test_read_ahead_is_bounded(tmp_path: Path) -> None:
    """The reader runs at most one block (4 inputs) ahead of the block in use: while the function runs an
    input, at most 8 inputs have been read and not yet run (and more than 4: it does read ahead)."""
    out = _out(tmp_path)
    slow_model(seconds=0.02).eval(SlowDecode(1 + 40, 0.005), out, num_workers=0, progressbar=False)
    rows = out.t.numpy()[1:]
    leads = [int((rows[:, 1] < start).sum() - (rows[:, 4] <= start).sum()) for start in rows[:, 3]]
    assert 4 < max(leads) <= 8, leads


@pytest.mark.timeout(180)
def test_a_workers_next_task_is_read_before_it_starts(tmp_path: Path) -> None:
    """One worker, several tasks: once a task's blocks are all read, its readers take the worker's next task
    and start reading its first block, so every input's read starts before the input before it has run, a
    task's first input included. Before, each task began by reading its first block after the task before it
    had ended (inputs 34, 67 and 100 here): the function waited for it. Event order in one run."""
    out = _out(tmp_path)
    slow_model(seconds=0.02).eval(SlowDecode(1 + 128, 0.001), out, num_workers=1, progressbar=False)
    rows = out.t.numpy()
    assert rows[:, 0].tolist() == list(range(129))  # order and exactly once
    later = rows[1:]  # the first input is the preflight's, read when it runs
    pairs = zip(later[1:, 0], later[1:, 1], later[:-1, 4], strict=True)
    late = [int(i) for i, read_start, previous_ran in pairs if read_start > previous_ran]
    assert late == [], late


# The preflight reads its whole range (the first 64 inputs) before the tasks: failing reads lie past it.


@pytest.mark.timeout(120)
def test_function_failure_comes_before_a_later_blocks_read_failure(tmp_path: Path) -> None:
    """A block read ahead that fails to read does not hide the function's failure on an earlier block: the
    eval raises the TransformError of the earlier input, as without read-ahead."""
    out = _out(tmp_path)
    with pytest.raises(lc.TransformError) as info:
        slow_model(seconds=0.0, fail_at=73).eval(SlowDecode(100, 0.002, fail_at=78), out, num_workers=0,
                                                 progressbar=False)  # fmt: skip
    assert info.value.index == 73
    assert isinstance(info.value.__cause__, ValueError)
    assert len(lc.load(out.path).t) == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_write_failure_comes_before_a_later_blocks_function_failure(tmp_path: Path, num_workers: int) -> None:
    """A value refused in block k (found as the block is handed to the writer) is reported before the
    function's own failure on block k+1 (inputs 9 and 14: one task's consecutive blocks without workers,
    two tasks with): the earliest failing input wins, as without write-behind."""
    out = _out(tmp_path)
    model = slow_model(seconds=0.01, bad_at=9, fail_at=14)
    with pytest.raises(lc.TransformError) as info:
        model.eval(SlowDecode(40, 0.0), out, num_workers=num_workers, progressbar=False)
    assert info.value.index == 9
    assert isinstance(info.value.__cause__, lc.InvalidSampleError)
    assert len(lc.load(out.path).t) == 0


@pytest.mark.timeout(120)
def test_read_failure_is_raised_at_its_block(tmp_path: Path) -> None:
    """A read that fails is raised (as itself) when its block is reached; the blocks before it were run."""
    out = _out(tmp_path)
    with pytest.raises(OSError, match="cannot decode input 70"):
        slow_model(seconds=0.0).eval(SlowDecode(100, 0.0, fail_at=70), out, num_workers=0, progressbar=False)
    assert len(lc.load(out.path).t) == 0


@pytest.mark.timeout(120)
def test_checkpoints_and_resume_unchanged_by_overlap(tmp_path: Path) -> None:
    """With blocks read ahead and written behind, a failure keeps exactly the checkpointed prefix and the
    fixed rerun resumes there, every output once and in order."""
    out = _out(tmp_path)
    with pytest.raises(lc.TransformError):
        slow_model(seconds=0.0, fail_at=29).eval(SlowDecode(40, 0.0), out, num_workers=2,
                                                 checkpoint_interval=8, progressbar=False)  # fmt: skip
    assert lc.load(out.path).t.numpy()[:, 0].tolist() == list(range(24))
    with pytest.warns(lc.LakeComputeWarning, match="Resuming the unfinished eval"):  # the fix: fail_at gone
        result = slow_model(seconds=0.0).eval(SlowDecode(40, 0.0), lc.load(out.path), num_workers=2,
                                              checkpoint_interval=8, progressbar=False)  # fmt: skip
    assert result.resumed_from == 24
    assert lc.load(out.path).t.numpy()[:, 0].tolist() == list(range(40))


# -- the GIL: a writer and readers beside a function running Python ---------------------------------


def _vectors(tmp_path: Path, n: int) -> lc.Dataset:
    ds = lc.empty(str(tmp_path / "in"), overwrite=True)
    ds.create_tensor("x", htype="embedding", dtype="float32")
    ds.x.extend(np.arange(n * 256, dtype=np.float32).reshape(n, 256))
    return ds


@lc.compute
def _switches_seen(sample_in: Any, sample_out: Any, set_at: int = -1) -> None:
    """Write the interpreter's switch interval as this input saw it; set it to 3 ms at input ``set_at``."""
    if int(sample_in.x.numpy()[0]) // 256 == set_at:
        sys.setswitchinterval(0.003)
    sample_out.seen.append(np.float64(sys.getswitchinterval()))


def _seen(tmp_path: Path) -> lc.Dataset:
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("seen", dtype="float64")
    return out


@pytest.fixture
def switch_interval() -> Any:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("switch_interval")
def test_tasks_run_with_a_short_switch_interval_and_restore_it(tmp_path: Path) -> None:
    """While a task reads ahead and writes behind, threads waiting for the GIL get it within 0.2 ms (not
    the interpreter's 5 ms: each file a reader or writer touches would wait that long); afterwards the
    caller's interval is back. The preflight's input runs without those threads, at the caller's."""
    sys.setswitchinterval(0.005)
    out = _seen(tmp_path)
    _switches_seen().eval(_vectors(tmp_path, 300), out, num_workers=0, progressbar=False)
    seen = out.seen.numpy()
    assert seen[0] == pytest.approx(0.005)
    assert seen[1:].tolist() == pytest.approx([SWITCH_INTERVAL] * 299)
    assert sys.getswitchinterval() == pytest.approx(0.005)


@pytest.mark.usefixtures("switch_interval")
def test_a_shorter_or_changed_switch_interval_is_left_alone(tmp_path: Path) -> None:
    """A caller's interval shorter than ours is kept while tasks run; one that user code sets while they
    run is not undone at their end."""
    sys.setswitchinterval(0.0001)
    out = _seen(tmp_path)
    _switches_seen().eval(_vectors(tmp_path, 50), out, num_workers=0, progressbar=False)
    assert out.seen.numpy().tolist() == pytest.approx([0.0001] * 50)
    sys.setswitchinterval(0.005)
    out = _seen(tmp_path)
    _switches_seen(set_at=20).eval(_vectors(tmp_path, 50), out, num_workers=0, progressbar=False)
    assert out.seen.numpy()[21:].tolist() == pytest.approx([0.003] * 29)
    assert sys.getswitchinterval() == pytest.approx(0.003)


@pytest.mark.usefixtures("switch_interval")
def test_overlapping_tasks_restore_the_interval_when_the_last_ends() -> None:
    """Tasks on several threads at once (the threaded scheduler): the interval stays short until the last
    of them ends, then is the caller's again."""
    sys.setswitchinterval(0.005)
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[float] = []

    def first() -> None:
        with quick_switches():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with quick_switches():
            second_in.set()
            first_out.wait(10)
            seen.append(sys.getswitchinterval())  # the first task has ended; this one still runs
        seen.append(sys.getswitchinterval())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == pytest.approx([SWITCH_INTERVAL, 0.005])


@lc.compute
def _files_seen(sample_in: Any, sample_out: Any, out_path: str) -> None:
    """Write how many data chunk files the output holds as this input is run (a task's writes so far)."""
    files = glob.glob(os.path.join(out_path, "segments", "*", "data", "c", "*"))
    sample_out.y.append(sample_in.x.numpy())
    sample_out.files.append(np.int64(len(files)))


def test_a_tasks_outputs_are_stored_while_its_function_runs(tmp_path: Path) -> None:
    """Each block's outputs (8 MiB: 8,192 vectors of 1 KiB) are stored by the writer while the function
    runs the next ones, not held until the task's end: by the first input of the third block, the first
    block's 8 chunks are on disk (a 16 MiB buffer held them until the second block's end and after)."""
    from lakecompute.compute._plan import MAX_TASK  # inputs per block for 1 KiB inputs

    n = 1 + 3 * MAX_TASK
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("y", htype="embedding", dtype="float32")
    out.create_tensor("files", dtype="int64")
    _files_seen(out_path=out.path).eval(_vectors(tmp_path, n), out, num_workers=0, progressbar=False)
    files = out.files.numpy()
    third = 1 + 2 * MAX_TASK  # the preflight ran input 0; the task's blocks start at 1
    assert files[third] >= 8 + 1, files[third]  # the first block's chunks (and the preflight's tail)
    assert np.array_equal(out.y.numpy(), _vectors(tmp_path, n).x.numpy())  # every value, in order
