"""Loaders across passes: epochs, set_epoch, the stateful protocol (state_dict/load_state_dict), late
sharding and int64 class labels (issue 18)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.loaders import IndexPlan
from tests.helpers import run_two_ranks
from tests.loaders.conftest import N
from tests.loaders.stateful_cases import K

ROOT = Path(__file__).resolve().parents[2]


def _idx(batches: Any) -> list[list[int]]:
    return [np.asarray(b["idx"]).tolist() for b in batches]


def _epoch(epoch: int, rank: int = 0, world_size: int = 1, num_workers: int = 0) -> list[list[int]]:
    plan = IndexPlan(N, 10, True, 3, epoch, rank=rank, world_size=world_size, num_workers=num_workers)
    return [plan.step_indices(s).tolist() for s in range(plan.steps)]


@pytest.mark.parametrize("kind", ["batches", "pytorch"])
def test_every_pass_is_the_next_epoch(numbered: lc.Dataset, kind: str) -> None:
    """A loader iterated again runs the next epoch, with its own order; len() is a full epoch's batches."""
    loader = getattr(numbered, kind)(10, tensors="idx", shuffle=True, seed=3, epoch=2)
    assert len(loader) == 11
    assert [_idx(loader), _idx(loader), _idx(loader)] == [_epoch(2), _epoch(3), _epoch(4)]
    assert len(loader) == 11


@pytest.mark.parametrize("kind", ["batches", "pytorch"])
def test_set_epoch_sets_the_next_pass(numbered: lc.Dataset, kind: str) -> None:
    """set_epoch(e) before a pass makes it epoch e (the DistributedSampler convention), from step 0."""
    loader = getattr(numbered, kind)(10, tensors="idx", shuffle=True, seed=3, start_from_step=4)
    loader.set_epoch(6)
    assert _idx(loader) == _epoch(6)
    loader.set_epoch(0)
    assert _idx(loader) == _epoch(0)
    with pytest.raises(lc.InvalidArgumentError, match=r"^Expected epoch >= 0\. Got -1\.$"):
        loader.set_epoch(-1)


@pytest.mark.parametrize("kind", ["batches", "pytorch"])
def test_a_pass_after_start_from_step_is_the_next_epoch_whole(numbered: lc.Dataset, kind: str) -> None:
    """start_from_step=k resumes the first pass only; the next pass is the following epoch, whole."""
    loader = getattr(numbered, kind)(10, tensors="idx", shuffle=True, seed=3, start_from_step=8)
    assert _idx(loader) == _epoch(0)[8:]
    assert _idx(loader) == _epoch(1)


def test_batches_second_pass_is_not_silently_empty(numbered: lc.Dataset) -> None:
    """Issue 18: ds.batches() was one-shot (a second pass empty while len() said 11)."""
    loader = numbered.batches(10, tensors="idx")
    assert len(list(loader)) == len(list(loader)) == len(loader) == 11


@pytest.mark.parametrize(
    ("kind", "num_workers"), [("batches", 0), ("batches", 2), ("pytorch", 0), ("pytorch", 2)]
)
def test_state_dict_is_json_and_resumes_mid_epoch(numbered: lc.Dataset, kind: str, num_workers: int) -> None:
    """state_dict() after k batches is plain JSON naming the epoch, step, plan options and dataset
    version; a new loader given it yields exactly the rest, then exactly the next epoch."""
    options: dict[str, Any] = {
        "shuffle": True,
        "seed": 3,
        "rank": 1,
        "world_size": 2,
        "num_workers": num_workers,
    }
    loader = getattr(numbered, kind)(10, tensors="idx", **options)
    taken = [np.asarray(b["idx"]).tolist() for _, b in zip(range(3), loader, strict=False)]
    state = json.loads(json.dumps(loader.state_dict()))
    assert state == {
        "format": "lakecompute.loader/1",
        "epoch": 0,
        "step": 3,
        "rank": 1,
        "options": {
            "batch_size": 10, "shuffle": True, "seed": 3, "drop_last": False, "world_size": 2,
            "num_workers": num_workers,
        },
        "dataset": {
            "url": numbered.path, "dataset_id": numbered.id, "version": numbered.version,
            "digest": numbered.digest, "length": N, "selection": f"rows 0:{N}", "tensors": ["idx"],
        },
    }  # fmt: skip
    full = _epoch(0, 1, 2, num_workers)
    assert taken == full[:3]
    again = getattr(numbered, kind)(10, tensors="idx", **options)
    again.load_state_dict(state)
    assert _idx(again) == full[3:]
    assert _idx(again) == _epoch(1, 1, 2, num_workers)


