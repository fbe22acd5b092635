"""Selecting by value on a COCO dataset: how many objects per class, the images with a diamond, only the
large boxes (filtered together with their labels, polygons, masks and keypoints), exported for
pycocotools, and a contact sheet of what was kept. Everything is read by column: no expression here
decodes an image."""

import contextlib
import io
import json

from pycocotools.coco import COCO

import lakecompute as lc
from lakecompute.testing.detection import write_coco_folder
from lakecompute.viz import contact_sheet

images, annotations = write_coco_folder("./coco-files", n=24, seed=3)
ds = lc.ingest_coco(images, annotations, "./coco", overwrite=True, progressbar=False)

# The first sanity check of a labelled set: boxes per class, as the JSON says.
counts = ds.count_values("categories")
with open(annotations) as f:
    in_json = json.load(f)["annotations"]
print(f"objects per class: {counts} ({len(in_json)} annotations in the JSON)")
assert sum(counts.values()) == len(in_json)
print(f"objects per image: {dict(sorted(ds.count_values('len(boxes)').items()))}")

# Rows: the images with at least one diamond and at least two objects (the same as text and in Python).
with_diamonds = ds.filter("any(categories == 'diamond') and len(boxes) >= 2")
same = ds.filter((lc.col("categories") == "diamond").any() & (lc.col("boxes").len() >= 2))
assert with_diamonds.positions.tolist() == same.positions.tolist()
print(
    f"{len(with_diamonds)} of {len(ds)} images have a diamond and another object: {with_diamonds.selected_by}"
)

# Objects: keep the large boxes only (xywh pixels: width * height). Boxes, labels, ids, areas, polygons,
# RLEs, masks and keypoints are filtered together, aligned by object.
large = ds.filter_labels(lc.col("boxes")[2] * lc.col("boxes")[3] > 800)
(group,) = large.kept_objects.groups
print(f"large objects: {sum(large.count_values('categories').values())} in {len(large)} images; "
      f"filtered together: {sorted(group.names)}")  # fmt: skip

# pycocotools reads the export of the view: the kept annotations only.
large.export_coco("./large/instances.json", "./large/images", progressbar=False)
with contextlib.redirect_stdout(io.StringIO()):  # COCO() prints progress
    coco = COCO("./large/instances.json")
kept = {a["id"] for a in in_json if a["bbox"][2] * a["bbox"][3] > 800}
assert set(coco.anns) == kept
print(f"pycocotools reads {len(coco.anns)} annotations of {len(coco.imgs)} images")

# The most crowded first, as a sheet with the kept boxes drawn; saved, the view records how it was made.
biggest = large.sort("len(boxes)", descending=True)
contact_sheet(biggest, indices="first", cols=6, rows=2).save("large.png")
saved = biggest.save("./large-ds", overwrite=True, progressbar=False)
print(f"saved: {saved.log()[-1]['message']}")
