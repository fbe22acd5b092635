"""Local files outside a dataset: names from untrusted files confined to a folder, and atomic writes.

Two rules every reader and writer of plain files (ingests, exports) follows:

* **A name read from a file is untrusted.** A COCO ``file_name``, a YOLO image path or a ``data.yaml``
  entry is resolved with `confine`: relative to the folder the caller named, symbolic links followed, and
  refused unless the result stays inside that folder.
* **A file written outside a dataset is whole or absent.** `write_atomic` writes a temporary file beside
  the target, flushes it to disk and renames it into place, so a kill or a full disk leaves the previous
  file (or none), never half of one; `atomic_file` does the same for a file written in pieces (a Parquet
  file's row groups).
* **An export of many files keeps the previous one until it is done.** `FolderExport` writes every file
  to a hidden staging folder inside the target, then moves them into place and writes the index file
  (``annotations.json``, ``data.yaml``) last: an export that fails or is killed while it writes leaves
  the previous export as it was. Every name is confined to the target, and two files at one name (or at
  names differing only in letter case) are refused.
* **A re-export holds exactly its own files.** The folder's listing (`LISTING`) records what each export
  wrote; the next one removes those files it does not write again, and never a file it did not write.

This package depends only on `lakecompute.errors`, so that every layer may use it.

Example:
    >>> import tempfile
    >>> from lakecompute.localfiles import confine
    >>> root = tempfile.mkdtemp()
    >>> confine(root, "a/b.png", what="file_name of image 3").endswith("b.png")
    True
    >>> confine(root, "../x.png", what="file_name of image 3")
    Traceback (most recent call last):
    ...
    lakecompute.errors.InvalidArgumentError: file_name of image 3 is '../x.png', which resolves outside ...
"""

from __future__ import annotations

from lakecompute.localfiles._atomic import abandoned_partial, atomic_file, atomic_path, write_atomic
from lakecompute.localfiles._confine import Folder, confine, inside
from lakecompute.localfiles._export import FolderExport
from lakecompute.localfiles._listing import LISTING, Watch

__all__ = [
    "LISTING",
    "Folder",
    "FolderExport",
    "Watch",
    "abandoned_partial",
    "atomic_file",
    "atomic_path",
    "confine",
    "inside",
    "write_atomic",
]
