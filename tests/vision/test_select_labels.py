"""Selecting labels on real-format COCO and YOLO data: counts equal the annotation file's, and a
filter_labels view is what every consumer sees (pycocotools, YOLO label files, loaders, evals, saves,
contact sheets)."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.viz import contact_sheet

pycocotools_coco = pytest.importorskip("pycocotools.coco")

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept:DeprecationWarning")


def _load(path: Path) -> Any:
    with contextlib.redirect_stdout(io.StringIO()):  # COCO() prints progress
        return pycocotools_coco.COCO(str(path))


def test_count_values_of_coco_categories_equals_the_annotation_file(
    coco_files: tuple[Path, Path], coco: lc.Dataset
) -> None:
    """Boxes per class counted by count_values equal the annotations per category in the JSON."""
    _, annotations = coco_files
    document = json.loads(annotations.read_text())
    names = {c["id"]: c["name"] for c in document["categories"]}
    want = Counter(names[a["category_id"]] for a in document["annotations"])
    assert coco.count_values("categories") == {**dict.fromkeys(names.values(), 0), **want}
    assert sum(coco.count_values("categories").values()) == len(document["annotations"])
    crowd = Counter(a["iscrowd"] for a in document["annotations"])
    assert coco.count_values("iscrowd") == dict(crowd.most_common())
    per_image = Counter(a["image_id"] for a in document["annotations"])
    assert coco.count_values("len(boxes)") == dict(
        Counter(per_image.get(img["id"], 0) for img in document["images"]).most_common()
    )


def test_filter_labels_on_coco_groups_every_per_object_tensor(coco: lc.Dataset) -> None:
    """The group is every tensor whose htype lists objects and whose rows list the same objects: boxes,
    labels, ids, crowd flags, areas, polygons, the RLE list (json), mask channels and keypoints."""
    view = coco.filter_labels(lc.col("categories") == "car")
    (group,) = view.kept_objects.groups
    assert set(group.names) == {
        "boxes", "categories", "annotation_ids", "iscrowd", "areas", "polygons", "rles", "masks",
        "keypoints", "num_keypoints",
    }  # fmt: skip
    assert dict(group.tensors)["masks"] == -1
    assert len(view) == 2  # the images with a car
    assert [ids.tolist() for ids in view.annotation_ids.numpy(aslist=True)] == [[102], [105]]
    assert view.masks[0].numpy().shape[2] == 1
    assert view.masks.shape[-1] == 1
    assert view.boxes.shape == (2, 1, 4)
    assert [len(r) for r in view.rles.data()] == [1, 1]
    everything = coco.filter_labels("categories == 'car'", only_matches=False)
    assert len(everything) == len(coco)
    assert [len(c) for c in everything.categories.numpy(aslist=True)] == [1, 0, 0, 1]


def test_filter_labels_then_export_coco_writes_only_the_kept_annotations(
    coco: lc.Dataset, tmp_path: Path
) -> None:
    """pycocotools reads the export of a filter_labels view: only the kept annotations and their images."""
    original = tmp_path / "all.json"
    coco.export_coco(original, progressbar=False)
    view = coco.filter_labels("categories == 'car' and areas > 30")
    out = tmp_path / "cars"
    view.export_coco(out / "instances.json", out / "images", progressbar=False)
    before, after = _load(original), _load(out / "instances.json")
    assert sorted(after.anns) == [102, 105]
    for ann_id in after.anns:
        assert after.anns[ann_id] == before.anns[ann_id]  # box, area, crowd, segmentation as they were
        np.testing.assert_array_equal(
            after.annToMask(after.anns[ann_id]), before.annToMask(before.anns[ann_id])
        )
    assert sorted(after.imgs) == [10, 13]
    assert sorted(p.name for p in (out / "images").rglob("*.jpg")) == ["a.jpg", "d.jpg"]
    persons = coco.filter_labels(lc.col("categories") == "person")
    persons.export_coco(tmp_path / "persons.json", progressbar=False)
    got = _load(tmp_path / "persons.json")
    assert sorted(got.anns) == [101, 104]
    assert [got.anns[i]["keypoints"] for i in (101, 104)] == [before.anns[i]["keypoints"] for i in (101, 104)]


def test_filter_labels_then_export_yolo_writes_only_the_kept_lines(yolo_folder: Path, tmp_path: Path) -> None:
    """A YOLO export of a filter_labels view has label files of the kept objects only."""
    ds = lc.ingest_yolo(yolo_folder, tmp_path / "ds", progressbar=False)
    view = ds.filter_labels("labels == 'person'", only_matches=False)
    view.export_yolo(tmp_path / "out", progressbar=False)
    lines = {p.name: p.read_text().splitlines() for p in (tmp_path / "out" / "labels").rglob("*.txt")}
    assert lines["a.txt"] == ["1 0.1 0.2 0.05 0.0625"]
    assert [line.split()[0] for line in lines["b.txt"]] == ["1"]
    assert lines["c.txt"] == []
    assert lines["d.txt"] == []


def test_loaders_evals_saves_and_sheets_see_only_the_kept_objects(coco: lc.Dataset, tmp_path: Path) -> None:
    """batches(), pytorch(), an eval's sample_in, view.save and a contact sheet all hold the kept objects."""
    view = coco.filter_labels("categories == 'person'")
    names = coco.categories.info.class_names
    want = [[names.index("person")]] * 2
    (batch,) = list(view.batches(2, tensors=["categories", "boxes"]))
    assert [c.tolist() for c in batch["categories"]] == want
    assert [b.shape for b in batch["boxes"]] == [(1, 4), (1, 4)]
    (tbatch,) = list(view.pytorch(2, tensors=["categories", "keypoints"]))
    assert [c.tolist() for c in tbatch["categories"]] == want
    assert [tuple(k.shape) for k in tbatch["keypoints"]] == [(1, 3, 3), (1, 3, 3)]

    out = lc.empty(str(tmp_path / "counts"), overwrite=True)
    out.create_tensor("objects", dtype="int64")
    count_objects().eval(view, out, progressbar=False)
    assert out.objects.numpy().tolist() == [1, 1]

    saved = view.save(str(tmp_path / "saved"), progressbar=False)
    assert [c.tolist() for c in saved.categories.numpy(aslist=True)] == want
    assert [m.shape[2] for m in saved.masks.numpy(aslist=True)] == [1, 1]
    assert [len(p) for p in saved.polygons.numpy()] == [1, 1]
    (record,) = [e for e in saved.log() if e.get("origin", {}).get("op") == "copy"]
    assert record["origin"]["inputs"]["query"] == ["filter_labels(categories == 'person')"]
    assert record["origin"]["inputs"]["version"] == coco.version

    sheet = np.asarray(contact_sheet(view, label_tensor=None))
    assert np.array_equal(sheet, np.asarray(contact_sheet(saved, label_tensor=None)))
    assert not np.array_equal(sheet, np.asarray(contact_sheet(coco[[0, 1]], label_tensor=None)))


