"""LoaderOptions: checked once at the call, normalised, frozen, naming every public method's options."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.loaders import IndexPlan, LoaderKwargs, LoaderOptions, TokenBlocks, TorchLoaderKwargs

FIELDS = [f.name for f in dataclasses.fields(LoaderOptions)]
TORCH_ONLY = ["collate_fn", "pin_memory"]


def test_loader_options_parse_normalises_counts_and_flags() -> None:
    """numpy integers become ints and numpy bools plain bools; options not given keep their defaults."""
    options = LoaderOptions.parse(
        "pytorch",
        np.int64(4),
        {"seed": np.int32(3), "shuffle": np.True_, "drop_last": np.False_, "pin_memory": True},
    )
    assert (options.batch_size, options.seed) == (4, 3)
    assert type(options.batch_size) is int
    assert type(options.seed) is int
    assert (options.shuffle, options.drop_last, options.pin_memory) == (True, False, True)
    assert type(options.shuffle) is bool
    unchanged = dataclasses.replace(options, seed=0, shuffle=False, pin_memory=False)
    assert unchanged == LoaderOptions(batch_size=4, rank=None, world_size=None)
    assert LoaderOptions.parse("batches", 4, {}) == LoaderOptions(batch_size=4)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"batch_size": 0}, lc.InvalidArgumentError, "Expected batch_size >= 1. Got 0."),
        ({"batch_size": 2.0}, lc.InvalidTypeError, "Expected batch_size to be an int. Got float: 2.0."),
        ({"seed": -1}, lc.InvalidArgumentError, "Expected seed >= 0. Got -1."),
        ({"epoch": True}, lc.InvalidTypeError, "Expected epoch to be an int. Got bool: True."),
        ({"shuffle": 1}, lc.InvalidTypeError, "Expected shuffle to be True or False. Got int: 1."),
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
    batch_size = options.pop("batch_size")
    with pytest.raises(error) as parsed:
        LoaderOptions.parse("batches", batch_size, options)
    assert str(parsed.value).startswith(message)
    with pytest.raises(error) as called:
        numbered.batches(batch_size, **options)
    assert str(called.value) == str(parsed.value)


def test_loader_options_leave_a_none_rank_to_pytorch(numbered: lc.Dataset) -> None:
    """rank/world_size None (pytorch's torch.distributed default) parse, but a plan, and so batches(),
    refuse them with the messages batches() always gave."""
    options = LoaderOptions.parse("pytorch", 2, {})
    assert (options.rank, options.world_size) == (None, None)
    with pytest.raises(lc.InvalidTypeError, match=r"^Expected world_size to be an int\. Got NoneType: None"):
        options.plan(10)
    with pytest.raises(lc.InvalidTypeError, match=r"^Expected rank to be an int\. Got NoneType: None\.$"):
        numbered.batches(4, rank=None)  # type: ignore[arg-type]  # what is refused


def test_loader_options_plan_is_the_index_plan_of_the_options() -> None:
    """plan(length) is the IndexPlan of the options, and checks what needs the length or both ranks."""
    options = LoaderOptions.parse("batches", 8, {
        "shuffle": True, "seed": 4, "epoch": 2, "drop_last": True, "rank": 1, "world_size": 3,
        "start_from_step": 1, "num_workers": 2,
    })  # fmt: skip
    assert options.plan(103) == IndexPlan(103, 8, True, 4, 2, True, 1, 3, 1, 2)
    with pytest.raises(lc.InvalidArgumentError, match=r"Got rank=3, world_size=3\.$"):
        dataclasses.replace(options, rank=3).plan(103)
    with pytest.raises(lc.InvalidArgumentError, match=r"^start_from_step=9 is past the end of the epoch"):
        dataclasses.replace(options, start_from_step=9).plan(40)


def test_loader_options_are_frozen_and_slotted() -> None:
    """Options cannot change once parsed, and carry no per-instance dict."""
    options = LoaderOptions.parse("batches", 2, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 1  # type: ignore[misc]  # the point of the test
    assert not hasattr(options, "__dict__")


def test_loader_options_refuse_an_option_the_call_does_not_take(numbered: lc.Dataset) -> None:
    """A misspelt option, or a pytorch()-only one given to batches(), is an InvalidTypeError (a TypeError,
    as Python's own unexpected keyword is) naming it and the nearest option."""
    with pytest.raises(lc.InvalidTypeError) as info:
        numbered.batches(4, shufle=True)  # type: ignore[call-arg]  # the misspelling is the point
    assert str(info.value) == "batches() got an unexpected keyword argument 'shufle'. Use 'shuffle' instead."
    unexpected = r"^batches\(\) got an unexpected keyword argument 'pin_memory'"
    with pytest.raises(lc.InvalidTypeError, match=unexpected):
        numbered.batches(4, pin_memory=True)  # type: ignore[call-arg]  # pytorch() takes it, batches() not


@pytest.mark.parametrize(
    ("method", "typed", "expected"),
    [
        (lc.Dataset.batches, LoaderKwargs, [f for f in FIELDS if f not in TORCH_ONLY]),
        (lc.Dataset.pytorch, TorchLoaderKwargs, FIELDS),
        (lc.DatasetView.batches, LoaderKwargs, [f for f in FIELDS if f not in TORCH_ONLY]),
        (lc.DatasetView.pytorch, TorchLoaderKwargs, FIELDS),
        (TokenBlocks.batches, LoaderKwargs, [f for f in FIELDS if f not in TORCH_ONLY]),
        (TokenBlocks.pytorch, TorchLoaderKwargs, FIELDS),
    ],
)
def test_loader_options_name_every_option_of_the_public_methods(
    method: Callable[..., Any], typed: type, expected: list[str]
) -> None:
    """The public loader methods take batch_size (and tensors) and then the options of one typed dict,
    whose names are exactly the options LoaderOptions holds."""
    parameters = [p for p in inspect.signature(method).parameters if p not in ("self", "tensors")]
    assert parameters == ["batch_size", "options"]
    assert inspect.signature(method).parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
    assert sorted(["batch_size", *typed.__optional_keys__]) == sorted(expected)  # type: ignore[attr-defined]
