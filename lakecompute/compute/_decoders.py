"""A worker's decoding helpers: its images decoded in helper processes, so that its GIL is the model's.

A worker placed on a GPU runs the model on one thread and reads ahead on others. Its reader threads
hold the GIL for about a quarter of each image's decode (Pillow's header parsing and the copies out of
it), and the model's kernel launches queue behind them: on an H200 one such worker ran 2,740
224x224 JPEGs a second through a ResNet-50 in the steady state, 3,440 with helpers, where a loop fed
from memory ran 7,600 (docs/performance.md). With helpers (`decode_in_processes`), the image samples
its readers read are decoded in helper processes instead (`decode_with_helpers`, the host decoder its
reads are given: `lakecompute.htypes.decoding_on`); the reading process only verifies the stored bytes
(as always, before anything is decoded) and sends them; the pixels come back through shared memory
(`lakecompute.sharedmem`: the helper writes them into a ``/dev/shm`` file, the reader maps it), so that
taking them costs the reader no copy under its GIL.

The helpers are a `lakecompute.schedulers.Service`: the processed scheduler's pool of processes, behind
futures, so they keep its guarantees (started from a fork server, their stderr forwarded, ended with the
process that started them). How many, and how requests are cut, is the worker's budget's
(`lakecompute.compute` ``_budget.py``). A helper that dies fails the requests outstanding with a
`WorkerDiedError` that says how: the process warns once, with it, and decodes here from then on, so a
read never fails for want of a helper (a sample that kills its decoder then kills the worker, as it did
before). They are this process's (`PerProcess`): a forked child decodes itself until it starts its own.
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

from lakecompute.errors import LakeComputeWarning, WorkerDiedError
from lakecompute.htypes import decode_blobs, decode_on_host_with
from lakecompute.perprocess import PerProcess
from lakecompute.schedulers import ProgressFn, Service
from lakecompute.sharedmem import SharedBatch, remove_leftovers, share_batch
from lakecompute.specs import TensorSpec

__all__ = ["decode_in_processes", "decode_with_helpers", "decoding_processes"]

#: The htypes whose samples go to helpers (decoding them is the cost worth moving).
SENT_HTYPES = frozenset({"image"})


class _Helpers:
    """This process's helpers, and how its requests are cut (`decode_in_processes`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.service: Service | None = None
        self.count = 0
        self.min_sent = 8
        self.per_request = 16
        self.last_spec: tuple[TensorSpec, bytes] | None = None


_HELPERS = PerProcess(_Helpers)
_helper_specs: dict[bytes, TensorSpec] = {}  # in a helper: the specs of its requests, by their pickle


def decode_in_processes(helpers: int, min_sent: int = 8, per_request: int = 16) -> None:
    """Decode the image samples this process reads (a worker's readers, or the caller's own reads:
    `lakecompute.htypes.decode_on_host_with`) in ``helpers`` helper processes from now on (0: here, the
    default). Started at once, so that the helpers' start overlaps what the caller does next (a model's
    load); a second call with the same count keeps them.

    Args:
        helpers: how many helper processes.
        min_sent: fewer samples than this are decoded here (a request costs a few hundred microseconds).
        per_request: at least this many samples go in one request (each costs the reading process, under
            its GIL, a request's pickling and a result's mapping).
    """
    state = _HELPERS.get()
    with state.lock:
        state.min_sent, state.per_request = min_sent, per_request
        decode_on_host_with(decode_with_helpers if helpers > 0 else None)
        if helpers == state.count:
            return
        old, state.service, state.count = state.service, None, 0
        if old is not None:
            old.stop()
            remove_leftovers(_token())
        if helpers > 0:
            state.service = Service(_decode_task, helpers, preload=("lakecompute.compute._decoders",))
            state.count = helpers
            # A worker process of ours ends through multiprocess's exit, not atexit: stop them there
            # too (`_stop` does nothing once they are stopped), or their queues' semaphores are left
            # to Python 3.12's resource tracker, which warns.
            multiprocess.util.Finalize(None, _stop, exitpriority=100)


