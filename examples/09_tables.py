"""Tables in and out: a CSV of image paths with labels becomes a dataset; the dataset goes out as Parquet
that DuckDB queries and Hugging Face `datasets` reads typed; the Parquet file comes back as the same
dataset, byte for byte; and the file is the input of an eval, read by row group in its workers.
"""

import warnings
from pathlib import Path

import datasets
import duckdb
import numpy as np
from PIL import Image

import lakecompute as lc

datasets.disable_progress_bars()

# 1. A folder of PNG files and a CSV naming them, a label and a score each (one path leaves the folder).
Path("photos/train").mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)
lines = ["file,label,score"]
for i in range(24):
    Image.fromarray(rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)).save(f"photos/train/{i}.png")
    lines.append(f"train/{i}.png,{['cat', 'dog', 'bird'][i % 3]},{i / 10}")
lines.append("../../etc/passwd,cat,0.0")
Path("photos/labels.csv").write_text("\n".join(lines) + "\n")

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", lc.LakeComputeWarning)
    ds = lc.from_csv(
        "photos/labels.csv",
        "./photos-ds",
        htypes={"file": "image", "label": "class_label"},
        skip_errors=True,  # the path out of the folder is skipped and listed, not stored
        num_workers=2,
        overwrite=True,
        progressbar=False,
    )
skipped = str(caught[0].message).splitlines()[1].strip()
print(f"ingested {len(ds)} rows, classes {ds.label.info.class_names}; skipped {skipped[:46]}")

# 2. Out: Parquet, queried by DuckDB and read typed by Hugging Face datasets.
ds.to_parquet("photos.parquet", progressbar=False)
counts = duckdb.sql("select label, count(*) from 'photos.parquet' group by label order by label").fetchall()
print("duckdb counts by label:", counts)
hf = datasets.Dataset.from_parquet("photos.parquet", cache_dir="./hf-cache")
print("HF features:", {name: type(f).__name__ for name, f in hf.features.items()})

# 3. In again: the same dataset, the same PNG bytes.
back = lc.from_parquet("photos.parquet", "./photos-back", overwrite=True, progressbar=False)
same = all(back.file[i].tobytes() == ds.file[i].tobytes() for i in range(len(ds)))
labels = back.label.numpy().tolist() == ds.label.numpy().tolist()
print(f"round trip: {len(back)} rows, same bytes: {same}, same labels: {labels}")


# 4. The Parquet file as data_in: each worker reads its row groups; the rerun is a no-op.
@lc.compute
def brightness(row, sample_out):
    sample_out.append({"mean": np.float32(row["file"].numpy().mean()), "label": row["label"]})


out = lc.empty("./brightness", overwrite=True)
out.create_tensor("mean", dtype="float32")
out.create_tensor("label", htype="class_label", class_names=ds.label.info.class_names)
brightness().eval(lc.read_parquet("photos.parquet"), out, num_workers=2, progressbar=False)
with warnings.catch_warnings(record=True) as again:
    warnings.simplefilter("always", lc.LakeComputeWarning)
    brightness().eval(lc.read_parquet("photos.parquet"), out, num_workers=2, progressbar=False)
print(f"brightness of {len(out)} images; the rerun: {'already completed' in str(again[0].message)}")