def test_a_state_at_the_end_of_an_epoch_resumes_with_the_next(numbered: lc.Dataset) -> None:
    loader = numbered.batches(10, tensors="idx", shuffle=True, seed=3)
    list(loader)
    assert (loader.state_dict()["epoch"], loader.state_dict()["step"]) == (1, 0)
    again = numbered.batches(10, tensors="idx", shuffle=True, seed=3)
    again.load_state_dict({**loader.state_dict(), "epoch": 0, "step": 11})
    assert _idx(again) == _epoch(1)


def test_a_state_from_rank_0_resumes_rank_1(numbered: lc.Dataset) -> None:
    """Lightning and Accelerate save rank 0's state for all ranks: every rank has as many steps, so any
    rank resumes at the same step of its own share."""
    state = numbered.batches(10, tensors="idx", shuffle=True, seed=3, rank=0, world_size=2).state_dict()
    state["step"] = 2
    loader = numbered.batches(10, tensors="idx", shuffle=True, seed=3, rank=1, world_size=2)
    loader.load_state_dict(state)
    assert _idx(loader) == _epoch(0, 1, 2)[2:]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"batch_size": 8}, "batch_size=10 (this loader: 8)"),
        ({"num_workers": 1}, "num_workers=0 (this loader: 1)"),
        ({"seed": 4}, "seed=3 (this loader: 4)"),
        ({"world_size": 2}, "world_size=1 (this loader: 2)"),
        ({"tensors": ["idx", "txt"]}, "tensors=['idx'] (this loader: ['idx', 'txt'])"),
    ],
)
def test_a_state_with_other_options_is_refused_naming_them(
    numbered: lc.Dataset, change: dict[str, Any], named: str
) -> None:
    state = numbered.batches(10, tensors="idx", shuffle=True, seed=3).state_dict()
    options: dict[str, Any] = {"batch_size": 10, "tensors": "idx", "shuffle": True, "seed": 3, **change}
    loader = numbered.batches(**options)
    with pytest.raises(lc.InvalidArgumentError) as info:
        loader.load_state_dict(state)
    assert str(info.value).startswith("This loader state was saved with ")
    assert named in str(info.value)
    assert "Build the loader as it was built when the state was saved" in str(info.value)


def test_a_state_of_another_dataset_version_is_refused(numbered: lc.Dataset) -> None:
    state = numbered.pytorch(10, tensors="idx").state_dict()
    old = numbered.version
    with numbered:
        numbered.idx.append(np.int64(N))
        numbered.img.append(np.zeros((4, 4), dtype=np.uint8))
        numbered.rag.append(np.zeros(1, dtype=np.int32))
        numbered.txt.append("new")
    with pytest.raises(lc.InvalidArgumentError) as info:
        numbered.pytorch(10, tensors="idx").load_state_dict(state)
    message = str(info.value)
    assert message.startswith("This loader state was saved with another dataset version or selection: ")
    assert f"version={old} (this loader: {numbered.version})" in str(info.value)
    assert f"length={N} (this loader: {N + 1})" in str(info.value)


def test_what_is_not_a_loader_state_is_refused(numbered: lc.Dataset) -> None:
    loader = numbered.batches(10)
    with pytest.raises(
        lc.InvalidTypeError, match=r"^Expected a loader state \(a dict from loader\.state_dict"
    ):
        loader.load_state_dict({"epoch": 0, "step": 1})
    state = loader.state_dict()
    with pytest.raises(
        lc.InvalidArgumentError, match=r"^The state's step 12 is past the end of the epoch \(11"
    ):
        loader.load_state_dict({**state, "step": 12})


