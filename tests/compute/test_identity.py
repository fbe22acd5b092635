"""An eval knows its input and output by dataset id: a dataset made again at the same path is other data."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched

N = 40
INTERVAL = 10


@lc.compute
def plus_one(sample_in: Any, sample_out: Any) -> None:
    sample_out.y.append(int(sample_in.x.numpy()) + 1)


@lc.compute
def plus_one_fails_past(sample_in: Any, sample_out: Any, limit: int) -> None:
    x = int(sample_in.x.numpy())
    if x >= limit:
        raise ValueError(f"input {x} is past {limit}")
    sample_out.y.append(x + 1)


@lc.compute
def negate_x(sample_in: Any, sample_out: Any) -> None:
    sample_out.x.append(-int(sample_in.x.numpy()))


def _source(path: Path, start: int, step: int = 1) -> lc.Dataset:
    """A dataset of x = start, start+step, ... (N values) at ``path``, made anew: version 2 always."""
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(start, start + step * N, step))
    assert ds.version == 2
    return ds


def _out(path: Path) -> lc.Dataset:
    out = lc.empty(str(path), overwrite=True)
    out.create_tensor("y", dtype="int64")
    return out


def test_completed_eval_is_not_taken_for_one_over_a_recreated_input(tmp_path: Path) -> None:
    """An input made again at its path (same version number, other values) is new input: the rerun runs."""
    _source(tmp_path / "src", 0)
    out = _out(tmp_path / "out")
    plus_one().eval(lc.load(str(tmp_path / "src")), out, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        plus_one().eval(lc.load(str(tmp_path / "src")), out, progressbar=False)
    _source(tmp_path / "src", 1000)  # recreated: version 2 again, other content
    result = plus_one().eval(lc.load(str(tmp_path / "src")), out, progressbar=False)
    assert result.inputs == N
    assert result.resumed_from == 0
    ys = lc.load(str(tmp_path / "out")).y.numpy().tolist()
    assert ys == list(range(1, N + 1)) + list(range(1001, 1001 + N))


def test_unfinished_eval_does_not_resume_over_a_recreated_input(scheduler: Sched, tmp_path: Path) -> None:
    """A checkpointed eval that failed, rerun after its input was made again: refused, not resumed over the
    new rows (no mix of the two inputs); rerun=True then gives the new input's outputs alone."""
    src = _source(tmp_path / "src", 0, step=2)
    out = _out(tmp_path / "out")
    with pytest.raises(lc.TransformError):
        plus_one_fails_past(limit=50).eval(src, out, checkpoint_interval=INTERVAL, **scheduler.kw)
    kept = lc.load(str(tmp_path / "out")).y.numpy().tolist()
    assert kept == [2 * i + 1 for i in range(20)]  # x = 0..38 kept (inputs 0..19), failed at x = 50
    _source(tmp_path / "src", 1, step=2)  # recreated with odd numbers
    new = lc.load(str(tmp_path / "src"))
    with pytest.raises(lc.EvalConflictError, match="rerun=True"):
        plus_one_fails_past(limit=10**6).eval(new, out, checkpoint_interval=INTERVAL, **scheduler.kw)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == kept
    plus_one_fails_past(limit=10**6).eval(new, out, checkpoint_interval=INTERVAL, rerun=True, **scheduler.kw)
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [2 * i + 2 for i in range(N)]


def test_same_eval_over_same_input_still_resumes(tmp_path: Path) -> None:
    """Without a recreate, the same checkpointed eval resumes after its kept prefix (ids do not get in the
    way of the normal path)."""
    src = _source(tmp_path / "src", 0)
    out = _out(tmp_path / "out")
    with pytest.raises(lc.TransformError):
        plus_one_fails_past(limit=25).eval(src, out, checkpoint_interval=INTERVAL, progressbar=False)
    # Same function and arguments: fingerprints match only if the limit is the same, so fix it the way
    # a user fixes code, with the same job (function names, input, output): resumes with a warning.
    with pytest.warns(lc.LakeComputeWarning, match="Resuming the unfinished eval"):
        result = plus_one_fails_past(limit=10**6).eval(
            lc.load(str(tmp_path / "src")), out, checkpoint_interval=INTERVAL, progressbar=False
        )
    assert result.resumed_from == 20
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == list(range(1, N + 1))


def test_in_place_eval_on_a_recreated_dataset_runs(tmp_path: Path) -> None:
    """In place: an eval completed on a dataset, the dataset made again with the same version numbers,
    the eval again: it runs on the new content (the old dataset's records are gone with it)."""
    ds = _source(tmp_path / "ds", 0)
    negate_x().eval(ds, progressbar=False)
    first = lc.load(str(tmp_path / "ds"))
    assert first.x.numpy().tolist() == [-i for i in range(N)]
    again = _source(tmp_path / "ds", 5)
    negate_x().eval(again, progressbar=False)
    reloaded = lc.load(str(tmp_path / "ds"))
    assert reloaded.version == first.version
    assert reloaded.x.numpy().tolist() == [-i for i in range(5, 5 + N)]
    assert reloaded.id != first.id


