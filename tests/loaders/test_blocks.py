"""Token blocks (seed 003): fixed windows over a token tensor's stream, random access, batches, resume."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import lakecompute as lc
from lakecompute.loaders import IndexPlan

Tokens = tuple[lc.Dataset, np.ndarray]


@pytest.mark.parametrize("seq_len", [1, 7, 64])
def test_blocks_are_windows_of_the_concatenated_documents(tokens: Tokens, seq_len: int) -> None:
    """len() counts whole blocks; blocks[i] is (x, y) with y the next token of each x."""
    ds, flat = tokens
    blocks = ds.tokens.blocks(seq_len)
    assert len(blocks) == (len(flat) - 1) // seq_len
    assert blocks.num_values == len(flat)
    for i in (0, 5, len(blocks) - 1, -1):
        j = i % len(blocks)
        x, y = blocks[i]
        np.testing.assert_array_equal(x, flat[j * seq_len : (j + 1) * seq_len])
        np.testing.assert_array_equal(y, flat[j * seq_len + 1 : (j + 1) * seq_len + 1])
        assert x.dtype == np.int32


def test_blocks_without_next_token_are_plain_windows(tokens: Tokens) -> None:
    """With next_token=False a block is x alone, and every value can be an input."""
    ds, flat = tokens
    blocks = ds.tokens.blocks(10, next_token=False)
    assert len(blocks) == len(flat) // 10
    np.testing.assert_array_equal(blocks[3], flat[30:40])
    assert set(next(blocks.batches(4))) == {"x"}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_blocks_batches_shard_and_resume(tokens: Tokens, num_workers: int) -> None:
    """Block batches follow the index plan on every rank, and resume from a step exactly."""
    ds, flat = tokens
    blocks = ds.tokens.blocks(16)
    for rank in range(2):
        plan = IndexPlan(len(blocks), 8, True, 1, 0, False, rank, 2, num_workers=num_workers)
        options = {"shuffle": True, "seed": 1, "rank": rank, "world_size": 2, "num_workers": num_workers}
        batches = list(blocks.batches(8, **options))
        assert len(batches) == plan.steps
        for step, batch in enumerate(batches):
            starts = plan.step_indices(step) * 16
            np.testing.assert_array_equal(batch["x"], np.stack([flat[s : s + 16] for s in starts]))
            np.testing.assert_array_equal(batch["y"], np.stack([flat[s + 1 : s + 17] for s in starts]))
        tail = list(blocks.batches(8, start_from_step=3, **options))
        assert [b["x"].tolist() for b in tail] == [b["x"].tolist() for b in batches[3:]]


def test_blocks_pytorch_yields_tensors(tokens: Tokens) -> None:
    """blocks.pytorch() is a DataLoader of {"x", "y"} int32 tensors, its workers dealt blocks in turn."""
    torch = pytest.importorskip("torch")
    ds, flat = tokens
    blocks = ds.tokens.blocks(32)
    loader = blocks.pytorch(4, num_workers=2)
    first, second = list(loader)[:2]
    assert first["x"].dtype == torch.int32
    assert first["x"].shape == (4, 32)
    np.testing.assert_array_equal(first["y"].numpy()[1], flat[2 * 32 + 1 : 3 * 32 + 1])  # block 2
    np.testing.assert_array_equal(second["x"].numpy()[0], flat[32:64])  # worker 1's first: block 1
    assert len(loader) == IndexPlan(len(blocks), 4, num_workers=2).steps


def test_blocks_after_compact_read_one_typed_array(tokens: Tokens) -> None:
    """After compact() the blocks read the same values, and zarr_path opens the stream with plain zarr."""
    ds, flat = tokens
    assert ds.tokens.blocks(8).zarr_path is None
    ds.compact()
    blocks = lc.load(ds.path).tokens.blocks(8)
    assert blocks.zarr_path is not None
    np.testing.assert_array_equal(zarr.open_array(f"{ds.path}/{blocks.zarr_path}", mode="r")[:], flat)
    x, _y = blocks[len(blocks) - 1]
    np.testing.assert_array_equal(x, flat[(len(blocks) - 1) * 8 : len(blocks) * 8])


def test_blocks_refuse_other_tensors_and_bad_lengths(numbered: lc.Dataset, tokens: Tokens) -> None:
    """Non-integer or multi-dimensional samples, seq_len < 1 and out-of-range blocks are errors."""
    with pytest.raises(lc.InvalidTypeError, match=r"1-D integer samples .* 'img' has dtype uint8 and 2 dim"):
        numbered.img.blocks(4)
    with pytest.raises(lc.InvalidArgumentError, match=r"Expected seq_len >= 1\. Got 0\."):
        tokens[0].tokens.blocks(0)
    blocks = tokens[0].tokens.blocks(1000)
    with pytest.raises(lc.SampleIndexError, match=f"Block {len(blocks)} is out of range"):
        blocks[len(blocks)]
