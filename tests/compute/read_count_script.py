"""``read_count_script.py DATA OUT LOG SCHEDULER WORKERS BATCH``: eval a flip over dataset DATA into OUT,
logging every chunk file of DATA that any process of the eval opens.

The count comes from the interpreter itself: an audit hook (``sys.addaudithook``) sees every ``open`` and
``os.open``, whoever makes it (zarr's store, lakecompute's direct chunk reader, a thread, a forked worker,
which inherits the hook). Each open of a file under DATA's ``segments/`` chunk folders appends
``"<pid> <path>"`` to LOG (opened with ``O_APPEND``: the lines of concurrent processes never mix). The
script prints this process's id, so the test tells the caller's reads from the workers'.

BATCH is ``0`` for one sample at a time, else the ``batch_size``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

import lakecompute as lc


def _install(data: str, log: str) -> None:
    root = os.path.realpath(data) + os.sep
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or not args:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return  # an open of a file descriptor (os.fdopen): the file was opened, and counted, before
        full = os.path.realpath(path)
        if full.startswith(root) and f"{os.sep}c{os.sep}" in full[len(root) :]:
            os.write(fd, f"{os.getpid()} {full[len(root) :]}\n".encode())

    sys.addaudithook(hook)


@lc.compute
def flip(sample_in: Any, sample_out: Any) -> None:
    """Flip each image upside down; keep its label."""
    sample_out.images.append(np.flip(sample_in.images.numpy(), axis=0))
    sample_out.labels.append(sample_in.labels.numpy())


@lc.compute
def flip_batch(batch_in: Any, sample_out: Any) -> None:
    """Flip a batch of images upside down (one vectorised flip); keep the labels."""
    sample_out.images.extend(np.flip(batch_in.images.numpy(), axis=1))
    sample_out.labels.extend(batch_in.labels.numpy())


if __name__ == "__main__":
    data, out, log, scheduler, workers, batch = sys.argv[1:7]
    source = lc.load(data, read_only=True)
    target = lc.like(out, source, overwrite=True)
    _install(data, log)
    size = int(batch) or None
    fn = flip_batch() if size else flip()
    fn.eval(source, target, scheduler=scheduler, num_workers=int(workers), batch_size=size, progressbar=False)
    print(json.dumps({"pid": os.getpid()}))