def decoding_processes() -> int:
    """How many helper processes decode this process's image samples (0: none, decoded here)."""
    state = _HELPERS.peek()
    return 0 if state is None else state.count


def decode_with_helpers(spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]) -> list[Any]:
    """A host decoder (`lakecompute.htypes.HostDecode`): ``blobs`` decoded in this process's helpers when
    it has any and they are worth sending (`SENT_HTYPES`, at least ``min_sent``), else here."""
    state = _HELPERS.get()
    service, helpers = state.service, state.count  # another thread may stop them: this call keeps its own
    if service is None or spec.htype not in SENT_HTYPES or len(blobs) < state.min_sent:
        return decode_blobs(spec, blobs)
    size = max(state.per_request, math.ceil(len(blobs) / max(1, helpers)))
    try:
        parts = [blobs[k : k + size] for k in range(0, len(blobs), size)]
        futures = [service.submit(_request(state, spec, part)) for part in parts]
        out: list[Any] = []
        for future in futures:
            result = future.result()
            values = result.open() if isinstance(result, SharedBatch) else result
            out.extend(values[str(k)] for k in range(len(values)))
        return out
    except (WorkerDiedError, CancelledError, RuntimeError) as exc:  # the last two: stopped meanwhile
        _give_up(state, service, exc)
        return decode_blobs(spec, blobs)


def _request(
    state: _Helpers, spec: TensorSpec, blobs: Sequence[tuple[Any, tuple[int, ...]]]
) -> tuple[Any, ...]:
    """A helper's task for ``blobs``, in a few flat objects: the spec pickled once per spec, the blobs
    joined into one ``bytes``, their lengths and shapes as JSON. (Sent as a list of pairs, each blob a
    ``bytes`` and each shape a tuple, a request of 5 images cost the reading process ~0.5 ms to pickle,
    most of it the spec's ~40 objects, on every request.)"""
    parts = [_flat(b) for b, _ in blobs]
    lengths = [memoryview(p).nbytes for p in parts]
    meta = json.dumps([lengths, [[int(d) for d in shape] for _, shape in blobs]])
    return (_spec_bytes(state, spec), b"".join(parts), meta, _token())


def _flat(blob: Any) -> Any:
    """A stored blob as bytes-like one ``bytes.join`` takes (a strided array view made contiguous)."""
    return np.ascontiguousarray(blob).data.cast("B") if isinstance(blob, np.ndarray) else blob


def _spec_bytes(state: _Helpers, spec: TensorSpec) -> bytes:
    """``spec`` pickled (the last one kept: a reader asks for the same tensor's, block after block)."""
    last = state.last_spec
    if last is not None and last[0] is spec:
        return last[1]
    data = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    state.last_spec = (spec, data)
    return data


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
    return share_batch({str(k): v for k, v in enumerate(decode_blobs(spec, blobs))}, token)


def _token() -> str:
    """The names of this process's shared-memory files start with it (see `remove_leftovers`)."""
    return f"decode-{os.getpid()}"


def _give_up(state: _Helpers, service: Service, exc: BaseException) -> None:
    """A helper died (or the helpers were stopped): decode in this process from now on, saying so once."""
    with state.lock:
        if state.service is not service:
            return  # another thread gave up on it first, or it was replaced
        state.service, state.count = None, 0
    service.stop()
    remove_leftovers(_token())
    warnings.warn(
        f"A helper process decoding images failed ({type(exc).__name__}: {exc}); this process decodes "
        "them itself from now on, more slowly.",
        LakeComputeWarning,
        stacklevel=3,
    )


@atexit.register
def _stop() -> None:
    """Stop the helpers (at this process's exit): waits for them and releases their channels."""
    if _HELPERS.peek() is not None:
        decode_in_processes(0)
