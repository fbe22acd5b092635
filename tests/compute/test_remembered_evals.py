"""Every eval is remembered, however many came after it, and no manifest carries another eval's details."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import whole_manifest
from tests.compute.compute_helpers import Sched
from tests.helpers import make_numbers, make_out


@lc.compute
def shift(sample_in: Any, sample_out: Any, by: int) -> None:
    """y = x + by."""
    sample_out.y.append(int(sample_in) + by)


@lc.compute
def fails_on_odd(sample_in: Any, sample_out: Any) -> None:
    """y = x for even x; odd x raise."""
    if int(sample_in) % 2:
        raise ValueError(f"odd input {int(sample_in)}: " + "why " * 40)
    sample_out.y.append(int(sample_in))


def _manifest_bytes(path: Path, version: int) -> int:
    return (path / "versions" / f"{version:010d}.json").stat().st_size


def _evals_bytes(path: Path, version: int) -> int:
    """The bytes of a manifest's eval records, stored whole (the rest is the tensors' fragments)."""
    return len(json.dumps(whole_manifest(path, version)["evals"], separators=(",", ":")))


def test_first_of_many_evals_rerun_is_a_noop(scheduler: Sched, tmp_path: Path) -> None:
    """After 100 other evals into one output, rerunning the first writes nothing and warns."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    first = shift(by=0).eval([1, 2], out, progressbar=False)
    for by in range(1, 101):
        shift(by=by).eval([1, 2], out, progressbar=False)
    version = out.version
    with pytest.warns(lc.LakeComputeWarning, match=rf"already completed into .* at version {first.version};"):
        again = shift(by=0).eval([1, 2], out, **scheduler.kw)
    assert (again.inputs, again.outputs, again.resumed_from, again.seed) == (2, {"y": 2}, 0, first.seed)
    reloaded = lc.load(str(tmp_path / "out"))
    assert (reloaded.version, len(reloaded.y)) == (version, 202)
    # Each later manifest holds a reference per earlier eval, not its record: well under 100 bytes each.
    assert _evals_bytes(tmp_path / "out", version) < 101 * 100


def test_a_record_is_kept_whole_only_in_its_own_version(tmp_path: Path) -> None:
    """An eval with 2,000 failures: later manifests stay under 10 KB, and its rerun still reports them."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    result = fails_on_odd().eval(list(range(4000)), out, ignore_errors=True, progressbar=False)
    assert len(result.failed) == 2000
    assert _evals_bytes(tmp_path / "out", result.version) > 100_000  # the record, whole, is here
    out.y.append(7)  # a later commit
    assert _manifest_bytes(tmp_path / "out", out.version) < 10_000
    shift(by=1).eval([1], out, progressbar=False)  # a later eval
    assert _manifest_bytes(tmp_path / "out", out.version) < 10_000
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        again = fails_on_odd().eval(list(range(4000)), out, ignore_errors=True, progressbar=False)
    assert again.failed_indices[:3] == [1, 3, 5]
    assert again.failed[0].message.startswith("odd input 1: why")
    assert len(lc.load(str(tmp_path / "out")).y) == 2000 + 2


def test_rerun_after_its_version_was_vacuumed_is_still_a_noop(tmp_path: Path) -> None:
    """vacuum(keep_versions=...) may remove the version keeping a record whole; the eval is still known."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    shift(by=5).eval([1, 2, 3], out, progressbar=False)
    for i in range(3):
        out.y.append(i)
    out.vacuum(grace_seconds=0, keep_versions=1)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        again = shift(by=5).eval([1, 2, 3], out, progressbar=False)
    assert again.inputs == 3
    assert len(lc.load(str(tmp_path / "out")).y) == 6


@lc.compute
def plus_one(sample_in: Any, sample_out: Any) -> None:
    """y = x + 1."""
    sample_out.y.append(sample_in.x.numpy() + 1)


def _add_column_cell(ds: lc.Dataset, scheduler: Sched) -> None:
    """The add-a-computed-column cell, as a notebook runs it (again)."""
    if "y" not in ds.tensors:
        ds.create_tensor("y", dtype="int64")
    plus_one().eval(ds, skip_ok=True, **scheduler.kw)


def test_add_column_cell_twice_is_one_version(scheduler: Sched, tmp_path: Path) -> None:
    """Creating a column and filling it in place, run twice: the second run is a no-op with the warning."""
    ds = make_numbers(tmp_path / "ds", 30)
    _add_column_cell(ds, scheduler)
    version = ds.version
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _add_column_cell(ds, scheduler)
    assert [str(w.message) for w in caught if issubclass(w.category, lc.LakeComputeWarning)] == [
        f"This eval (plus_one) already completed into {str(tmp_path / 'ds')!r} at version {version}; nothing "
        "was written again. Pass rerun=True to write its outputs once more."
    ]
    again = lc.load(str(tmp_path / "ds"))
    assert again.version == version
    np.testing.assert_array_equal(again.y.numpy(), np.arange(30) + 1)
