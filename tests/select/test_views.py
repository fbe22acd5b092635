"""Views made by selecting: they compose, pickle, iterate and show shapes with their objects and tensors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import lakecompute as lc
from tests.select.test_equivalence import read_row


def test_views_of_filter_labels_views_keep_their_objects_aligned(every: lc.Dataset) -> None:
    """Slicing, indexing, iterating and sorting a filter_labels view keeps each row's own objects."""
    view = every.filter_labels("categories == 'bus'", only_matches=False)
    buses = [[c for c in read_row(every[i])["categories"] if c == 1] for i in range(len(every))]
    assert [c.tolist() for c in view.categories.numpy(aslist=True)] == buses
    part = view[[7, 2, 7]]
    assert [c.tolist() for c in part.categories.numpy(aslist=True)] == [buses[7], buses[2], buses[7]]
    assert [row["categories"].numpy().tolist() for row in view[5:9]] == buses[5:9]
    assert view[3].to_dict()["categories"].tolist() == buses[3]
    assert view.categories[4].numpy().tolist() == buses[4]
    assert [t.numpy().tolist() for t in view.categories[2:4]] == buses[2:4]
    ordered = view.sort("len(categories)", descending=True)
    counts = [len(c) for c in ordered.categories.numpy(aslist=True)]
    assert counts == sorted((len(b) for b in buses), reverse=True)
    assert view.boxes.shape[0] == len(every)
    assert [view.boxes[i].shape[0] for i in range(6)] == [len(b) for b in buses[:6]]
    assert view.masks[2].shape[-1] == len(buses[2])
    with pytest.raises(lc.InvalidTypeError, match="keeps some of the objects"):
        view.polygons[2].tobytes()


def test_selected_views_pickle_with_what_they_select(every: lc.Dataset) -> None:
    """A view pickles with its rows, tensors, kept objects and query, and reads the same after."""
    view = every[["categories", "boxes", "labels"]].filter_labels("categories != 'car'").sort("labels")
    back = pickle.loads(pickle.dumps(view))
    assert back.selected_by == view.selected_by == ("filter_labels(categories != 'car')", "sort(labels)")
    assert back.columns == ("categories", "boxes", "labels")
    assert back.positions.tolist() == view.positions.tolist()
    assert [c.tolist() for c in back.categories.numpy(aslist=True)] == [
        c.tolist() for c in view.categories.numpy(aslist=True)
    ]
    row = pickle.loads(pickle.dumps(view[0]))
    assert row.keys() == ["labels", "categories", "boxes"]
    assert row["categories"].numpy().tolist() == view[0]["categories"].numpy().tolist()


def test_two_groups_are_filtered_apart() -> None:
    """A dataset with ground truth and predictions: tensors= names each group; one filter leaves the other."""
    ds = lc.empty("mem://select-groups", overwrite=True)
    with ds:
        for name in ("gt", "pred"):
            ds.create_tensor(f"{name}_boxes", htype="bbox")
            ds.create_tensor(f"{name}_labels", htype="class_label", class_names=["car", "bus"])
        ds.create_tensor("pred_scores", dtype="float32")
        ds.append({
            "gt_boxes": np.float32([[0, 0, 1, 1]] * 2), "gt_labels": [0, 1],
            "pred_boxes": np.float32([[0, 0, 1, 1]] * 2), "pred_labels": [1, 1], "pred_scores": [0.9, 0.1],
        })  # fmt: skip
    found = ds.filter_labels("pred_scores > 0.5")
    (group,) = found.kept_objects.groups
    assert set(group.names) == {
        "gt_boxes",
        "gt_labels",
        "pred_boxes",
        "pred_labels",
        "pred_scores",
    }  # counts agree
    pred = ds.filter_labels("pred_scores > 0.5", tensors=["pred_boxes", "pred_labels", "pred_scores"])
    assert pred.gt_labels[0].numpy().tolist() == [0, 1]
    assert pred.pred_labels[0].numpy().tolist() == [1]
    both = pred.filter_labels("gt_labels == 'bus'", tensors=["gt_boxes", "gt_labels"])
    assert both.gt_labels[0].numpy().tolist() == [1]
    assert both.pred_scores[0].numpy().tolist() == [pytest.approx(0.9)]
    assert len(both.kept_objects.groups) == 2
    with pytest.raises(
        lc.InvalidArgumentError, match="row 0 of the view holds 1 of its values and 2 objects"
    ):
        pred.filter_labels("gt_labels == 'bus'", tensors=["gt_labels", "pred_labels"])
    with pytest.raises(lc.InvalidArgumentError, match=r"filters the objects of .* together; tensors= names"):
        pred.filter_labels("pred_scores > 0.7", tensors=["pred_scores"])


def test_a_filter_labels_view_stays_on_its_version() -> None:
    """A filter_labels view reads the version it was taken on: later writes never misalign its objects."""
    ds = lc.empty("mem://select-changed", overwrite=True)
    ds.create_tensor("labels", htype="class_label", class_names=["a", "b"])
    ds.labels.extend([np.uint32([0, 1]), np.uint32([1])])
    view = ds.filter_labels("labels == 'b'")
    ds.labels[0] = np.uint32([1, 1, 1])
    assert [v.tolist() for v in view.labels.numpy(aslist=True)] == [[1], [1]]
    again = ds.filter_labels("labels == 'b'")
    assert [v.tolist() for v in again.labels.numpy(aslist=True)] == [[1, 1, 1], [1]]
