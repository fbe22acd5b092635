"""Every kind of ``data_in``: datasets, views, sequences, custom sequences, generators; empty input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched, assert_same, reference, unrecorded
from tests.helpers import make_numbers, make_out, numbers

N = 30


class TorchLike:
    """A stand-in for a torch or Hugging Face dataset: ``__len__`` and ``__getitem__``, tuple items."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        return np.full(2, i, dtype=np.int64), i


@lc.compute
def row_square(sample_in, sample_out):
    x = int(sample_in.x.numpy())
    sample_out.y.append(x * x)


@lc.compute
def item_square(sample_in, sample_out):
    x = int(np.asarray(sample_in).reshape(-1)[0])
    sample_out.y.append(x * x)


@lc.compute
def tuple_square(sample_in, sample_out):
    arr, label = sample_in
    sample_out.y.append(int(arr[0]) * label)


def _dataset(tmp_path: Path) -> lc.Dataset:
    return make_numbers(tmp_path / "in", N)


MASK = np.arange(N) % 3 == 1
INPUTS: dict[str, tuple[Callable[[Path], Any], Any, list[int]]] = {
    # name: (build data_in, compute function, the x values it covers in order)
    "dataset": (_dataset, row_square, list(range(N))),
    "view-slice": (lambda p: _dataset(p)[5:25], row_square, list(range(5, 25))),
    "view-step": (lambda p: _dataset(p)[1:29:4], row_square, list(range(1, 29, 4))),
    "view-index-list": (lambda p: _dataset(p)[[7, 3, 3, 29, 0]], row_square, [7, 3, 3, 29, 0]),
    "view-bool-mask": (lambda p: _dataset(p)[MASK], row_square, [i for i in range(N) if i % 3 == 1]),
    "list": (lambda p: list(range(N)), item_square, list(range(N))),
    "tuple": (lambda p: tuple(range(N)), item_square, list(range(N))),
    "range": (lambda p: range(N), item_square, list(range(N))),
    "numpy-1d": (lambda p: np.arange(N, dtype=np.int32), item_square, list(range(N))),
    "numpy-2d": (lambda p: np.arange(N)[:, None].repeat(3, axis=1), item_square, list(range(N))),
    "custom-sequence": (lambda p: TorchLike(N), tuple_square, list(range(N))),
    "generator": (lambda p: numbers(N), item_square, list(range(N))),
}


@pytest.mark.parametrize("kind", list(INPUTS))
def test_eval_data_in_kinds(scheduler: Sched, tmp_path: Path, kind: str) -> None:
    """Every kind of data_in gives the same dataset as a plain loop over it."""
    build, fn, xs = INPUTS[kind]
    data_in = build(tmp_path)
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with unrecorded(kind in ("custom-sequence", "generator")):
        result = fn().eval(data_in, out, **scheduler.kw)
    assert_same(out, reference(tmp_path / "ref", out, [{"y": x * x} for x in xs]))
    assert result.inputs == len(xs)
    assert result.outputs == {"y": len(xs)}
    assert result.failed == []


def test_eval_streamed_generator_is_consumed_lazily(scheduler: Sched, tmp_path: Path) -> None:
    """A long generator is read in tasks as it goes, and every item is transformed once, in order."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    with unrecorded():
        result = item_square().eval(numbers(3000), out, **scheduler.kw)
    assert result.inputs == 3000
    assert out.y.numpy().tolist() == [i * i for i in range(3000)]


EMPTY: dict[str, Callable[[Path], Any]] = {
    "list": lambda p: [],
    "generator": lambda p: numbers(0),
    "numpy": lambda p: np.zeros((0, 3)),
    "dataset": lambda p: make_numbers(p / "in", 0),
    "view": lambda p: make_numbers(p / "in", 5)[5:],
}


@pytest.mark.parametrize("kind", list(EMPTY))
def test_eval_empty_input_is_a_no_op(scheduler: Sched, tmp_path: Path, kind: str) -> None:
    """Empty input runs nothing, commits nothing and reports zero inputs and outputs."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    version = out.version
    fn = row_square if kind in ("dataset", "view") else item_square
    with unrecorded(kind == "generator"):
        result = fn().eval(EMPTY[kind](tmp_path), out, **scheduler.kw)
    assert result.inputs == 0
    assert result.outputs == {"y": 0}
    assert result.failed == []
    assert result.version == out.version == version
    assert lc.load(str(tmp_path / "out")).version == version


