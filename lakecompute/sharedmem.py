"""Arrays handed from one process to another through shared memory, not through a pipe: batches from
loader workers to the consumer (`lakecompute.loaders`), decoded images from decoding helpers to the
worker that reads them (`lakecompute.htypes`).

A worker writes a batch's large arrays back to back into one new file in ``/dev/shm`` (memory, not
disk) and sends only its name and the arrays' layout (`SharedBatch`); the consumer maps the file,
removes its name at once and gives out arrays that are views of the mapping. So a batch's bytes are
copied once (into the file) instead of three times (pickled, through the pipe, unpickled), and the
consumer's arrays are its own: the worker has closed its mapping, the file has no name left, and the
memory is freed when the last array of the batch is.

A worker that dies, or a run stopped with batches still in flight, can leave files behind: their names
carry the run's token, and `remove_leftovers` removes them when the run ends. Where there is no
``/dev/shm``, or for small arrays (under `MIN_SHARED_BYTES`), batches go through the pipe as before.
"""

from __future__ import annotations

import itertools
import math
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MIN_SHARED_BYTES", "SHM_DIR", "SharedBatch", "remove_leftovers", "share_batch"]

#: Where the files live: a tmpfs (memory) on Linux.
SHM_DIR = "/dev/shm"
#: Arrays smaller than this go through the pipe (a file costs a few system calls).
MIN_SHARED_BYTES = 64 << 10
_ALIGN = 64  # each array starts at a multiple of this offset (aligned for any dtype)
_COUNTER = itertools.count()


@dataclass(frozen=True, slots=True)
class SharedBatch:
    """A batch whose large arrays wait in a shared-memory file (see the module's docstring).

    Attributes:
        path: the file.
        layout: per shared array: its name in the batch, dtype, shape and offset in the file.
        rest: the batch's other items, as they are.
        size: the file's size in bytes.
        names: the batch's keys, in its order.
    """

    path: str
    layout: tuple[tuple[str, str, tuple[int, ...], int], ...]
    rest: dict[str, Any]
    size: int
    names: tuple[str, ...]

    def open(self) -> dict[str, Any]:
        """The batch, its shared arrays the caller's own views of the file (whose name is removed here)."""
        fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW)
        try:
            os.unlink(self.path)
            mapped = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        batch = dict(self.rest)
        for name, dtype, shape, offset in self.layout:
            count = math.prod(shape)
            batch[name] = np.frombuffer(mapped, dtype=np.dtype(dtype), count=count, offset=offset).reshape(
                shape
            )
        return {name: batch[name] for name in self.names}


def share_batch(batch: dict[str, Any], token: str) -> dict[str, Any] | SharedBatch:
    """``batch`` with its large numeric arrays moved into a shared-memory file, or ``batch`` itself when
    none is large enough or there is no shared memory here."""
    large = [
        (name, v)
        for name, v in batch.items()
        if isinstance(v, np.ndarray) and v.nbytes >= MIN_SHARED_BYTES and v.dtype.kind in "biufc"
    ]
    if not large or not os.path.isdir(SHM_DIR):
        return batch
    layout = []
    offset = 0
    for name, v in large:
        layout.append((name, v.dtype.str, tuple(v.shape), offset))
        offset += -(-v.nbytes // _ALIGN) * _ALIGN
    path = os.path.join(SHM_DIR, f"lakecompute-{token}-{os.getpid()}-{next(_COUNTER)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.ftruncate(fd, offset)
        with mmap.mmap(fd, offset, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE) as mapped:
            for (_, v), (_, dtype, shape, at) in zip(large, layout, strict=True):
                target = np.frombuffer(mapped, dtype=np.dtype(dtype), count=v.size, offset=at).reshape(shape)
                target[...] = v
                del target  # no view may outlive the mapping's close
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    shared = {name for name, _ in large}
    rest = {k: v for k, v in batch.items() if k not in shared}
    return SharedBatch(path, tuple(layout), rest, offset, tuple(batch))


def remove_leftovers(
    token: str,
    _dir: str = SHM_DIR,
    _listdir: Callable[[str], list[str]] = os.listdir,
    _unlink: Callable[[str], None] = os.unlink,
) -> None:
    """Remove the shared-memory files of run ``token`` that no consumer opened (a run stopped early, a
    worker that died).

    It uses no module global (the defaults hold what it calls), so it works even at the interpreter's
    teardown, from a generator collected after this module's globals were cleared."""
    prefix = "lakecompute-" + token + "-"
    try:
        names = _listdir(_dir)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(prefix):
            try:
                _unlink(_dir + "/" + name)
            except FileNotFoundError:
                pass
