"""Contact sheets, the choice of samples to show, and the HTML view of a dataset."""

from __future__ import annotations

import re

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.viz import MAX_CELLS, contact_sheet, dataset_html, image_tensors, sample_indices


def _dataset(name: str, labels: list[int], size: int = 8) -> lc.Dataset:
    """Images whose pixels all equal their index, with the given class labels (of a, b, c)."""
    n = len(labels)
    ds = lc.empty(f"mem://viz-{name}", overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["a", "b", "c"])
        ds.create_tensor("score", dtype="float32")
        ds.extend(
            {
                "images": np.arange(n, dtype=np.uint8)[:, None, None] * np.ones((n, size, size), np.uint8),
                "labels": labels,
                "score": np.zeros(n, np.float32),
            }
        )
    return ds


def test_sample_indices_share_between_classes() -> None:
    """Every class gets an equal share spread within it; a class with too few gives the rest to others."""
    ds = _dataset("share", [0] * 10 + [1] * 10 + [2] * 2)
    assert sample_indices(ds, 9) == [1, 3, 6, 8, 11, 15, 18, 20, 21]
    assert sample_indices(ds, 3) == [5, 15, 21]
    assert sample_indices(ds, 100) == list(range(22))


def test_sample_indices_without_labels() -> None:
    """With ``label_tensor=None`` the indices are evenly spread over all samples."""
    ds = _dataset("flat", [0] * 10 + [1] * 10)
    assert sample_indices(ds, 4, label_tensor=None) == [2, 7, 12, 17]
    assert sample_indices(ds, 4, label_tensor=None, positions=range(10, 20)) == [11, 13, 16, 18]


def test_sample_indices_unsorted_classes() -> None:
    """Classes mixed through the dataset are grouped, and the result comes class by class."""
    ds = _dataset("mixed", [2, 0, 1, 0, 2, 1, 0, 1, 2])
    assert sample_indices(ds, 3) == [3, 5, 4]
    assert sample_indices(ds, 6, positions=[0, 1, 2, 3]) == [1, 3, 2, 0]


def test_sample_indices_unknown_label_tensor() -> None:
    """A label tensor that is missing, or not a class_label tensor, is refused with the choices."""
    ds = _dataset("badlabels", [0, 1])
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Got label_tensor='nope', which is not in the dataset"
    ):
        sample_indices(ds, 2, label_tensor="nope")
    with pytest.raises(lc.InvalidArgumentError, match=r"label_tensor='score', which is of htype 'generic'"):
        sample_indices(ds, 2, label_tensor="score")


def test_image_tensors() -> None:
    """Image tensors are htype image, or uint8 HxW / HxWxC generic tensors."""
    ds = _dataset("kinds", [0])
    ds.create_tensor("raw", dtype="uint8")
    ds.raw.append(np.zeros((4, 4, 3), np.uint8))
    ds.create_tensor("vec", dtype="uint8")
    ds.vec.append(np.zeros(4, np.uint8))
    assert image_tensors(ds) == ["images", "raw"]


def test_contact_sheet_spread_matches_indices() -> None:
    """``indices="spread"`` draws the same sheet as the indices `sample_indices` picks."""
    ds = _dataset("sheet", [0] * 6 + [1] * 6)
    spread = contact_sheet(ds, indices="spread", cols=4, rows=1)
    assert spread.size == (4 * 96, 96 + 14)
    assert np.array_equal(np.asarray(spread), np.asarray(contact_sheet(ds, indices=[1, 4, 7, 10], cols=4)))
    first = contact_sheet(ds, cols=4, rows=1)  # the default: the first cols * rows
    assert np.array_equal(np.asarray(first), np.asarray(contact_sheet(ds, indices=[0, 1, 2, 3], cols=4)))


