"""A class compute is built in every worker at once, and a successful eval calls it once per input."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import make_out, touch, wait_until


@lc.compute
class SlowModel:
    """Stands in for a model whose load takes a while: a load is under way until every load the eval is
    expected to start (``loads``) has begun, or 30 s have passed. Logs each load's start, its end and how
    many loads had begun by then, and a file per call."""

    def __init__(self, log_dir: str, loads: int) -> None:
        self.log_dir = Path(log_dir)
        where = f"{os.getpid()}-{threading.get_ident()}"
        began = time.time()
        touch(self.log_dir / "began" / where)
        try:
            wait_until(lambda: len(list((self.log_dir / "began").iterdir())) >= loads, 30, f"{loads} loads")
        except AssertionError:
            pass  # the loads ran one after another: the log says so, and the test fails on it
        seen = len(list((self.log_dir / "began").iterdir()))
        (self.log_dir / "inits" / where).write_text(f"{began} {time.time()} {seen}")

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        (self.log_dir / "calls" / f"{sample_in}.{uuid.uuid4().hex}").touch()
        sample_out.y.append(int(sample_in) * 2)


def _run(scheduler: Sched, tmp_path: Path, n: int) -> tuple[list[tuple[float, float, float]], Counter[int]]:
    for sub in ("began", "inits", "calls"):
        (tmp_path / sub).mkdir()
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    loads = 1 if scheduler.name == "serial" else 2
    SlowModel(log_dir=str(tmp_path), loads=loads).eval(list(range(n)), out, **scheduler.kw)
    assert out.y.numpy().tolist() == [2 * i for i in range(n)]
    inits = [tuple(map(float, p.read_text().split())) for p in (tmp_path / "inits").iterdir()]
    calls = Counter(int(p.name.split(".")[0]) for p in (tmp_path / "calls").iterdir())
    return sorted(inits), calls  # type: ignore[return-value]  # triples of floats


@pytest.mark.timeout(120)
def test_models_load_at_once_and_each_input_runs_once(scheduler: Sched, tmp_path: Path) -> None:
    """With 2 workers both loads overlap (the second starts before the first ends); every input is
    computed exactly once, the first-sample check included."""
    inits, calls = _run(scheduler, tmp_path, 200)
    assert calls == Counter(range(200))
    if scheduler.name == "serial":
        assert len(inits) == 1  # everything runs in the caller: one instance
        return
    assert len(inits) == 2, inits
    (_, first_end, first_saw), (second_start, _, second_saw) = inits
    assert (first_saw, second_saw) == (2, 2), "a load ended before the other began: they ran one at a time"
    assert second_start < first_end, "the second worker started loading only after the first finished"


class LoggedReads(Sequence[int]):
    """A sequence read by index (user code, so read on a thread of the worker) that logs each read: a
    file ``reads/<index>`` holding the reading process's pid."""

    def __init__(self, n: int, log_dir: str) -> None:
        self.n, self.log_dir = n, Path(log_dir)

    def __len__(self) -> int:
        return self.n

    def __lakecompute_fingerprint__(self) -> object:
        """Identifies the input: its length (its items are their indices)."""
        return self.n

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        # Written whole, then renamed: a reader that sees the file sees the pid (write_text creates the
        # file empty first, and a load checking at that moment read "").
        temp = self.log_dir / "reads" / f".{i}.{os.getpid()}.{threading.get_ident()}"
        temp.write_text(str(os.getpid()))
        os.replace(temp, self.log_dir / "reads" / str(i))
        return i


@lc.compute
class WaitsForFirstRead:
    """Stands in for a model load that takes as long as reading the first input: the load is under way
    until input 0 has been read (or 30 s have passed), and logs what it saw when it ended."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = Path(log_dir)
        first = self.log_dir / "reads" / "0"
        try:
            wait_until(first.exists, 30, "the first input's read")
        except AssertionError:
            pass  # the first read waited for the load to end: the log says so, and the test fails on it
        where = f"{os.getpid()}-{threading.get_ident()}"
        saw = first.read_text() if first.exists() else "nothing"
        (self.log_dir / "inits" / where).write_text(saw)

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        sample_out.y.append(int(sample_in) * 2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2])
def test_first_input_is_read_while_the_model_loads(tmp_path: Path, workers: int) -> None:
    """In worker processes, the preflight's first input is read while the worker's class ``__init__`` (a
    model load) is still running, not after it: every load saw input 0 read, by the preflight's worker."""
    for sub in ("reads", "inits"):
        (tmp_path / sub).mkdir()
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    WaitsForFirstRead(log_dir=str(tmp_path)).eval(
        LoggedReads(40, str(tmp_path)), out, scheduler="processed", num_workers=workers, progressbar=False
    )
    assert out.y.numpy().tolist() == [2 * i for i in range(40)]
    inits = {p.name: p.read_text() for p in (tmp_path / "inits").iterdir()}
    # The preflight's worker builds first. The warm-up meant for the second goes to the shared queue: on a
    # busy machine the first worker may take it (and the 40 inputs) before the second has started, and
    # then only one worker ever builds. Every build that ran is checked below.
    assert 1 <= len(inits) <= workers, inits
    reader = (tmp_path / "reads" / "0").read_text()
    assert reader != str(os.getpid()), "input 0 was read in the caller, not in a worker"
    assert sorted(inits.values()) == [reader] * len(inits), f"a load ended before input 0 was read: {inits}"


class FirstReadFails(LoggedReads):
    """A `LoggedReads` whose input 0 cannot be read."""

    def __getitem__(self, i: int | slice) -> Any:
        if i == 0:
            raise OSError("cannot read input 0")
        return super().__getitem__(i)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_first_read_raises_its_own_error(tmp_path: Path, workers: int) -> None:
    """The first input, read ahead while the model loads, raises what reading it raised, where the eval
    would have without the read-ahead; nothing is written."""
    for sub in ("reads", "inits"):
        (tmp_path / sub).mkdir()
    (tmp_path / "reads" / "0").write_text("never read")  # lets the loads end at once
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with pytest.raises(OSError, match="cannot read input 0"):
        WaitsForFirstRead(log_dir=str(tmp_path)).eval(
            FirstReadFails(40, str(tmp_path)), out, num_workers=workers, progressbar=False
        )
    assert len(lc.load(str(tmp_path / "out")).y) == 0
