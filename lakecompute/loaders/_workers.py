"""Loader worker processes for ``ds.batches(num_workers=n)`` (torch's DataLoader has its own).

Each worker reads the batches of its own samples (every ``n``-th sample of the rank's share, cut
into batches: `IndexPlan.worker_steps`), decodes them, and puts them into its own queue of
``prefetch`` places; the parent takes one batch from each worker in turn, which is the steps' order
(the order torch's DataLoader yields for ``ds.pytorch(num_workers=n)``). A full queue blocks its
worker, so at most ``n * prefetch`` batches (plus one being read per worker) exist at any time,
whatever the dataset's size.

Workers are forked when the dataset's store allows it (local paths, ``mem://``); object stores,
whose clients hang in a forked child once the parent used them, get workers from a fork server that
imports lakecompute but not ``__main__`` (the user's script never runs again there). Either way a
worker opens its own store client from the run's description.
"""

from __future__ import annotations

import pickle
import queue
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import multiprocess

from lakecompute.errors import RemoteError, WorkerDiedError
from lakecompute.loaders._loader import LoaderSpec, reseed_globals, worker_batches

__all__ = ["parallel_batches"]

# How often the parent, waiting for a batch, checks that the worker it waits on is alive (seconds).
_POLL = 0.2
# How long a stopped worker may take to exit before it is killed (seconds).
_STOP_TIMEOUT = 2.0
_PRELOAD = ["lakecompute.loaders._workers", "lakecompute.storage", "zarr.storage", "numpy"]


def _dumps(exc: BaseException | None) -> bytes | None:
    """``exc`` pickled, or None if it cannot make the round trip."""
    if exc is None:
        return None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
    except Exception:
        return None
    return data


def _pack(exc: BaseException) -> tuple[Any, ...]:
    text = "".join(traceback.format_exception(exc))
    return (_dumps(exc), _dumps(exc.__cause__), type(exc).__qualname__, str(exc), text)


def _unpack(packed: tuple[Any, ...], worker: int) -> BaseException:
    data, cause, type_name, message, text = packed
    exc: BaseException = pickle.loads(data) if data is not None else RemoteError(type_name, message, text)
    if cause is not None:
        exc.__cause__ = pickle.loads(cause)
    exc.add_note(f"Raised in loader worker {worker}:\n{text}")
    return exc


def _worker_main(spec: LoaderSpec, worker: int, out: Any) -> None:
    reseed_globals()
    try:
        for batch in worker_batches(spec, worker):
            out.put(("batch", batch))
    except BaseException as exc:
        out.put(("error", _pack(exc)))


def _context(fork_safe: bool) -> Any:
    if fork_safe and sys.platform.startswith("linux"):
        return multiprocess.get_context("fork")
    from multiprocess import forkserver

    # Only takes effect when the fork server starts; no store client is created by importing these.
    forkserver.set_forkserver_preload(_PRELOAD)
    return multiprocess.get_context("forkserver")


def _receive(channel: Any, process: Any, worker: int) -> dict[str, Any]:
    """The next batch of ``worker``; raises its error, or `WorkerDiedError` if it died."""
    while True:
        try:
            kind, payload = channel.get(timeout=_POLL)
            break
        except queue.Empty:
            if process.is_alive():
                continue
        try:  # it may have sent its last message just before exiting
            kind, payload = channel.get(timeout=_POLL)
            break
        except queue.Empty:
            raise WorkerDiedError(
                f"Loader worker {worker} (pid {process.pid}) died with exit code {process.exitcode} "
                "before sending its next batch. It may have been killed (for example when out of "
                "memory); run with num_workers=0 to debug in this process.",
                task=None,
                exitcode=process.exitcode,
            ) from None
    if kind == "error":
        raise _unpack(payload, worker)
    batch: dict[str, Any] = payload
    return batch


def _stop(processes: list[Any], channels: list[Any]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(_STOP_TIMEOUT)
        if process.is_alive():
            process.kill()
            process.join()
    for channel in channels:
        # Unread batches are dropped: do not wait for their feeder threads to flush them.
        channel.cancel_join_thread()
        channel.close()


def parallel_batches(spec: LoaderSpec, prefetch: int) -> Iterator[dict[str, Any]]:
    """The run's batches in step order, read by the plan's ``num_workers`` worker processes."""
    total = len(spec.plan)
    # With fewer steps left than workers, worker i < total has exactly one step (start + i) and
    # the others none: they are not started.
    n = min(spec.plan.num_workers, total)
    if n == 0:
        return
    ctx = _context(spec.source.snapshot.fork_safe)
    channels = [ctx.Queue(maxsize=prefetch) for _ in range(n)]
    processes = [
        ctx.Process(
            target=_worker_main,
            args=(spec, w, channels[w]),
            name=f"lakecompute-loader-{w}",
            daemon=True,
        )
        for w in range(n)
    ]
    try:
        for process in processes:
            process.start()
        for i in range(total):
            yield _receive(channels[i % n], processes[i % n], i % n)
    finally:
        _stop(processes, channels)