def test_class_labels_arrive_as_int64_in_torch(tmp_path: Path) -> None:
    """F.cross_entropy takes int64 targets; labels are stored as uint32."""
    import torch

    ds = lc.empty(str(tmp_path / "labels"))
    with ds:
        ds.create_tensor("label", htype="class_label", class_names=["a", "b", "c"])
        ds.label.extend(np.array([0, 2, 1, 2]))
    for num_workers in (0, 1):
        batch = next(iter(ds.pytorch(4, num_workers=num_workers)))
        assert batch["label"].dtype == torch.int64
        assert batch["label"].tolist() == [0, 2, 1, 2]
        loss = torch.nn.functional.cross_entropy(torch.zeros(4, 3), batch["label"])
        assert loss.item() == pytest.approx(np.log(3))
    assert next(ds.batches(4))["label"].dtype == np.int64  # numpy batches too: what losses and metrics take


def test_per_object_class_labels_arrive_as_int64(tmp_path: Path) -> None:
    """Ragged class labels (a detection sample's one label per object) arrive as int64 arrays from
    ds.pytorch() (with and without workers) and ds.batches(), as single labels do."""
    import torch

    ds = lc.empty(str(tmp_path / "objects"))
    with ds:
        ds.create_tensor("categories", htype="class_label", class_names=["a", "b", "c"])
        ds.categories.extend([np.array([0, 2]), np.array([1]), np.zeros(0, np.int64)])
    for num_workers in (0, 1):
        batch = next(iter(ds.pytorch(3, num_workers=num_workers)))
        assert [t.dtype for t in batch["categories"]] == [torch.int64] * 3
        assert [t.tolist() for t in batch["categories"]] == [[0, 2], [1], []]
    numpy_batch = next(ds.batches(3))["categories"]
    assert [a.dtype for a in numpy_batch] == [np.int64] * 3
    assert [a.tolist() for a in numpy_batch] == [[0, 2], [1], []]


@pytest.mark.parametrize(
    "kinds",
    [
        pytest.param("pytorch,batches,blocks,blocks-batches", id="ours"),
        pytest.param("torchdata", id="torchdata", marks=pytest.mark.needs("torchdata")),
    ],
)
def test_resume_in_a_new_process_for_every_loader_reads_only_what_it_yields(
    tmp_path: Path, kinds: str
) -> None:
    """Acceptance (issue 18): for pytorch / batches / token blocks (pytorch and batches) / torchdata's
    StatefulDataLoader x workers 0 and 2 x shuffle off and on x (rank, world_size) (0, 1) and (1, 2):
    save after K batches, load in a new process, which yields exactly the rest of the epoch then exactly
    the next epoch, and reads (a spy transform logs every batch read, in every process) exactly the
    samples it yields."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for phase in ("save", "resume"):
        run = subprocess.run(
            [sys.executable, "-m", "tests.loaders.stateful_cases", phase, str(tmp_path), kinds],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "fast-forwarding" not in run.stderr  # torchdata found our state, and did not re-read
    saved = json.loads((tmp_path / "saved.json").read_text())
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert len(saved) == 8 * len(kinds.split(","))  # 8 cases a kind
    for name, case in saved.items():
        epoch0, epoch1 = case["reference"]
        assert case["first"] == epoch0[:K], name
        assert resumed[name]["rest"] == epoch0[K:], name
        assert resumed[name]["next"] == epoch1, name
        assert resumed[name]["read"] == sum(map(len, epoch0[K:] + epoch1)), name
        if "-shuffle-" in name:
            assert epoch0 != epoch1, name


def _late_rank_main(init_method: str, rank: int, out: str, path: str) -> None:
    import torch.distributed as dist

    ds = lc.load(path, read_only=True)
    loader = ds.pytorch(8, tensors="idx", shuffle=True, seed=2)  # built before the process group exists
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    try:
        first = _idx(loader)
        Path(out).write_text(json.dumps({"idx": first, "len": len(loader), "state": loader.state_dict()}))
    finally:
        dist.destroy_process_group()


def test_rank_and_world_size_are_read_when_a_pass_starts(numbered: lc.Dataset, tmp_path: Path) -> None:
    """Late sharding: a loader built before init_process_group shards by the ranks when it is iterated."""
    results = run_two_ranks(_late_rank_main, (numbered.path,), tmp_path)
    for rank, result in enumerate(results):
        plan = IndexPlan(N, 8, True, 2, 0, False, rank, 2)
        assert result["idx"] == [plan.step_indices(s).tolist() for s in range(plan.steps)]
        assert result["len"] == plan.steps == 7
        assert (result["state"]["rank"], result["state"]["options"]["world_size"]) == (rank, 2)
    assert {i for r in results for b in r["idx"] for i in b} == set(range(N))
