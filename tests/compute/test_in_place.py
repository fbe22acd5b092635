"""In-place evals: written tensors are replaced in one commit, the others keep their content untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from tests.compute.compute_helpers import DIGITS, Sched, image, make_images


@lc.compute
def relabel(sample_in: Any, sample_out: Any) -> None:
    sample_out.labels.append((int(sample_in.labels.numpy()) + 1) % len(DIGITS))


@lc.compute
class Embed:
    """A stand-in for a model: a 4-float vector from the image, built once per worker."""

    def __init__(self, scale: float) -> None:
        self.weights = np.linspace(0.0, scale, 4, dtype=np.float32)

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        mean = float(sample_in.images.numpy().mean())
        sample_out.emb.append(self.weights * mean)


@lc.compute
def relabel_even_only(sample_in: Any, sample_out: Any) -> None:
    if int(sample_in.labels.numpy()) % 2 == 0:
        sample_out.labels.append(0)


@lc.compute
def relabel_twice(sample_in: Any, sample_out: Any) -> None:
    sample_out.labels.extend([1, 2])


@lc.compute
def relabel_fails_at(sample_in: Any, sample_out: Any, bad: int) -> None:
    if sample_in.index == bad:
        raise ValueError(f"label {bad} cannot be fixed")
    sample_out.labels.append(0)


@lc.compute
def flip_keep_odd(sample_in: Any, sample_out: Any) -> None:
    if int(sample_in.labels.numpy()) % 2:
        sample_out.append(
            {"images": np.flip(sample_in.images.numpy(), axis=0), "labels": sample_in.labels.numpy()}
        )


def _fragments(path: Path, name: str) -> list[Any]:
    """The stored runs a tensor of the latest version is made of (to see what was rewritten)."""
    return list(dataset_core(lc.load(str(path))).txn.head.tensors[name].fragments)


def test_in_place_fix_one_column_keeps_the_others(scheduler: Sched, tmp_path: Path) -> None:
    """relabel in place with skip_ok replaces labels only; images keep their content and stored bytes."""
    path = tmp_path / "ds"
    ds = make_images(path, n=30)
    before_version = ds.version
    images_before = _fragments(path, "images")
    result = relabel().eval(ds, skip_ok=True, **scheduler.kw)
    assert result.inputs == 30
    assert result.outputs == {"images": 0, "labels": 30}
    again = lc.load(str(path))
    assert again.labels.numpy().tolist() == [(i + 1) % 10 for i in range(30)]
    assert [a.tolist() for a in again.images.numpy(aslist=True)] == [image(i).tolist() for i in range(30)]
    assert _fragments(path, "images") == images_before  # the same stored runs: nothing rewritten
    old = lc.load(str(path), version=before_version)
    assert old.labels.numpy().tolist() == [i % 10 for i in range(30)]
    assert again.version == before_version + 1


def test_in_place_add_a_column(scheduler: Sched, tmp_path: Path) -> None:
    """A new empty tensor is filled over the rows the other tensors hold, and only it is written."""
    path = tmp_path / "ds"
    ds = make_images(path, n=24)
    ds.create_tensor("emb", htype="embedding")
    assert len(ds) == 0  # the new tensor is empty, yet the eval runs over the 24 rows of data
    images_before = _fragments(path, "images")
    result = Embed(scale=2.0).eval(ds, skip_ok=True, **scheduler.kw)
    assert (result.inputs, result.outputs["emb"]) == (24, 24)
    again = lc.load(str(path))
    assert len(again) == 24
    weights = np.linspace(0.0, 2.0, 4, dtype=np.float32)
    want = np.stack([weights * np.float32(image(i).mean()) for i in range(24)])
    np.testing.assert_allclose(again.emb.numpy(), want, rtol=1e-6)
    assert again.emb.dtype == np.float32
    assert _fragments(path, "images") == images_before
    assert again.labels.numpy().tolist() == [i % 10 for i in range(24)]


def test_in_place_add_a_column_inside_with_block(scheduler: Sched, tmp_path: Path) -> None:
    """The Deep Lake habit: create the column inside `with ds:` and eval right there."""
    path = tmp_path / "ds"
    ds = make_images(path, n=12)
    with ds:
        ds.create_tensor("emb", htype="embedding")
        Embed(scale=1.0).eval(ds, skip_ok=True, **scheduler.kw)
    again = lc.load(str(path))
    assert len(again.emb) == len(again.images) == 12
    messages = [e["message"] for e in again.log()]
    assert messages[-2:] == ["changes before eval", "eval Embed (in place)"]


@pytest.mark.parametrize(
    ("fn", "gave"), [(relabel_even_only(), "{'labels': 0}"), (relabel_twice(), "{'labels': 2}")]
)
def test_in_place_filter_or_many_with_kept_tensors_refused(
    scheduler: Sched, tmp_path: Path, fn: Any, gave: str
) -> None:
    """Filtering or 1:N in place while images are kept fails at the first such input, committing nothing."""
    path = tmp_path / "ds"
    ds = make_images(path, n=10)
    version = ds.version
    with pytest.raises(lc.TransformError, match=r"every input must give exactly one value") as info:
        fn.eval(ds, skip_ok=True, **scheduler.kw)
    # The first such input (any, with parallel workers: failing fast, whichever is found first).
    if scheduler.num_workers == 0 or scheduler.name == "serial":
        assert info.value.index == (1 if gave.endswith("0}") else 0)
    elif gave.endswith("0}"):
        assert info.value.index % 2 == 1  # an odd label: the inputs that wrote nothing
    assert gave in str(info.value.__cause__)
    assert "write into a new dataset" in str(info.value.__cause__)
    again = lc.load(str(path))
    assert again.version == version
    assert again.labels.numpy().tolist() == [i % 10 for i in range(10)]


def test_in_place_failure_leaves_the_dataset_as_it_was(scheduler: Sched, tmp_path: Path) -> None:
    """A failing in-place eval commits nothing: every tensor reads as before, at the same version."""
    path = tmp_path / "ds"
    ds = make_images(path, n=40)
    version = ds.version
    with pytest.raises(lc.TransformError, match=r"failed on data_in\[33\]"):
        relabel_fails_at(bad=33).eval(ds, skip_ok=True, **scheduler.kw)
    again = lc.load(str(path))
    assert again.version == version
    assert again.labels.numpy().tolist() == [i % 10 for i in range(40)]
    assert len(again.images) == 40


def test_in_place_ignore_errors_with_kept_tensors_refused(tmp_path: Path) -> None:
    """A skipped sample would leave its row without a label, so ignore_errors is refused before running."""
    ds = make_images(tmp_path / "ds", n=5)
    with pytest.raises(lc.InvalidArgumentError, match=r"ignore_errors=True cannot be used in place"):
        relabel_fails_at(bad=2).eval(ds, skip_ok=True, ignore_errors=True, progressbar=False)
    assert lc.load(str(tmp_path / "ds")).version == ds.version


def test_in_place_full_replacement_may_filter(scheduler: Sched, tmp_path: Path) -> None:
    """When the function writes every tensor, in place replaces the whole dataset, filters included."""
    path = tmp_path / "ds"
    ds = make_images(path, n=20)
    flip_keep_odd().eval(ds, **scheduler.kw)
    again = lc.load(str(path))
    assert again.labels.numpy().tolist() == [i % 10 for i in range(20) if i % 10 % 2]
    np.testing.assert_array_equal(again.images[0].numpy(), np.flip(image(1), axis=0))