def test_unfinished_in_place_eval_starts_over_on_a_recreated_dataset(tmp_path: Path) -> None:
    """In place with checkpoints: a failed run, the dataset made again, the eval again: it transforms all
    of the new content once (nothing parked by the old run is used)."""
    ds = _source(tmp_path / "ds", 0)

    with pytest.raises(lc.TransformError):
        _negate_fails_past(limit=25).eval(ds, checkpoint_interval=INTERVAL, progressbar=False)
    again = _source(tmp_path / "ds", 100)
    _negate_fails_past(limit=10**6).eval(again, checkpoint_interval=INTERVAL, progressbar=False)
    assert lc.load(str(tmp_path / "ds")).x.numpy().tolist() == [-i for i in range(100, 100 + N)]


@lc.compute
def _negate_fails_past(sample_in: Any, sample_out: Any, limit: int) -> None:
    x = int(sample_in.x.numpy())
    if x >= limit:
        raise ValueError(f"input {x} is past {limit}")
    sample_out.x.append(-x)


def test_eval_record_names_its_input(tmp_path: Path) -> None:
    """The version an eval commits says which dataset (id, version, rows, tensors, path) it read."""
    src = _source(tmp_path / "src", 0)
    out = _out(tmp_path / "out")
    plus_one().eval(src, out, progressbar=False)
    inputs = lc.load(str(tmp_path / "out")).log()[-1]["eval"]["inputs"]
    assert inputs == {
        "kind": "dataset", "id": src.id, "version": 2, "digest": src.digest, "positions": [0, N, 1],
        "pad": False, "tensors": ["x"], "path": src.path,
    }  # fmt: skip


def test_output_known_by_id_not_by_path_spelling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same output opened through another spelling of its path is the same output: the rerun is a
    no-op."""
    _source(tmp_path / "src", 0)
    _out(tmp_path / "out")
    plus_one().eval(lc.load(str(tmp_path / "src")), lc.load(str(tmp_path / "out")), progressbar=False)
    monkeypatch.chdir(tmp_path)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        plus_one().eval(lc.load("./src"), lc.load("./out"), progressbar=False)
    assert len(lc.load("out").y) == N


def test_view_of_a_recreated_dataset_refuses_to_be_read(scheduler: Sched, tmp_path: Path) -> None:
    """A view taken before its dataset was made again cannot feed an eval: the workers' snapshot refuses
    the other dataset, naming both ids."""
    old = _source(tmp_path / "src", 0)
    view = old[5:15]
    new = _source(tmp_path / "src", 1000)
    out = _out(tmp_path / "out")
    with pytest.raises(lc.DatasetReplacedError) as info:
        plus_one().eval(view, out, **scheduler.kw)
    assert (info.value.expected_id, info.value.found_id) == (old.id, new.id)
    assert len(lc.load(str(tmp_path / "out")).y) == 0


def test_pickled_handle_of_a_recreated_dataset_refuses(tmp_path: Path) -> None:
    """Unpickling a handle (or a view) after its dataset was made again at the path raises
    DatasetReplacedError naming both ids, instead of reading the new dataset's rows as its own."""
    old = _source(tmp_path / "ds", 0)
    blob, view_blob = pickle.dumps(old), pickle.dumps(old[3:6])
    assert pickle.loads(view_blob).x.numpy().tolist() == [3, 4, 5]
    new = _source(tmp_path / "ds", 1000)
    for data in (blob, view_blob):
        with pytest.raises(lc.DatasetReplacedError) as info:
            pickle.loads(data)
        err = info.value
        assert isinstance(err, lc.DatasetNotFoundError)
        assert (err.expected_id, err.found_id) == (old.id, new.id)
        assert old.id in str(err)
        assert new.id in str(err)
        assert "lc.load(path)" in str(err)


def test_pickled_handle_of_a_deleted_and_shorter_dataset_refuses(tmp_path: Path) -> None:
    """A handle whose version the new dataset does not have yet still says the dataset was replaced."""
    old = _source(tmp_path / "ds", 0)
    blob = pickle.dumps(old)
    lc.delete(str(tmp_path / "ds"))
    lc.empty(str(tmp_path / "ds"))  # version 0 only
    with pytest.raises(lc.DatasetReplacedError, match="expected dataset id"):
        pickle.loads(blob)


def test_reload_refuses_a_replaced_dataset(tmp_path: Path) -> None:
    """ds.reload() after the path was overwritten raises and keeps the handle on what it read."""
    old = _source(tmp_path / "ds", 0)
    _source(tmp_path / "ds", 1000)
    with pytest.raises(lc.DatasetReplacedError):
        old.reload()
    assert old.version == 2
