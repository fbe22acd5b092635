"""ds.pytorch(): a real torch DataLoader; sharding on every rank and worker; torch.distributed (gloo)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.loaders import IndexPlan
from tests.helpers import run_two_ranks
from tests.loaders.conftest import SEED_001_TABLE

torch = pytest.importorskip("torch", reason='the loader tests need torch: pip install "lakecompute[torch]"')

N = 103


def _with_worker(batch: dict[str, Any]) -> dict[str, Any]:
    info = torch.utils.data.get_worker_info()
    return {**batch, "worker": np.full(len(batch["idx"]), -1 if info is None else info.id)}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pytorch_is_a_dataloader_of_tensor_batches(numbered: lc.Dataset, num_workers: int) -> None:
    """A real DataLoader: len() batches of tensors (lists for ragged and text), in the plan's order."""
    loader = numbered.pytorch(10, num_workers=num_workers, prefetch=3)
    plan = IndexPlan(N, 10, num_workers=num_workers)
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert len(loader) == plan.steps == (12 if num_workers else 11)  # 2 workers: 52 + 51 samples
    assert loader.prefetch_factor == (3 if num_workers else None)
    batches = list(loader)
    assert len(batches) == len(loader)
    assert [b["idx"].tolist() for b in batches] == [plan.step_indices(s).tolist() for s in range(plan.steps)]
    assert isinstance(batches[0]["img"], torch.Tensor)
    assert batches[0]["img"].shape == (10, 4, 4)
    assert sorted(torch.cat([b["idx"] for b in batches]).tolist()) == list(range(N))
    i = int(batches[0]["idx"][2])
    assert batches[0]["rag"][2].tolist() == [i] * (i % 3 + 1)
    assert batches[0]["txt"][1] == f"s{int(batches[0]['idx'][1])}"


