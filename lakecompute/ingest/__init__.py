"""Getting data in: folders of images, image files, and numpy arrays.

* `ingest_classification` turns a folder of class sub-folders of images into a dataset with
  ``images`` and ``labels`` (`lakecompute.ingest_coco` and `lakecompute.ingest_yolo`, in
  `lakecompute.vision`, are built on the same pieces: `IngestOptions`, `plan_images`, `run_ingest`).
* `read` opens one image file lazily. Appended to an image tensor whose sample compression
  is the file's own format, its bytes are stored as they are (a JPEG is not re-encoded and loses
  nothing); otherwise it is decoded like an array.
* `from_numpy` makes a dataset from a dict of arrays.
* `from_arrow`, `from_pandas`, `from_parquet` and `from_csv` make a dataset of a table (a tensor per
  column; ``_table_plan`` decides each, ``_tables`` runs them), the inverse of ``ds.to_arrow()``.

The modules, by role: ``_files`` (one image file), ``_plan`` (how images are stored, decided from
names and headers), ``_options`` (the options every ingest takes), ``_run`` (create, fill with an
eval, clean up), ``_classification`` and ``_numpy`` (the ingests themselves).

Example:
    >>> import numpy as np
    >>> ds = lc.from_numpy("mem://from-numpy-doc", {"x": np.arange(6).reshape(3, 2)}, overwrite=True)
    >>> ds.x.numpy().tolist()
    [[0, 1], [2, 3], [4, 5]]
"""

from lakecompute.ingest._classification import ingest_classification, ingest_image, plan_classification
from lakecompute.ingest._files import (
    AS_STORED,
    EXTENSION_FORMATS,
    FORMAT_EXTENSIONS,
    IMAGE_EXTENSIONS,
    SKIPPED_IMAGE_EXTENSIONS,
    ImageFile,
    PathLike,
    ReadOptions,
    image_files,
    load_for_ingest,
    read,
    skip_advice,
    skipped_images,
)
from lakecompute.ingest._numpy import from_numpy
from lakecompute.ingest._options import IngestKwargs, IngestOptions
from lakecompute.ingest._plan import (
    IngestPlan,
    check_compression,
    plan_for_ingest,
    plan_images,
    refuse_overlap,
    target_mode,
)
from lakecompute.ingest._run import Skipped, fill_dataset, run_ingest
from lakecompute.ingest._tables import from_arrow, from_csv, from_pandas, from_parquet, table_row

__all__ = [
    "AS_STORED",
    "EXTENSION_FORMATS",
    "FORMAT_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "SKIPPED_IMAGE_EXTENSIONS",
    "ImageFile",
    "IngestKwargs",
    "IngestOptions",
    "IngestPlan",
    "PathLike",
    "ReadOptions",
    "Skipped",
    "check_compression",
    "fill_dataset",
    "from_arrow",
    "from_csv",
    "from_numpy",
    "from_pandas",
    "from_parquet",
    "image_files",
    "ingest_classification",
    "ingest_image",
    "load_for_ingest",
    "plan_classification",
    "plan_for_ingest",
    "plan_images",
    "read",
    "refuse_overlap",
    "run_ingest",
    "skip_advice",
    "skipped_images",
    "table_row",
    "target_mode",
]
