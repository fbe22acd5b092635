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
import json
import math
import os
import pickle
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import CancelledError
from typing import Any

import multiprocess.util
import numpy as np

from lakecompute.errors import LakeComputeError, LakeComputeWarning, WorkerDiedError
from lakecompute.htypes._device import decode_on_device
from lakecompute.htypes._registry import decode_sample
from lakecompute.schedulers import ProgressFn, Service
from lakecompute.sharedmem import SharedBatch, remove_leftovers, share_batch
from lakecompute.specs import TensorSpec

__all__ = ["decode_in_processes", "decode_many", "decoding_processes"]

#: Fewer samples than this are decoded here: a request costs a few hundred microseconds.
MIN_SENT = 8
#: At least this many samples go in one request: each costs the reading process (under its GIL) a
#: request's pickling and a result's mapping, and a worker's readers have several blocks in flight to
#: keep the helpers busy.
PER_REQUEST = 16
#: The htypes whose samples go to helpers (decoding them is the cost worth moving).
SENT_HTYPES = frozenset({"image"})

_lock = threading.Lock()
_pool: Service | None = None
_helpers = 0
_last_spec: tuple[TensorSpec, bytes] | None = None
_helper_specs: dict[bytes, TensorSpec] = {}  # in a helper: the specs of its requests, by their pickle


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
    caller to report with its position. Decoded on the GPU where this thread reads for one
    (`lakecompute.htypes.decoding_on`: JPEG images, as torch tensors there), else in the helper processes
    when there are any and the samples are worth sending (`SENT_HTYPES`, at least `MIN_SENT`), else here."""
    on_device = decode_on_device(spec, blobs, _decode_on_host)
    if on_device is not None:
        return on_device
    return _decode_on_host(spec, blobs)


def _decode_on_host(spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]) -> list[Any]:
    """`decode_many` on the host: in the helper processes, or here."""
    pool, helpers = _pool, _helpers  # another thread may stop them meanwhile: this call keeps its own
    if pool is None or spec.htype not in SENT_HTYPES or len(blobs) < MIN_SENT:
        return _decode_here(spec, blobs)
    size = max(PER_REQUEST, math.ceil(len(blobs) / max(1, helpers)))
    try:
        futures = [pool.submit(_request(spec, blobs[k : k + size])) for k in range(0, len(blobs), size)]
        out: list[Any] = []
        for future in futures:
            result = future.result()
            values = result.open() if isinstance(result, SharedBatch) else result
            out.extend(values[str(k)] for k in range(len(values)))
        return out
    except (WorkerDiedError, CancelledError, RuntimeError) as exc:  # the last two: stopped meanwhile
        _give_up(pool, exc)
        return _decode_here(spec, blobs)


def _request(spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]) -> tuple[Any, ...]:
    """A helper's task for ``blobs``, in a few flat objects: the spec pickled once per spec, the blobs
    joined into one ``bytes``, their lengths and shapes as JSON. (Sent as a list of pairs, each blob a
    ``bytes`` and each shape a tuple, a request of 5 images cost the reading process ~0.5 ms to pickle,
    most of it the spec's ~40 objects, on every request.)"""
    parts = [_flat(b) for b, _ in blobs]
    lengths = [memoryview(p).nbytes for p in parts]
    meta = json.dumps([lengths, [[int(d) for d in shape] for _, shape in blobs]])
    return (_spec_bytes(spec), b"".join(parts), meta, _token())


def _flat(blob: Any) -> Any:
    """A stored blob as bytes-like one ``bytes.join`` takes (a strided array view made contiguous)."""
    return np.ascontiguousarray(blob).data.cast("B") if isinstance(blob, np.ndarray) else blob


def _spec_bytes(spec: TensorSpec) -> bytes:
    """``spec`` pickled (the last one kept: a reader asks for the same tensor's, block after block)."""
    global _last_spec
    last = _last_spec
    if last is not None and last[0] is spec:
        return last[1]
    data = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    _last_spec = (spec, data)
    return data


def _decode_here(spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]) -> list[Any]:
    out: list[Any] = []
    for blob, shape in blobs:
        try:
            out.append(decode_sample(spec, blob, shape))
        except (LakeComputeError, ValueError) as exc:
            out.append(exc)
    return out


def _decode_task(task: tuple[bytes, bytes, str, str], progress: ProgressFn) -> dict[str, Any] | SharedBatch:
    """In a helper: the values of a `_request`'s blobs, numbered from "0", their large arrays in shared
    memory."""
    spec_data, joined, meta, token = task
    spec = _helper_specs.get(spec_data)
    if spec is None:
        spec = _helper_specs[spec_data] = pickle.loads(spec_data)
    lengths, shapes = json.loads(meta)
    view, blobs, at = memoryview(joined), [], 0
    for length, shape in zip(lengths, shapes, strict=True):
        blobs.append((view[at : at + length], tuple(shape)))
        at += length
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
