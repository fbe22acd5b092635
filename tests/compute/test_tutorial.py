"""The Deep Lake compute tutorial (seed 004) with ``lc``: like, eval on a slice, in place, compose."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from tests.compute.compute_helpers import DIGITS, Sched, assert_same, make_images, reference, snapshot


@lc.compute
def flip_vertical(sample_in, sample_out):
    sample_out.append(
        {"labels": sample_in.labels.numpy(), "images": np.flip(sample_in.images.numpy(), axis=0)}
    )
    return sample_out


@lc.compute
def resize(sample_in, sample_out, new_size):
    sample_out.labels.append(sample_in.labels.numpy())
    sample_out.images.append(np.array(Image.fromarray(sample_in.images.numpy()).resize(new_size)))
    return sample_out


@lc.compute
def fail_on_label(sample_in, sample_out, label):
    if int(sample_in.labels.numpy()) == label:
        raise ValueError(f"label {label} is broken")
    sample_out.append({"labels": sample_in.labels.numpy(), "images": sample_in.images.numpy()})


def _flipped(ds: lc.Dataset, positions: range) -> list[dict]:
    return [
        {"labels": int(ds.labels[i].numpy()), "images": np.flip(ds.images[i].numpy(), axis=0)}
        for i in positions
    ]


def test_tutorial_flip_slice_into_like(scheduler: Sched, tmp_path: Path) -> None:
    """Flipping ``ds[0:10]`` into ``lc.like(ds)`` gives the flipped first ten samples with the same schema."""
    ds = make_images(tmp_path / "mnist", n=14)
    out = lc.like(str(tmp_path / "flipped"), ds, overwrite=True)
    result = flip_vertical().eval(ds[0:10], out, **scheduler.kw)
    assert result.inputs == 10
    assert result.outputs == {"images": 10, "labels": 10}
    assert_same(out, reference(tmp_path / "ref", ds, _flipped(ds, range(10))))
    assert_same(lc.load(str(tmp_path / "flipped")), out)
    assert out.labels.info.class_names == DIGITS
    assert out.images.sample_compression == "png"


def test_tutorial_in_place(scheduler: Sched, tmp_path: Path) -> None:
    """``eval(ds)`` without data_out replaces ds's content in one commit; the old version stays loadable."""
    ds = make_images(tmp_path / "animals", n=9)
    before = snapshot(ds)
    version = ds.version
    expected = reference(tmp_path / "ref", ds, _flipped(ds, range(9)))
    result = flip_vertical().eval(ds, **scheduler.kw)
    assert ds.version == version + 1 == result.version
    assert_same(ds, expected)
    assert_same(lc.load(str(tmp_path / "animals")), expected)
    assert snapshot(lc.load(str(tmp_path / "animals"), version=version)) == before


def test_tutorial_compose_with_kwarg(scheduler: Sched, tmp_path: Path) -> None:
    """``lc.compose([flip_vertical(), resize(new_size=...)])`` runs both steps per sample, in order."""
    ds = make_images(tmp_path / "mnist", n=14)
    out = lc.like(str(tmp_path / "pipe"), ds, overwrite=True)
    pipeline = lc.compose([flip_vertical(), resize(new_size=(4, 5))])
    result = pipeline.eval(ds[0:10], out, **scheduler.kw)
    rows = [
        {"labels": r["labels"], "images": np.array(Image.fromarray(r["images"]).resize((4, 5)))}
        for r in _flipped(ds, range(10))
    ]
    assert_same(out, reference(tmp_path / "ref", ds, rows))
    assert out.images[0].numpy().shape == (5, 4)
    assert result.outputs == {"images": 10, "labels": 10}


def test_tutorial_seed_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed tutorial, line for line with ``lc`` for ``deeplake``, runs on a generated dataset."""
    monkeypatch.chdir(tmp_path)
    ds_mnist = make_images(tmp_path / "mnist-train", n=20, shape=(28, 28))

    # Transformations on new datasets.
    ds_mnist_flipped = lc.like("./mnist_flipped", ds_mnist, overwrite=True)
    flip_vertical().eval(ds_mnist[0:100], ds_mnist_flipped, num_workers=2, progressbar=False)
    assert len(ds_mnist_flipped) == 20  # the slice is clamped like a Python slice
    Image.fromarray(ds_mnist.images[0].numpy())
    flipped0 = Image.fromarray(ds_mnist_flipped.images[0].numpy())
    np.testing.assert_array_equal(np.asarray(flipped0), np.flip(ds_mnist.images[0].numpy(), axis=0))

    # Transformations on existing datasets.
    ds = make_images(tmp_path / "animals_lakecompute", n=6, shape=(10, 12, 3))
    cat = ds.images[0].numpy()
    flip_vertical().eval(ds, num_workers=2, progressbar=False)
    np.testing.assert_array_equal(ds.images[0].numpy(), np.flip(cat, axis=0))

    # Dataset processing pipelines.
    pipeline = lc.compose([flip_vertical(), resize(new_size=(64, 64))])
    ds_mnist_pipe = lc.like("./mnist_pipeline", ds_mnist, overwrite=True)
    pipeline.eval(ds_mnist[0:100], ds_mnist_pipe, num_workers=2, progressbar=False)
    assert ds_mnist_pipe.images.shape == (20, 64, 64)

    # Recovering from errors: catch the failing index and sample, drop it, run again.
    ds_out = lc.like("./mnist_fixed", ds_mnist, overwrite=True)
    with pytest.raises(lc.TransformError) as info:
        fail_on_label(label=3).eval(ds_mnist, ds_out, num_workers=2, progressbar=False)
    failed_idx = info.value.index
    failed_sample = info.value.sample
    assert failed_idx == 3
    assert int(failed_sample.labels.numpy()) == 3
    keep = [i for i in range(len(ds_mnist)) if ds_mnist.labels[i].numpy() != 3]
    fail_on_label(label=3).eval(ds_mnist[keep], ds_out, num_workers=2, progressbar=False)
    assert ds_out.labels.numpy().tolist() == [i % 10 for i in range(20) if i % 10 != 3]
