"""A package's one-time set-up that would keep its caller's frames alive, and with them a dataset handle.

Two packages leave a reference cycle behind the first time they set themselves up, and the cycle holds
the frames that were on the stack then (each frame holds its caller's): importing torch (torch.fx's
``wrap()`` keeps ``inspect.currentframe()`` in a local, a frame that holds itself) and Ray Data starting a
local Ray on its first use (a frame of its head node's start). The caller of ``ds.pytorch()`` or
``ds.to_ray()`` is on that stack with the dataset in its locals, so the handle, its decoded chunks and its
lease outlived the caller's last reference until Python's cyclic collector happened to run.

`collected_after` runs that collection once, right after the set-up: the cycle holds the running frames but
is not held by them, so it is garbage by then, and the frames it held are freed as they return.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

__all__ = ["collected_after"]


@contextlib.contextmanager
def collected_after(set_up: Callable[[], bool]) -> Iterator[None]:
    """Collect the garbage cycles the block leaves when it is what sets a package up: ``set_up()`` is
    false before the block and true after it (a full collection, 0.07 s with torch loaded; once per
    process, beside the second or more that importing torch or starting Ray takes)."""
    before = set_up()
    yield
    if not before and set_up():
        gc.collect()
