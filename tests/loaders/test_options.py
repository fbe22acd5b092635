"""LoaderOptions: checked once at the call, normalised, frozen, naming every public method's options."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.loaders import IndexPlan, LoaderOptions, TokenBlocks

FIELDS = [f.name for f in dataclasses.fields(LoaderOptions)]
TORCH_ONLY = ["collate_fn", "pin_memory"]


def test_loader_options_parse_normalises_counts_and_flags() -> None:
    """numpy integers become ints and flags become bools; options not given keep their defaults."""
    options = LoaderOptions.parse(
        batch_size=np.int64(4), seed=np.int32(3), shuffle=1, drop_last=0, pin_memory="y"
    )
    assert (options.batch_size, options.seed) == (4, 3)
    assert type(options.batch_size) is int
    assert type(options.seed) is int
    assert (options.shuffle, options.drop_last, options.pin_memory) == (True, False, True)
    unchanged = dataclasses.replace(options, seed=0, shuffle=False, pin_memory=False)
    assert unchanged == LoaderOptions(batch_size=4)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"batch_size": 0}, lc.InvalidArgumentError, "Expected batch_size >= 1. Got 0."),
        ({"batch_size": 2.0}, lc.InvalidTypeError, "Expected batch_size to be an int. Got float: 2.0."),
        ({"seed": -1}, lc.InvalidArgumentError, "Expected seed >= 0. Got -1."),
        ({"epoch": True}, lc.InvalidTypeError, "Expected epoch to be an int. Got bool: True."),
        ({"world_size": 0}, lc.InvalidArgumentError, "Expected world_size >= 1. Got 0."),
        ({"rank": -1}, lc.InvalidArgumentError, "Expected rank >= 0. Got -1."),
        ({"start_from_step": -2}, lc.InvalidArgumentError, "Expected start_from_step >= 0. Got -2."),
        ({"num_workers": -1}, lc.InvalidArgumentError, "Expected num_workers >= 0. Got -1."),
        ({"prefetch": 0}, lc.InvalidArgumentError, "Expected prefetch >= 1. Got 0."),
        ({"prefetch": "2"}, lc.InvalidTypeError, "Expected prefetch to be an int. Got str: '2'."),
        ({"transform": 3}, lc.InvalidTypeError, "Expected transform= to be a compute function or pipeline"),
    ],
)
def test_loader_options_parse_refuses_bad_values_as_the_calls_do(
    numbered: lc.Dataset, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Each bad option raises its type and message from parse, and the same from ds.batches()."""
    options = {"batch_size": 4, **kwargs}
    with pytest.raises(error) as parsed:
        LoaderOptions.parse(**options)
    assert str(parsed.value).startswith(message)
    with pytest.raises(error) as called:
        numbered.batches(**options)
    assert str(called.value) == str(parsed.value)


def test_loader_options_leave_a_none_rank_to_pytorch(numbered: lc.Dataset) -> None:
    """rank/world_size None (pytorch's torch.distributed default) parse, but a plan, and so batches(),
    refuse them with the messages batches() always gave."""
    options = LoaderOptions.parse(batch_size=2, rank=None, world_size=None)
    assert (options.rank, options.world_size) == (None, None)
    with pytest.raises(lc.InvalidTypeError, match=r"^Expected world_size to be an int\. Got NoneType: None"):
        options.plan(10)
    with pytest.raises(lc.InvalidTypeError, match=r"^Expected rank to be an int\. Got NoneType: None\.$"):
        numbered.batches(4, rank=None)  # type: ignore[arg-type]  # what is refused


def test_loader_options_plan_is_the_index_plan_of_the_options() -> None:
    """plan(length) is the IndexPlan of the options, and checks what needs the length or both ranks."""
    options = LoaderOptions.parse(
        batch_size=8, shuffle=True, seed=4, epoch=2, drop_last=True, rank=1, world_size=3,
        start_from_step=1, num_workers=2,
    )  # fmt: skip
    assert options.plan(103) == IndexPlan(103, 8, True, 4, 2, True, 1, 3, 1, 2)
    with pytest.raises(lc.InvalidArgumentError, match=r"Got rank=3, world_size=3\.$"):
        dataclasses.replace(options, rank=3).plan(103)
    with pytest.raises(lc.InvalidArgumentError, match=r"^start_from_step=9 is past the end of the epoch"):
        dataclasses.replace(options, start_from_step=9).plan(40)


def test_loader_options_are_frozen_and_slotted() -> None:
    """Options cannot change once parsed, and carry no per-instance dict."""
    options = LoaderOptions.parse(batch_size=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 1  # type: ignore[misc]  # the point of the test
    assert not hasattr(options, "__dict__")


def test_loader_options_pick_takes_only_option_names() -> None:
    """pick keeps the entries naming an option and leaves the rest of a call's locals out."""
    arguments = {"self": object(), "tensors": "idx", "batch_size": 3, "seed": 7, "make_batches": print}
    assert LoaderOptions.pick(arguments) == {"batch_size": 3, "seed": 7}


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (lc.Dataset.batches, [f for f in FIELDS if f not in TORCH_ONLY]),
        (lc.Dataset.pytorch, FIELDS),
        (lc.DatasetView.batches, [f for f in FIELDS if f not in TORCH_ONLY]),
        (lc.DatasetView.pytorch, FIELDS),
        (TokenBlocks.batches, [f for f in FIELDS if f not in TORCH_ONLY]),
        (TokenBlocks.pytorch, FIELDS),
    ],
)
def test_loader_options_name_every_option_of_the_public_methods(
    method: Callable[..., Any], expected: list[str]
) -> None:
    """Every parameter of the public loader methods but self and tensors is an option of the same name,
    so that picking them from the call's locals() drops none."""
    parameters = [p for p in inspect.signature(method).parameters if p not in ("self", "tensors")]
    assert parameters == expected