def test_contact_sheet_refusals() -> None:
    """A non-image tensor, too many cells, or an unknown ``indices`` word is refused before drawing."""
    ds = _dataset("refuse", [0, 1])
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Expected an image tensor. Got tensor='labels', a class_label"
    ):
        contact_sheet(ds, tensor="labels")
    with pytest.raises(
        lc.InvalidArgumentError, match=rf"at most {MAX_CELLS} images. Got cols \* rows = 2000"
    ):
        contact_sheet(ds, cols=100, rows=20)
    with pytest.raises(lc.InvalidArgumentError, match=r'Expected indices to be a list, "first" or "spread"'):
        contact_sheet(ds, indices="all")  # type: ignore[arg-type]
    with pytest.raises(lc.TensorDoesNotExistError, match="Tensor 'pixels' does not exist"):
        contact_sheet(ds, tensor="pixels")


def test_dataset_html_escapes_and_summarises() -> None:
    """The HTML view escapes names, lists class names and shows one thumbnail per chosen sample."""
    ds = _dataset("<b>esc</b>", [0, 1, 2, 0])
    page = dataset_html(ds, thumbnails=3)
    assert "mem://viz-&lt;b&gt;esc&lt;/b&gt;" in page
    assert "<b>esc</b>" not in page
    assert "<div>labels: a, b, c</div>" in page
    assert re.findall(r'alt="images\[(\d+)\]"><figcaption>([^<]*)<', page) == [
        ("3", "3: a"),  # the middle one of class a's samples 0 and 3
        ("1", "1: b"),
        ("2", "2: c"),
    ]
    assert 'width="64" height="64"' in page  # 8x8 images are shown larger


def test_dataset_html_empty() -> None:
    """A dataset without samples shows its table and no thumbnails."""
    ds = lc.empty("mem://viz-empty", overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    page = dataset_html(ds)
    assert "<td>images</td><td>image</td><td>uint8</td><td>(0)</td><td>png</td><td>0</td>" in page
    assert "<img" not in page


def _detection(name: str) -> lc.Dataset:
    """One black 40x40 image with a box, a mask and two keypoints of class 0 ('cat')."""
    ds = lc.empty(f"mem://viz-{name}", overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="xywh")
        ds.create_tensor("categories", htype="class_label", class_names=["cat", "dog"])
        ds.create_tensor("masks", htype="binary_mask")
        ds.create_tensor("keypoints", htype="keypoints", skeleton=[[1, 2]])
    mask = np.zeros((40, 40, 1), dtype=bool)
    mask[20:30, 20:30] = True
    ds.append(
        {
            "images": np.zeros((40, 40, 3), np.uint8),
            "boxes": [[5, 5, 25, 25]],
            "categories": [0],
            "masks": mask,
            "keypoints": [[[10, 34, 2], [36, 34, 0]]],
        }
    )
    return ds


def test_contact_sheet_draws_boxes_masks_and_keypoints() -> None:
    """Box outlines, mask tints and keypoint dots appear over the image in the class's colour; targets=False
    leaves the image as it is; a per-object label does not become the caption."""
    from lakecompute.viz import target_tensors

    ds = _detection("targets")
    assert target_tensors(ds) == ["masks", "boxes", "keypoints"]
    sheet = np.asarray(contact_sheet(ds, cell=48))
    plain = np.asarray(contact_sheet(ds, cell=48, targets=False))
    at = 4  # the 40x40 image sits 4 px into its 48 px cell
    red = [230, 25, 75]  # the palette's first colour: class 0, object 0
    assert sheet[at + 15, at + 5].tolist() == red  # the box's left edge (x = 5)
    assert sheet[at + 27, at + 27].tolist() == [115, 12, 37]  # inside the mask: half red over black
    assert sheet[at + 34, at + 10].tolist() == red  # the visible keypoint's dot
    assert sheet[at + 34, at + 36].tolist() == [0, 0, 0]  # the unlabelled keypoint is not drawn
    assert plain[at + 15, at + 5].tolist() == [0, 0, 0]
    assert plain[at + 27, at + 27].tolist() == [0, 0, 0]


def test_notebook_view_draws_targets() -> None:
    """The HTML view's thumbnails carry the drawn targets (they differ from the bare image's)."""
    ds = _detection("targets-html")
    with_targets = dataset_html(ds)
    ds.delete_tensor("boxes")
    ds.delete_tensor("masks")
    ds.delete_tensor("keypoints")
    assert dataset_html(ds).split("<img")[1] != with_targets.split("<img")[1]
