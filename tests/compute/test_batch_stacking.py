"""A batch's images are stacked by the eval's reader, not by the function's thread: ``batch.images.numpy()``
hands out one array made before the function ran (a model's thread on a GPU does not copy 9.6 MB and take
the GIL back once per image between its kernel launches), with the values and the list view as before."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.htypes import stack_samples, stacked_list
from tests.compute.compute_helpers import SCHEDULERS, Sched, image, make_images


@lc.compute
def observe(batch, sample_out):
    """Per input: the pixel sum read through ``numpy()``, and whether the batch's ``numpy()`` was one
    array made ahead (the same object on every call, the list's items views of it)."""
    array = batch.images.numpy()
    items = batch.images.data()
    ahead = array is batch.images.numpy() and all(np.shares_memory(a, array) for a in items)
    listed = [int(a.sum()) for a in batch.images.numpy(aslist=True)]
    assert listed == [int(a.sum()) for a in array]
    sample_out.sums.extend(array.reshape(len(array), -1).sum(axis=1).astype(np.int64))
    sample_out.ahead.extend(np.full(len(array), ahead))


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=str)
def test_a_batch_of_images_arrives_stacked(scheduler: Sched, tmp_path: Path) -> None:
    ds = make_images(tmp_path / "in", n=40)
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("sums", dtype="int64")
    out.create_tensor("ahead", dtype="bool")
    observe().eval(ds, out, batch_size=8, **scheduler.kw)
    assert out.sums.numpy().tolist() == [int(image(i).astype(np.int64).sum()) for i in range(40)]
    assert out.ahead.numpy().all()


@lc.compute
def ragged(batch, sample_out):
    """Images of two shapes in one batch: a list, as before (``numpy()`` refuses them)."""
    try:
        batch.images.numpy()
    except lc.RaggedShapeError:
        refused = True
    else:
        refused = False
    sample_out.shapes.extend([a.shape[0] * 100 + int(refused) for a in batch.images.numpy(aslist=True)])


def test_a_batch_of_images_of_several_shapes_stays_a_list(tmp_path: Path) -> None:
    ds = make_images(tmp_path / "in", n=0)
    with ds:
        for i in range(10):
            ds.append({"images": image(i, (8, 6) if i % 3 else (5, 4)), "labels": 0})
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("shapes", dtype="int64")
    ragged().eval(ds, out, batch_size=5, num_workers=0, progressbar=False)
    assert out.shapes.numpy().tolist() == [(8 if i % 3 else 5) * 100 + 1 for i in range(10)]


def test_a_stacked_list_follows_its_items() -> None:
    """The array made ahead is handed out only while the list holds its rows: an item replaced (or one
    appended) makes `stack_samples` stack the list as it is; pickled, it is a plain list."""
    values = [np.full((2, 3), k, dtype=np.uint8) for k in range(4)]
    listed = stacked_list(list(values))
    ahead = stack_samples(listed, "x")
    assert ahead is stack_samples(listed, "x")
    np.testing.assert_array_equal(ahead, np.stack(values))
    listed[1] = np.full((2, 3), 9, dtype=np.uint8)
    replaced = stack_samples(listed, "x")
    assert replaced is not ahead
    assert replaced[:, 0, 0].tolist() == [0, 9, 2, 3]
    listed.append(np.zeros((2, 3), dtype=np.uint8))
    assert stack_samples(listed, "x").shape == (5, 2, 3)
    again = pickle.loads(pickle.dumps(listed))
    assert type(again) is list
    assert [a[0, 0] for a in again] == [0, 9, 2, 3, 0]
    ragged_values = [np.zeros((2, 3)), np.zeros((3, 3))]
    assert stacked_list(ragged_values) is ragged_values
    assert stacked_list(["a", "b"]) == ["a", "b"]


def test_a_batch_is_stacked_into_the_array_its_staging_gives() -> None:
    """With a staging (a worker on a GPU: page-locked memory), samples that stack are stacked into the array
    it gives, shape and dtype asked for; where it gives none, or the samples do not stack, as without."""
    values = [np.full((4, 3, 3), k, dtype=np.uint8) for k in range(5)]
    asked: list[tuple[tuple[int, ...], np.dtype]] = []
    given: list[np.ndarray] = []

    def staging(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        asked.append((shape, dtype))
        given.append(np.empty(shape, dtype))
        return given[-1]

    listed = stacked_list(list(values), staging)
    assert asked == [((5, 4, 3, 3), np.dtype(np.uint8))]
    array = stack_samples(listed, "x")
    assert array is given[0]
    np.testing.assert_array_equal(array, np.stack(values))
    assert all(np.shares_memory(item, array) for item in listed)

    declined = stacked_list(list(values), lambda shape, dtype: None)
    np.testing.assert_array_equal(stack_samples(declined, "x"), np.stack(values))
    ragged_values = [np.zeros((2, 3), np.uint8), np.zeros((3, 3), np.uint8)]
    assert stacked_list(ragged_values, staging) is ragged_values
    assert len(asked) == 1  # not asked for samples that do not stack


def test_no_page_locked_memory_without_cuda_initialised_here() -> None:
    """`pinned_staging` gives a page-locked array only once this process has initialised CUDA through
    torch (a worker whose model is on its GPU); here it has not, so batches are plain arrays."""
    from lakecompute.schedulers import cuda_initialised, pinned_staging

    assert not cuda_initialised()
    assert pinned_staging((2, 3), np.dtype(np.uint8), kept=8) is None
