"""Decoding a block's images in helper processes, so that the process reading them keeps its GIL.

A worker placed on a GPU runs the model on one thread and reads ahead on others. Its reader threads
hold the GIL for about a quarter of each image's decode (Pillow's header parsing and the copies out of
it), and the model's kernel launches queue behind them: on an H200 one such worker ran 2,740
224x224 JPEGs a second through a ResNet-50 in the steady state, 3,440 with helpers, where a loop fed
from memory ran 7,600 (docs/performance.md). With
`decode_in_processes`, the image samples of a block are decoded in helper processes instead; the
reading process only verifies the stored bytes (as always, before anything is decoded) and sends them;
the pixels come back through shared memory (`lakecompute.sharedmem`: the helper writes them into a
``/dev/shm`` file, the reader maps it), so that taking them costs the reader no copy under its GIL.

The helpers are a `lakecompute.schedulers.Service`: the processed scheduler's pool of processes, behind
futures, so they keep its guarantees (started from a fork server, their stderr forwarded, ended with the
process that started them). A helper that dies fails the requests outstanding with a `WorkerDiedError`
that says how: the process warns once, with it, and decodes here from then on, so a read never fails
for want of a helper (a sample that kills its decoder then kills the worker, as it did before).
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import CancelledError
from typing import Any

import multiprocess.util
import numpy as np

from lakecompute.errors import LakeComputeError, LakeComputeWarning, WorkerDiedError
from lakecompute.htypes._registry import decode_sample
from lakecompute.schedulers import ProgressFn, Service
from lakecompute.sharedmem import SharedBatch, remove_leftovers, share_batch
from lakecompute.specs import TensorSpec

__all__ = ["decode_in_processes", "decode_many", "decoding_processes"]

#: Fewer samples than this are decoded here: a request costs a few hundred microseconds.
MIN_SENT = 8
#: The htypes whose samples go to helpers (decoding them is the cost worth moving).
SENT_HTYPES = frozenset({"image"})

_lock = threading.Lock()
_pool: Service | None = None
_helpers = 0


def decode_in_processes(helpers: int) -> None:
    """Decode the image samples read in this process in ``helpers`` helper processes from now on (0:
    here, the default). Started at once, so that the helpers' start overlaps what the caller does
    next (a model's load); a second call with the same count keeps them."""
    global _pool, _helpers
    with _lock:
        if helpers == _helpers:
            return
        old, _pool, _helpers = _pool, None, 0
        if old is not None:
            old.stop()
            remove_leftovers(_token())
        if helpers > 0:
            _pool = Service(_decode_task, helpers, preload=("lakecompute.htypes._decoding",))
            _helpers = helpers
            # A worker process of ours ends through multiprocess's exit, not atexit: stop them there
            # too (`_stop` does nothing once they are stopped), or their queues' semaphores are left
            # to Python 3.12's resource tracker, which warns.
            multiprocess.util.Finalize(None, _stop, exitpriority=100)


def decoding_processes() -> int:
    """How many helper processes decode this process's image samples (0: none, decoded here)."""
    return _helpers


def decode_many(spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]) -> list[Any]:
    """The values of ``blobs`` (each a stored blob and its shape) of tensor ``spec``, in order; a blob
    that does not decode gives its error (``ValueError`` or `LakeComputeError`) in its place, for the
    caller to report with its position. Decoded in the helper processes when there are any and the
    samples are worth sending (`SENT_HTYPES`, at least `MIN_SENT`), else here."""
    pool, helpers = _pool, _helpers  # another thread may stop them meanwhile: this call keeps its own
    if pool is None or spec.htype not in SENT_HTYPES or len(blobs) < MIN_SENT:
        return _decode_here(spec, blobs)
    raw = [(b.tobytes() if isinstance(b, np.ndarray) else bytes(b), shape) for b, shape in blobs]
    size = max(MIN_SENT // 2, math.ceil(len(raw) / max(1, helpers)))
    try:
        futures = [pool.submit((spec, raw[k : k + size], _token())) for k in range(0, len(raw), size)]
        out: list[Any] = []
        for future in futures:
            result = future.result()
            values = result.open() if isinstance(result, SharedBatch) else result
            out.extend(values[str(k)] for k in range(len(values)))
        return out
    except (WorkerDiedError, CancelledError, RuntimeError) as exc:  # the last two: stopped meanwhile
        _give_up(pool, exc)
        return _decode_here(spec, blobs)


def _decode_here(spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]) -> list[Any]:
    out: list[Any] = []
    for blob, shape in blobs:
        try:
            out.append(decode_sample(spec, blob, shape))
        except (LakeComputeError, ValueError) as exc:
            out.append(exc)
    return out


def _decode_task(
    task: tuple[TensorSpec, Sequence[tuple[Any, tuple[int, ...]]], str], progress: ProgressFn
) -> dict[str, Any] | SharedBatch:
    """In a helper: the values of ``(spec, blobs, token)``'s blobs, numbered from "0", their large arrays
    in shared memory."""
    spec, blobs, token = task
    return share_batch({str(k): v for k, v in enumerate(_decode_here(spec, blobs))}, token)


def _token() -> str:
    """The names of this process's shared-memory files start with it (see `remove_leftovers`)."""
    return f"decode-{os.getpid()}"


def _give_up(pool: Service, exc: BaseException) -> None:
    """A helper died (or the pool was shut down): decode in this process from now on, saying so once."""
    global _pool, _helpers
    with _lock:
        if _pool is not pool:
            return  # another thread gave up on it first, or it was replaced
        _pool, _helpers = None, 0
    pool.stop()
    remove_leftovers(_token())
    warnings.warn(
        f"A helper process decoding images failed ({type(exc).__name__}: {exc}); this process decodes "
        "them itself from now on, more slowly.",
        LakeComputeWarning,
        stacklevel=3,
    )


def _forget() -> None:
    """In a forked child: the parent's helpers are not this process's (the thread that hands their
    results out did not come along), so it decodes here until it starts its own."""
    global _pool, _helpers, _lock
    _pool, _helpers, _lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget)


@atexit.register
def _stop() -> None:
    """Stop the helpers (at this process's exit): waits for them and releases their channels."""
    decode_in_processes(0)
