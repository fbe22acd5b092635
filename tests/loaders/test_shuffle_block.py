"""shuffle_block: a chunk-local shuffle (blocks of consecutive samples in a random order, then the samples
of each block): every sample once per epoch, batches from a block or two, resumable, refused without
shuffle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.errors import InvalidArgumentError
from lakecompute.loaders import IndexPlan

N = 1_000


def _numbers(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(N))
    return ds


def test_every_sample_once_and_batches_from_few_blocks(tmp_path: Path) -> None:
    """An epoch is a permutation; each batch of 32 comes from at most 2 blocks of 100; epochs differ."""
    ds = _numbers(tmp_path / "ds")
    loader = ds.batches(32, shuffle=True, shuffle_block=100, seed=5)
    epochs = []
    for _ in range(2):
        batches = [b["x"] for b in loader]
        order = np.concatenate(batches)
        assert sorted(order.tolist()) == list(range(N))
        assert max(len(np.unique(b // 100)) for b in batches) <= 2
        epochs.append(order)
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[0], np.arange(N))  # shuffled within blocks, too
    blocks_in_order = [int(b) for b in epochs[0][::100] // 100]
    assert sorted(blocks_in_order) == list(range(10))  # each block is a contiguous stretch of the order


def test_the_same_seed_gives_the_same_order_everywhere() -> None:
    """The order is arithmetic of (seed, epoch): two plans agree; another seed or block size differs."""
    a = IndexPlan(N, 10, shuffle=True, seed=3, shuffle_block=64).order()
    b = IndexPlan(N, 10, shuffle=True, seed=3, shuffle_block=64).order()
    assert a is not None
    assert b is not None
    np.testing.assert_array_equal(a, b)
    other = IndexPlan(N, 10, shuffle=True, seed=4, shuffle_block=64).order()
    assert other is not None
    assert not np.array_equal(a, other)
    full = IndexPlan(N, 10, shuffle=True, seed=3).order()
    assert full is not None
    assert not np.array_equal(a, full)


def test_shuffle_block_needs_shuffle(tmp_path: Path) -> None:
    """shuffle_block without shuffle=True is refused, saying what to do."""
    ds = _numbers(tmp_path / "ds")
    with pytest.raises(InvalidArgumentError, match=r"shuffle_block=100 .* needs shuffle=True"):
        ds.batches(10, shuffle_block=100)
    with pytest.raises(lc.LakeComputeError):
        ds.batches(10, shuffle=True, shuffle_block=-1)


def test_resume_with_blocks_and_states_of_other_blocks_refused(tmp_path: Path) -> None:
    """A state resumes the same batches; a state saved with another shuffle_block (or none) is refused."""
    ds = _numbers(tmp_path / "ds")
    loader = ds.batches(50, shuffle=True, shuffle_block=128, seed=1)
    it = iter(loader)
    for _ in range(7):
        next(it)
    state = loader.state_dict()
    assert state["options"]["shuffle_block"] == 128
    rest = [b["x"].tolist() for b in it]
    resumed = ds.batches(50, shuffle=True, shuffle_block=128, seed=1)
    resumed.load_state_dict(state)
    assert [b["x"].tolist() for b in resumed] == rest
    with pytest.raises(InvalidArgumentError, match="shuffle_block=128"):
        ds.batches(50, shuffle=True, seed=1).load_state_dict(state)
    plain = ds.batches(50, shuffle=True, seed=1).state_dict()
    assert "shuffle_block" not in plain["options"]  # states without blocks keep their form
    with pytest.raises(InvalidArgumentError, match="shuffle_block=0"):
        ds.batches(50, shuffle=True, shuffle_block=128, seed=1).load_state_dict(plain)