def _contract_shares(world_size: int, num_workers: int, order: Any) -> dict[tuple[int, int], list[int]]:
    """API §3 in its own words: position p of the order goes to rank p % world_size, then to loader
    worker (p // world_size) % num_workers (one stream for 0 workers); the order wraps to pad."""
    shares: dict[tuple[int, int], list[int]] = {}
    for p in range(-(-N // world_size) * world_size):
        key = (p % world_size, (p // world_size) % max(1, num_workers))
        shares.setdefault(key, []).append(int(order[p % N]))
    return shares


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_pytorch_shards_exactly_by_rank_then_worker(
    numbered: lc.Dataset, world_size: int, num_workers: int
) -> None:
    """Each DataLoader worker of each rank reads exactly the contract's samples, in batches of its own;
    step s comes from worker s % num_workers; every index is read, shares are disjoint up to the
    padding, and every rank has as many batches."""
    order = IndexPlan(N, 8, True, 11).order()
    expected = _contract_shares(world_size, num_workers, order)
    seen: list[int] = []
    counts = set()
    for rank in range(world_size):
        loader = numbered.pytorch(
            8, shuffle=True, seed=11, rank=rank, world_size=world_size, num_workers=num_workers,
            transform=_with_worker,
        )  # fmt: skip
        batches = list(loader)
        counts.add(len(batches))
        by_worker: dict[int, list[int]] = {}
        for step, batch in enumerate(batches):
            workers = set(batch["worker"].tolist())
            assert workers == {step % num_workers if num_workers else -1}
            by_worker.setdefault(max(0, workers.pop()), []).extend(batch["idx"].tolist())
            assert len(batch["idx"]) <= 8
        assert by_worker == {w: share for (r, w), share in expected.items() if r == rank}
        seen.extend(i for share in by_worker.values() for i in share)
    assert len(counts) == 1
    assert set(seen) == set(range(N))
    padding = len(seen) - N
    assert padding == IndexPlan(N, 8, world_size=world_size).padding < world_size


# The seed's 4 workers on this 2-core machine: torch warns that it suggests at most 2.
@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes:UserWarning")
def test_pytorch_reads_seed_001_table_with_two_ranks_and_four_workers(numbered: lc.Dataset) -> None:
    """world_size 2 x 4 DataLoader workers: each worker's first samples are seed 001's table, verbatim."""
    table = SEED_001_TABLE
    read: dict[tuple[int, int], list[int]] = {}
    for rank in range(2):
        loader = numbered.pytorch(
            2, tensors="idx", rank=rank, world_size=2, num_workers=4, transform=_with_worker
        )
        for batch in loader:
            (worker,) = set(batch["worker"].tolist())
            read.setdefault((rank, worker), []).extend(batch["idx"].tolist())
    assert {key: samples[:4] for key, samples in read.items()} == table


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_pytorch_yields_the_batches_of_ds_batches(numbered: lc.Dataset, num_workers: int) -> None:
    """ds.pytorch and ds.batches give the same batches for the same options, and 0 workers gives 1's."""
    options: dict[str, Any] = {"shuffle": True, "seed": 8, "rank": 1, "world_size": 2, "tensors": "idx"}
    torch_batches = [b["idx"].tolist() for b in numbered.pytorch(6, num_workers=num_workers, **options)]
    numpy_batches = [b["idx"].tolist() for b in numbered.batches(6, num_workers=num_workers, **options)]
    one_worker = [b["idx"].tolist() for b in numbered.pytorch(6, num_workers=1, **options)]
    assert torch_batches == numpy_batches
    assert (torch_batches == one_worker) is (num_workers < 2)


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_pytorch_resume_equals_the_tail_of_an_uninterrupted_run(
    numbered: lc.Dataset, num_workers: int
) -> None:
    """A DataLoader from start_from_step=k yields the uninterrupted one's batches from k (same options)."""
    options: dict[str, Any] = {
        "shuffle": True, "seed": 5, "epoch": 1, "rank": 0, "world_size": 2, "num_workers": num_workers,
    }  # fmt: skip
    full = [b["idx"].tolist() for b in numbered.pytorch(4, **options)]
    tail = numbered.pytorch(4, start_from_step=5, **options)  # an odd step: workers are rotated
    assert len(tail) == len(full)  # a full epoch's batches, torch's convention
    assert [b["idx"].tolist() for b in tail] == full[5:]


def test_pytorch_refuses_a_dataloader_with_another_worker_count(numbered: lc.Dataset) -> None:
    """Wrapping the loader's dataset in a DataLoader with another worker count is an error, not a
    silent skip or repeat of samples."""
    dataset = numbered.pytorch(4, tensors="idx", num_workers=0).dataset
    other = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    with pytest.raises(lc.InvalidArgumentError, match=r"planned for num_workers=0, but the DataLoader"):
        list(other)


def _global_draws(batch: dict[str, Any]) -> dict[str, Any]:
    return {"draw": np.random.random(len(batch["idx"]))}


def test_pytorch_workers_never_repeat_numpy_global_draws(numbered: lc.Dataset) -> None:
    """numpy's global generator is reseeded in each DataLoader worker."""
    draws = torch.cat([b["draw"] for b in numbered.pytorch(4, transform=_global_draws, num_workers=2)])
    assert len(set(draws.tolist())) == N


def test_pytorch_workers_global_draws_repeat_under_torch_manual_seed(numbered: lc.Dataset) -> None:
    """Workers reseed the global generators from the seed torch gives each one: after the same
    torch.manual_seed, the same draws; across workers, none repeats."""

    def draws() -> list[float]:
        torch.manual_seed(5)
        loader = numbered.pytorch(4, transform=_global_draws, num_workers=2)
        return torch.cat([b["draw"] for b in loader]).tolist()

    first = draws()
    assert draws() == first
    assert len(set(first)) == N


def test_pytorch_passes_collate_fn_and_pin_memory(numbered: lc.Dataset) -> None:
    """collate_fn receives each numpy batch dict; pin_memory reaches the DataLoader."""
    loader = numbered.pytorch(50, tensors="idx", collate_fn=lambda b: b["idx"].sum())
    assert list(loader) == [sum(range(50)), sum(range(50, 100)), 100 + 101 + 102]
    assert numbered.pytorch(50, pin_memory=True).pin_memory is True


def test_pytorch_without_torch_names_the_extra(numbered: lc.Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch, pytorch() says which extra to install."""
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(lc.InvalidArgumentError, match=r"pip install -e \"\.\[torch\]\""):
        numbered.pytorch(4)


def _rank_main(init_method: str, rank: int, out: str, path: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    try:
        ds = lc.load(path, read_only=True)
        loader = ds.pytorch(8, tensors="idx", shuffle=True, seed=2, num_workers=1)  # rank from torch
        idx = [b["idx"].tolist() for b in loader]
        sizes = [torch.zeros(1) for _ in range(2)]
        dist.all_gather(sizes, torch.tensor([float(len(idx))]))  # every rank must step equally
        Path(out).write_text(json.dumps({"idx": idx, "sizes": [s.item() for s in sizes]}))
    finally:
        dist.destroy_process_group()


def test_pytorch_under_torch_distributed_gives_each_rank_its_share(
    numbered: lc.Dataset, tmp_path: Path
) -> None:
    """Two gloo processes on 127.0.0.1: rank and world_size come from torch.distributed, each rank gets
    its plan's share, and the shares cover every sample with equal batch counts."""
    results = run_two_ranks(_rank_main, (numbered.path,), tmp_path)
    for rank, result in enumerate(results):
        plan = IndexPlan(N, 8, True, 2, 0, False, rank, 2, num_workers=1)
        assert result["idx"] == [plan.step_indices(s).tolist() for s in range(plan.steps)]
        assert result["sizes"] == [7.0, 7.0]
    assert {i for r in results for b in r["idx"] for i in b} == set(range(N))
