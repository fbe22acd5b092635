"""Reading: stacked and ragged numpy(), shapes, dtypes, rows, index lists, masks, negative indices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc


@pytest.fixture
def images(tmp_path: Path) -> lc.Dataset:
    """A reopened dataset of 12 PNG images (value i), ragged ints, labels, text and json."""
    path = str(tmp_path / "views")
    ds = lc.empty(path)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("raw", htype="image")
        ds.create_tensor("ragged", dtype="int32")
        ds.create_tensor("labels", htype="class_label", class_names=["even", "odd"])
        ds.create_tensor("caption", htype="text")
        ds.create_tensor("meta", htype="json")
        for i in range(12):
            ds.append(
                {
                    "images": np.full((6, 4, 3), i, dtype=np.uint8),
                    "raw": np.full((2, 2), i, dtype=np.uint8),
                    "ragged": np.arange(i % 3 + 1, dtype=np.int32) * 10 + i,
                    "labels": "odd" if i % 2 else "even",
                    "caption": f"c{i}",
                    "meta": {"i": i},
                }
            )
    return lc.load(path)


def test_tensor_slice_numpy_stacks(images: lc.Dataset) -> None:
    """ds.images[2:10].numpy() is one stacked uint8 array of the eight images."""
    arr = images.images[2:10].numpy()
    assert arr.shape == (8, 6, 4, 3)
    assert arr.dtype == np.uint8
    assert arr[:, 0, 0, 0].tolist() == list(range(2, 10))


def test_tensor_whole_numpy_stacks(images: lc.Dataset) -> None:
    """ds.raw.numpy() stacks every sample; np.asarray(tensor) gives the same array."""
    arr = images.raw.numpy()
    assert arr.shape == (12, 2, 2)
    assert arr[:, 1, 1].tolist() == list(range(12))
    np.testing.assert_array_equal(np.asarray(images.raw), arr)


def test_tensor_ragged_numpy_raises_naming_aslist(images: lc.Dataset) -> None:
    """Stacking samples of different shapes raises RaggedShapeError (a ValueError) naming aslist=True."""
    with pytest.raises(lc.RaggedShapeError, match=r"different shapes .*numpy\(aslist=True\)") as info:
        images.ragged.numpy()
    assert isinstance(info.value, ValueError)
    with pytest.raises(lc.RaggedShapeError, match=r"aslist=True"):
        images.ragged[0:3].numpy()


def test_tensor_ragged_numpy_aslist(images: lc.Dataset) -> None:
    """numpy(aslist=True) gives one array per sample with its own shape."""
    got = images.ragged[0:4].numpy(aslist=True)
    assert [g.tolist() for g in got] == [[0], [1, 11], [2, 12, 22], [3]]
    assert all(g.dtype == np.int32 for g in got)
    stacked = images.raw[0:3].numpy(aslist=True)
    assert isinstance(stacked, list)
    assert [int(s[0, 0]) for s in stacked] == [0, 1, 2]


def test_tensor_ragged_rows_that_agree_still_stack(images: lc.Dataset) -> None:
    """A selection of ragged-tensor samples that happen to share a shape stacks into one array."""
    arr = images.ragged[[0, 3, 6]].numpy()
    assert arr.tolist() == [[0], [3], [6]]


def test_tensor_shape_none_in_ragged_dims(images: lc.Dataset) -> None:
    """shape is (length, *sample shape) with None where samples differ, for tensors and selections."""
    assert images.images.shape == (12, 6, 4, 3)
    assert images.ragged.shape == (12, None)
    assert images.ragged[[0, 3]].shape == (2, 1)
    assert images.ragged[1].shape == (2,)
    assert images.caption.shape == (12,)


def test_tensor_dtype_and_len(images: lc.Dataset) -> None:
    """dtype is the numpy dtype (object for text/json); len is the sample count."""
    assert images.images.dtype == np.uint8
    assert images.ragged.dtype == np.int32
    assert images.labels.dtype == np.uint32
    assert images.caption.dtype == np.dtype(object)
    assert len(images.images) == 12
    assert len(images.images[2:10]) == 8
    assert len(images) == 12
    assert images.ragged[2:10].dtype == np.int32


def test_dataset_row_reads_each_tensor(images: lc.Dataset) -> None:
    """ds[i] is a row: attribute and item access give that sample of each tensor."""
    r = images[5]
    assert isinstance(r, lc.Row)
    assert r.index == 5
    assert int(r.images.numpy()[0, 0, 0]) == 5
    assert int(r["labels"].numpy()) == 1
    assert r.caption.text() == "c5"
    assert r.meta.data() == {"i": 5}
    d = r.to_dict()
    assert d["ragged"].tolist() == [5, 15, 25]
    assert d["caption"] == "c5"
    assert r.keys() == ["images", "raw", "ragged", "labels", "caption", "meta"]


def test_dataset_index_list_keeps_order(images: lc.Dataset) -> None:
    """ds[[3, 1, 7]] is a view of those samples in that order."""
    v = images[[3, 1, 7]]
    assert isinstance(v, lc.DatasetView)
    assert len(v) == 3
    assert v.caption.text() == ["c3", "c1", "c7"]
    assert v.labels.numpy().tolist() == [1, 1, 1]
    assert v.images.numpy()[:, 0, 0, 0].tolist() == [3, 1, 7]
    assert [r.caption.text() for r in v] == ["c3", "c1", "c7"]


def test_dataset_boolean_mask_selects(images: lc.Dataset) -> None:
    """ds[mask] selects the samples where the mask is True."""
    mask = images.labels.numpy() == 0
    v = images[mask]
    assert len(v) == 6
    assert v.caption.text() == [f"c{i}" for i in range(0, 12, 2)]
    assert v.raw.numpy()[:, 0, 0].tolist() == list(range(0, 12, 2))


def test_dataset_negative_indices(images: lc.Dataset) -> None:
    """Negative indices count from the end for rows, tensors, index lists and slices."""
    assert images[-1].caption.text() == "c11"
    assert images.caption[-2].text() == "c10"
    assert images[[-1, 0]].caption.text() == ["c11", "c0"]
    assert images.caption[-3:].text() == ["c9", "c10", "c11"]
    assert images.raw[::-4].numpy()[:, 0, 0].tolist() == [11, 7, 3]


def test_view_of_view_composes(images: lc.Dataset) -> None:
    """Indexing a view selects within the view, and a view's row maps to the dataset's position."""
    v = images[2:10]
    assert v[1:3].caption.text() == ["c3", "c4"]
    assert v[-1].index == 9
    assert v[[0, 2]].caption.text() == ["c2", "c4"]
    assert v["caption"][0:2].text() == ["c2", "c3"]
    assert v.path == images.path
    assert v.version == images.version
    assert v.read_only


def test_tensor_text_and_data(images: lc.Dataset) -> None:
    """text() and data() give str and JSON values (lists for several samples); numpy tensors refuse them."""
    assert images.caption[0].text() == "c0"
    assert images.caption.text() == [f"c{i}" for i in range(12)]
    assert images.meta[4:6].data() == [{"i": 4}, {"i": 5}]
    assert images.caption[1].data() == "c1"
    with pytest.raises(lc.InvalidTypeError, match=r"has htype 'image'; text\(\) is for text tensors"):
        images.images[0].text()


def test_class_label_names_mapped_and_info(images: lc.Dataset) -> None:
    """Class names written as strings read back as indices; info.class_names lists the names."""
    assert images.labels.numpy().tolist() == [i % 2 for i in range(12)]
    assert images.labels.info.class_names == ["even", "odd"]
    assert images.labels.info["class_names"] == ["even", "odd"]
    with pytest.raises(AttributeError, match=r"Tensor info has no 'nothing'"):
        _ = images.labels.info.nothing


def test_dataset_iteration_yields_rows(images: lc.Dataset) -> None:
    """Iterating a dataset yields its rows in order; iterating a tensor yields its samples."""
    assert [r.caption.text() for r in images] == [f"c{i}" for i in range(12)]
    assert [int(t.numpy()[0, 0]) for t in images.raw] == list(range(12))


def test_dataset_len_is_shortest_tensor(tmp_path: Path) -> None:
    """len(ds) is the shortest tensor's length; max_len the longest."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("a")
    ds.create_tensor("b")
    ds.a.extend([1, 2, 3])
    ds.b.extend([1])
    assert len(ds) == 1
    assert ds.max_len == 3
    assert len(ds[0:10]) == 1


def test_dataset_empty_has_length_zero(tmp_path: Path) -> None:
    """A new dataset, and a new tensor, have length 0 and read as empty."""
    ds = lc.empty(str(tmp_path / "ds"))
    assert len(ds) == 0
    assert list(ds) == []
    ds.create_tensor("x", dtype="float32")
    again = lc.load(str(tmp_path / "ds"))
    assert len(again) == 0
    assert len(again.x) == 0
    assert again.x.numpy(aslist=True) == []
    assert again.x.shape == (0,)
    assert len(again[0:5]) == 0
