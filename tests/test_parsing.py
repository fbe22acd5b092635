"""lakecompute.parsing: one rule per kind of option, and every public call that takes options follows it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.demo import write_image_folder
from lakecompute.parsing import (
    parse_amount,
    parse_choice,
    parse_count,
    parse_flag,
    parse_keywords,
    parse_name,
)
from lakecompute.schedulers import Ray, get_scheduler
from tests.helpers import make_out


@lc.compute
def copy_x(sample_in: Any, sample_out: Any) -> None:
    """Write the input as ``x``."""
    sample_out.x.append(sample_in)


def _out(tmp_path: Path, name: str = "out") -> lc.Dataset:
    return make_out(tmp_path / name)


@pytest.fixture
def numbers(tmp_path: Path) -> lc.Dataset:
    return lc.from_numpy(str(tmp_path / "numbers"), {"x": np.arange(10)})


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_image_folder(tmp_path / "images", n=6, size=(8, 8), formats=("png",))
    return tmp_path / "images"


# -- the rules ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), np.uint8(3)])
def test_parse_count_takes_ints_and_numpy_ints_as_int(value: object) -> None:
    """A Python or numpy integer is a count, returned as a plain int."""
    count = parse_count("n", value)
    assert count == 3
    assert type(count) is int


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "Expected n to be an int. Got bool: True."),
        (np.bool_(True), "Expected n to be an int. Got bool: np.True_."),
        (2.0, "Expected n to be an int. Got float: 2.0."),
        ("2", "Expected n to be an int. Got str: '2'."),
        (None, "Expected n to be an int. Got NoneType: None."),
    ],
)
def test_parse_count_refuses_other_types(value: object, message: str) -> None:
    """bools, floats (even whole ones), strings and None are not counts: InvalidTypeError, a TypeError."""
    with pytest.raises(lc.InvalidTypeError) as info:
        parse_count("n", value)
    assert str(info.value) == message
    assert isinstance(info.value, TypeError)


def test_parse_count_range_optional_and_hint() -> None:
    """Below ``least`` is an InvalidArgumentError (a ValueError) with the hint; optional takes None."""
    with pytest.raises(lc.InvalidArgumentError) as info:
        parse_count("n", np.int64(0), 1, hint="Use 1 or more.")
    assert str(info.value) == "Expected n >= 1. Got np.int64(0). Use 1 or more."
    assert isinstance(info.value, ValueError)
    assert parse_count("n", None, optional=True) is None
    with pytest.raises(lc.InvalidTypeError, match=r"^Expected n to be an int or None\. Got float: 1\.5\.$"):
        parse_count("n", 1.5, optional=True)


def test_parse_flag_takes_only_bools() -> None:
    """True/False (numpy's too) are flags; 1, "yes" and None are refused, never taken for their truth."""
    assert parse_flag("f", True) is True
    assert parse_flag("f", np.bool_(False)) is False
    for value, shown in [(1, "int: 1"), ("yes", "str: 'yes'"), (None, "NoneType: None")]:
        with pytest.raises(lc.InvalidTypeError) as info:
            parse_flag("f", value)
        assert str(info.value) == f"Expected f to be True or False. Got {shown}."


def test_parse_amount_name_choice() -> None:
    """Amounts are finite numbers >= 0; names non-empty strings; choices one of a closed set."""
    assert parse_amount("cpus", np.float32(0.5)) == 0.5
    assert parse_amount("cpus", None, optional=True) is None
    with pytest.raises(
        lc.InvalidArgumentError, match=r"^Expected cpus to be a finite number >= 0\. Got inf\.$"
    ):
        parse_amount("cpus", float("inf"))
    with pytest.raises(lc.InvalidTypeError, match=r"^Expected cpus to be a number\. Got bool: True\.$"):
        parse_amount("cpus", True)
    assert parse_name("address", "auto") == "auto"
    with pytest.raises(lc.InvalidArgumentError, match=r"^Expected address to be a non-empty str\. Got ''\.$"):
        parse_name("address", "")
    assert parse_choice("mode", "a", ["a", "b"]) == "a"
    with pytest.raises(lc.InvalidArgumentError) as info:
        parse_choice("mode", "c", ["b", "a"])
    assert str(info.value) == "Expected mode to be one of ['a', 'b']. Got 'c'. Use one of those instead."


def test_parse_keywords_names_the_nearest_option() -> None:
    """A keyword the call does not take is an InvalidTypeError naming it and the nearest known name."""
    parse_keywords("f", {"alpha": 1}, ["alpha", "beta"])
    with pytest.raises(lc.InvalidTypeError) as info:
        parse_keywords("f", {"alpah": 1}, ["alpha", "beta"])
    assert str(info.value) == "f() got an unexpected keyword argument 'alpah'. Use 'alpha' instead."
    with pytest.raises(lc.InvalidTypeError, match=r"Expected one of \['alpha', 'beta'\]\.$"):
        parse_keywords("f", {"zzz": 1}, ["alpha", "beta"])


# -- every call follows them -------------------------------------------------------------------------


def test_counts_take_numpy_ints_everywhere(tmp_path: Path, numbers: lc.Dataset, folder: Path) -> None:
    """Every count a public call takes accepts a numpy integer: eval, batches, blocks, the ingests, the
    schedulers and Ray's settings."""
    result = copy_x().eval(
        [1, 2, 3],
        _out(tmp_path),
        num_workers=np.int64(0),  # type: ignore[typeddict-item]  # numpy ints are accepted at run time
        checkpoint_interval=np.int64(2),  # type: ignore[typeddict-item]
        batch_size=np.int32(1),  # type: ignore[typeddict-item]
        seed=np.uint16(5),  # type: ignore[typeddict-item]
        progressbar=False,
    )
    assert (result.seed, type(result.seed)) == (5, int)
    batches = numbers.batches(np.int64(4), seed=np.int64(1), epoch=np.int32(0), prefetch=np.int64(1))  # type: ignore[arg-type,typeddict-item]
    assert [len(b["x"]) for b in batches] == [4, 4, 2]
    tokens = lc.from_numpy(str(tmp_path / "tokens"), {"t": [np.arange(5), np.arange(6)]})
    blocks = tokens.t.blocks(np.int64(3))  # type: ignore[arg-type]
    assert (len(blocks), type(blocks.seq_len)) == (3, int)
    ds = lc.ingest_classification(
        folder,
        tmp_path / "ingested",
        progressbar=False,
        num_workers=np.int64(0),  # type: ignore[typeddict-item]
        checkpoint_interval=np.int64(0),  # type: ignore[typeddict-item]
    )
    assert len(ds) == len(list(folder.rglob("*.png")))
    assert get_scheduler("serial", np.int64(0)).num_workers == 0  # type: ignore[arg-type]
    assert Ray(max_retries=np.int64(2)).task_options()["max_retries"] == 2  # type: ignore[arg-type]


Call = Callable[[Path, lc.Dataset, Path, Any], object]
CALLS: dict[str, Call] = {
    "eval": lambda t, ds, src, kw: copy_x().eval([1, 2], _out(t), **{"progressbar": False, **kw}),
    "batches": lambda t, ds, src, kw: ds.batches(2, **kw),
    "ingest_classification": lambda t, ds, src, kw: lc.ingest_classification(src, t / "ingested", **kw),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_workers": "2"}, lc.InvalidTypeError, "Expected num_workers to be an int. Got str: '2'."),
        ({"num_workers": True}, lc.InvalidTypeError, "Expected num_workers to be an int. Got bool: True."),
        ({"num_workers": -1}, lc.InvalidArgumentError, "Expected num_workers >= 0. Got -1."),
        ({"num_workers": 1.0}, lc.InvalidTypeError, "Expected num_workers to be an int. Got float: 1.0."),
    ],
)
def test_the_same_wrong_count_gives_the_same_error_everywhere(
    tmp_path: Path,
    numbers: lc.Dataset,
    folder: Path,
    call: str,
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    """eval, batches and the ingests refuse a bad worker count with the same type and message (the
    ingests, whose num_workers may also be None, say so)."""
    if call.startswith("ingest"):
        message = message.replace("to be an int.", "to be an int or None.")
    with pytest.raises(error) as info:
        CALLS[call](tmp_path, numbers, folder, kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("call", "kwargs", "message"),
    [
        ("eval", {"checkpoint_interval": "5"}, "Expected checkpoint_interval to be an int. Got str: '5'."),
        (
            "ingest_classification",
            {"checkpoint_interval": "5"},
            "Expected checkpoint_interval to be an int. Got str: '5'.",
        ),
        ("batches", {"seed": "5"}, "Expected seed to be an int. Got str: '5'."),
        ("eval", {"progressbar": 1}, "Expected progressbar to be True or False. Got int: 1."),
        (
            "ingest_classification",
            {"skip_errors": "no"},
            "Expected skip_errors to be True or False. Got str: 'no'.",
        ),
        (
            "eval",
            {"num_worker": 2},
            "eval() got an unexpected keyword argument 'num_worker'. Use 'num_workers' instead.",
        ),
        (
            "batches",
            {"num_worker": 2},
            "batches() got an unexpected keyword argument 'num_worker'. Use 'num_workers' instead.",
        ),
        (
            "ingest_classification",
            {"num_worker": 2},
            "ingest_classification() got an unexpected keyword argument 'num_worker'. "
            "Use 'num_workers' instead.",
        ),
    ],
)
def test_wrong_types_and_names_are_type_errors_everywhere(
    tmp_path: Path, numbers: lc.Dataset, folder: Path, call: str, kwargs: dict[str, Any], message: str
) -> None:
    """A string where a count goes, a non-bool flag, or a misspelt option: InvalidTypeError in every call."""
    with pytest.raises(lc.InvalidTypeError) as info:
        CALLS[call](tmp_path, numbers, folder, kwargs)
    assert str(info.value) == message
    assert not (tmp_path / "ingested").exists()  # refused before anything was made
