"""Writes ``tests/storage/old_format/dataset``: a small dataset in the manifest format before issue 39.

Run once with the tree before that issue (commit 1d735e9) on the path, and committed as test data, so that
``tests/storage/test_old_format.py`` can check that today's code reads every version of it and writes to
it::

    PYTHONPATH=/path/to/that/tree python tests/storage/old_format/make_dataset.py

It holds two tensors (``x`` int64, ``name`` text), a few versions on ``main``, a branch ``exp`` with a
commit of its own, a tag ``v1``, and a completed eval's record. ``expected.json`` beside it lists every
version's content as that tree read it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

import lakecompute as lc

HERE = Path(__file__).resolve().parent


@lc.compute
def square(sample_in: int, sample_out: object) -> None:
    sample_out.append({"x": sample_in * sample_in, "name": f"sq{sample_in}"})  # type: ignore[attr-defined]


def main() -> None:
    path = HERE / "dataset"
    shutil.rmtree(path, ignore_errors=True)
    ds = lc.empty(str(path))
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("name", htype="text")
    ds.extend({"x": np.arange(5), "name": [f"n{i}" for i in range(5)]})
    ds.x[2] = -2
    ds.info["about"] = "old format"
    ds.tag("v1")
    ds.checkout("exp", create=True)
    ds.append({"x": 100, "name": "on exp"})
    ds.checkout("main")
    square().eval([1, 2, 3], ds, num_workers=0, progressbar=False)
    ds.append({"x": 7, "name": "last"})
    expected = {}
    for entry in ds.log(all_branches=True):
        old = lc.load(str(path), version=entry["version"])
        expected[str(entry["version"])] = {
            "x": old.x.numpy().tolist() if "x" in old.tensors else None,
            "name": old.name.text() if "name" in old.tensors else None,
            "info": dict(old.info),
            "branch": entry["branch"],
            "parents": entry["parents"],
            "message": entry["message"],
        }
    refs = {
        "main": lc.load(str(path)).version,
        "exp": lc.load(str(path), branch="exp").version,
        "v1": ds.tags["v1"],
    }
    with open(HERE / "expected.json", "w") as fh:
        json.dump({"id": ds.id, "refs": refs, "versions": expected}, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(lc.__file__, file=sys.stderr)


if __name__ == "__main__":
    main()