@lc.compute
def count_objects(sample_in: Any, sample_out: Any) -> None:
    """Write how many boxes the row holds."""
    sample_out.objects.append(len(sample_in.boxes.numpy()))


def test_a_column_view_exports_its_tensors_only(coco: lc.Dataset, tmp_path: Path) -> None:
    """export_coco of ds[["images", "boxes", "categories"]] writes boxes and categories, nothing else."""
    view = coco[["images", "boxes", "categories"]].filter_labels("categories != 'dog'")
    view.export_coco(tmp_path / "small.json", progressbar=False)
    got = _load(tmp_path / "small.json")
    assert sorted(got.anns) == [1, 2, 3, 4]  # ids made up: annotation_ids is not in the view
    assert all("keypoints" not in a and "segmentation" not in a for a in got.anns.values())
    assert sorted(got.cats[a["category_id"]]["name"] for a in got.anns.values()) == [
        "car",
        "car",
        "person",
        "person",
    ]


def test_filter_labels_refusals_and_explicit_groups(coco: lc.Dataset) -> None:
    """A per-row condition is refused; tensors= names the group, and a tensor of other objects is refused."""
    with pytest.raises(lc.ExpressionError, match="filter_labels keeps or drops objects"):
        coco.filter_labels("image_id > 10")
    view = coco.filter_labels("categories == 'car'", tensors=["categories", "boxes"])
    (group,) = view.kept_objects.groups
    assert set(group.names) == {"categories", "boxes"}
    assert [len(a) for a in view.areas.numpy(aslist=True)] == [2, 1]  # not in the group: as stored
    with pytest.raises(lc.InvalidArgumentError, match="holds one value per row"):
        coco.filter_labels("categories == 'car'", tensors=["categories", "image_id"])
    with pytest.raises(lc.TensorDoesNotExistError):
        coco.filter_labels("categories == 'car'", tensors=["nope"])


def test_filter_labels_twice_narrows_the_same_group(coco: lc.Dataset) -> None:
    """A second filter_labels on a view filters the objects it kept, and a filter sees only those."""
    view = coco.filter_labels("iscrowd == 0", only_matches=False)
    assert view.count_values("categories") == {"person": 2, "car": 1, "dog": 0}
    cars = view.filter_labels("categories == 'car'")
    assert [i.tolist() for i in cars.annotation_ids.numpy(aslist=True)] == [[102]]
    assert len(view.filter("any(categories == 'dog')")) == 0
    assert len(coco.filter("any(categories == 'dog')")) == 1
    assert cars.selected_by == (
        "filter_labels(iscrowd == 0, only_matches=False)",
        "filter_labels(categories == 'car')",
    )