def test_stream_tasks_are_sized_in_bytes() -> None:
    """A stream of large items is cut into tasks of about max_bytes, not of a fixed item count, so the
    items the caller holds for tasks in flight stay bounded whatever the items' size."""
    from lakecompute.compute._inputs import IterableSource

    items = (np.zeros(1 << 20, dtype=np.uint8) for _ in range(20))  # 20 items of 1 MiB
    chunks = list(IterableSource(items).chunks(size=1024, max_bytes=4 << 20))
    assert [len(c) for c in chunks] == [4, 4, 4, 4, 4]
    small = list(IterableSource(iter(range(10))).chunks(size=4, max_bytes=4 << 20))
    assert [len(c) for c in small] == [4, 4, 2]
    batched = list(IterableSource(np.zeros((10, 1 << 20), np.uint8)).chunks(4, 3 << 20, multiple=2))
    assert [len(c) for c in batched] == [4, 4, 2]  # whole batches of 2, even past the byte limit


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_eval_generator_with_workers_that_are_not_forked(tmp_path: Path, start_method: str) -> None:
    """A generator streams to workers started by a fork server or spawned (as on S3): the live generator
    stays with the parent, which feeds its items with the tasks."""
    from functools import partial

    from lakecompute.schedulers import ProcessedScheduler, register_scheduler, unregister_scheduler

    # Registered for this test only: the registry is the process's, and other tests list its names.
    name = f"processed-{start_method}"
    register_scheduler(name, partial(ProcessedScheduler, start_method=start_method))
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    try:
        with unrecorded():
            result = item_square().eval(numbers(200), out, num_workers=2, scheduler=name, progressbar=False)
    finally:
        unregister_scheduler(name)
    assert result.inputs == 200
    assert out.y.numpy().tolist() == [i * i for i in range(200)]


@lc.compute
def tensor_types(sample_in: Any, sample_out: Any) -> None:
    """Records what each value of the row says of its tensor: name, htype and info (each info read is the
    caller's own copy, which it may change)."""
    seen = {}
    for name in sorted(sample_in.keys()):
        value = sample_in[name]
        seen[name] = [value.name, value.htype, value.info]
        changed = value.info
        if changed is not None:
            changed["format"] = "changed"
    seen["boxes, read again"] = sample_in.boxes.info
    sample_out.seen.append(seen)


def test_eval_values_know_their_tensors_htype_and_info(scheduler: Sched, tmp_path: Path) -> None:
    """On every scheduler (worker processes included), ``sample_in[name]`` of a dataset's or a view's row
    answers its tensor's ``.name``, ``.htype`` and ``.info``, the info a fresh copy at each read."""
    ds = lc.empty(str(tmp_path / "in"))
    with ds:
        ds.create_tensor("boxes", htype="bbox", format="cxcywh", normalized=True)
        ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
        ds.create_tensor("x", dtype="int64")
    ds.extend({"boxes": [[[0.5, 0.5, 0.2, 0.2]]] * 6, "labels": [[0], [1]] * 3, "x": list(range(6))})
    layout = {"format": "cxcywh", "normalized": True}
    expected = {name: [name, t.htype, dict(t.info)] for name, t in ds.tensors.items()}
    expected["boxes, read again"] = layout
    assert expected["boxes"] == ["boxes", "bbox", layout]
    assert expected["labels"][:2] == ["labels", "class_label"]
    for data in (ds, ds[[4, 1, 2]]):
        out = make_out(tmp_path / "out", seen={"htype": "json"})
        tensor_types().eval(data, out, **scheduler.kw)
        assert [out.seen[i].data() for i in range(len(out))] == [expected] * len(data)
