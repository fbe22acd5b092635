"""An eval reads only the input tensors its function uses, each on first access, and column views are
input like any view: proved by destroying the chunks of the tensor the function leaves alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.select.test_reads import _destroy, chunk_files

SCHEDULERS = [("serial", 0), ("threaded", 2), ("processed", 2)]


def _labelled(path: Path, n: int = 300) -> lc.Dataset:
    rng = np.random.default_rng(1)
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=[str(i) for i in range(10)])
        ds.extend(
            {
                "images": [rng.integers(0, 255, (48, 48, 3), dtype=np.uint8) for _ in range(n)],
                "labels": np.arange(n, dtype=np.uint32) % 10,
            }
        )
    return ds


@lc.compute
def relabel(sample_in: Any, sample_out: Any) -> None:
    """Shift every label by one (reads labels only)."""
    sample_out.labels.append((sample_in.labels.numpy() + 1) % 10)


@lc.compute
def relabel_batch(batch: Any, sample_out: Any) -> None:
    """relabel, a batch at a time."""
    sample_out.labels.extend((batch.labels.numpy() + 1) % 10)


@pytest.mark.parametrize(("scheduler", "workers"), SCHEDULERS)
@pytest.mark.parametrize("batch_size", [None, 16])
def test_an_in_place_relabel_never_reads_the_images(
    tmp_path: Path, scheduler: str, workers: int, batch_size: int | None
) -> None:
    """With every image chunk destroyed, relabelling in place works: no image was read or rewritten."""
    ds = _labelled(tmp_path / "ds")
    images = chunk_files(ds, "images")
    _destroy(images)
    ds = lc.load(str(tmp_path / "ds"))
    fn = relabel_batch() if batch_size else relabel()
    fn.eval(
        ds, skip_ok=True, scheduler=scheduler, num_workers=workers, batch_size=batch_size, progressbar=False
    )
    assert ds.labels.numpy().tolist() == [(i + 1) % 10 for i in range(300)]
    assert chunk_files(ds, "images") == images  # the images are the stored ones, not rewritten
    with pytest.raises(lc.DatasetCorruptError):
        ds.images[0].numpy()


@lc.compute
def brightness_of_some(sample_in: Any, sample_out: Any) -> None:
    """Read the image only for label 3 (the other rows never ask for it)."""
    label = int(sample_in.labels.numpy())
    value = int(sample_in.images.numpy().sum()) if label == 3 else -1
    sample_out.append({"value": value, "label": label})


@lc.compute
def brightness_batch(batch: Any, sample_out: Any) -> None:
    """The pixel sums of a batch's images (one batch asks for the images, and gets them stacked)."""
    sums = batch.images.numpy().reshape(len(batch.labels.numpy()), -1).sum(axis=1)
    sample_out.extend({"value": sums.astype(np.int64), "label": batch.labels.numpy().astype(np.int64)})


@pytest.mark.parametrize(("scheduler", "workers"), SCHEDULERS)
def test_a_tensor_read_on_first_use_has_its_values(tmp_path: Path, scheduler: str, workers: int) -> None:
    """A tensor the function asks for only in some rows gives the right values there, on every scheduler."""
    ds = _labelled(tmp_path / "ds", n=120)
    pixels = [int(a.sum()) for a in ds.images.numpy(aslist=True)]
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("value", dtype="int64")
    out.create_tensor("label", dtype="int64")
    brightness_of_some().eval(ds, out, scheduler=scheduler, num_workers=workers, progressbar=False)
    assert out.value.numpy().tolist() == [pixels[i] if i % 10 == 3 else -1 for i in range(120)]
    batched = lc.like(str(tmp_path / "batched"), out, overwrite=True)
    brightness_batch().eval(
        ds, batched, batch_size=7, scheduler=scheduler, num_workers=workers, progressbar=False
    )
    assert batched.value.numpy().tolist() == pixels


@lc.compute
def names(sample_in: Any, sample_out: Any) -> None:
    """Write the tensors sample_in holds."""
    sample_out.names.append(",".join(sorted(sample_in.keys())))


def test_a_column_view_is_input_with_its_tensors_only(tmp_path: Path) -> None:
    """ds[["labels"]] as data_in: sample_in holds labels only; the images (destroyed) are never read."""
    ds = _labelled(tmp_path / "ds", n=40)
    _destroy(chunk_files(ds, "images"))
    ds = lc.load(str(tmp_path / "ds"), read_only=True)
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("names", htype="text")
    names().eval(ds[["labels"]], out, num_workers=2, progressbar=False)
    assert set(out.names.data()) == {"labels"}
    counts = lc.empty(str(tmp_path / "counts"), overwrite=True)
    counts.create_tensor("labels", htype="class_label", class_names=[str(i) for i in range(10)])
    relabel().eval(ds[["labels"]][10:20], counts, progressbar=False)
    assert counts.labels.numpy().tolist() == [(i + 1) % 10 for i in range(10, 20)]


def test_a_column_view_in_loaders_and_saves(tmp_path: Path) -> None:
    """A column view feeds loaders and saves with its tensors only."""
    ds = _labelled(tmp_path / "ds", n=20)
    view = ds[["labels"]]
    assert list(view.tensors) == ["labels"]
    (batch,) = list(view.batches(20))
    assert list(batch) == ["labels"]
    assert batch["labels"].tolist() == list(np.arange(20) % 10)
    (torch_batch,) = list(view[5:9].pytorch(4))
    assert list(torch_batch) == ["labels"]
    saved = view.save(str(tmp_path / "saved"), progressbar=False)
    assert list(saved.tensors) == ["labels"]
    with pytest.raises(lc.TensorDoesNotExistError):
        view["images"]
    with pytest.raises(lc.TensorDoesNotExistError):
        ds[["labels", "nope"]]
    with pytest.raises(lc.InvalidArgumentError, match="each tensor once"):
        ds[["labels", "labels"]]
    assert view[3]["labels"].numpy() == 3
    assert view[3].keys() == ["labels"]
