"""Writers and vacuums in their own processes, for the lease tests.

Usage:
    ``lease_script.py write URL START N``: open URL, append ``x = START..START+N-1`` inside ``with ds:``
    (written to storage, not committed), print ``READY``, wait until the file ``LC_TEST_GO`` exists, then
    leave the block (commit) and print ``DONE <version>``, or ``ERROR <type> <message>`` if it raised.
    ``lease_script.py committed URL...``: append one sample to each and commit, print ``READY``, keep the
    handles (their leases renewed while idle) until ``LC_TEST_GO`` exists, print ``DONE``.
    ``lease_script.py vacuum URL``: one ``vacuum(grace_seconds=0)``; prints the counts as JSON.
    ``lease_script.py vacuum-loop STOP URL...``: ``vacuum(grace_seconds=0)`` on every URL in turn until the
    file STOP exists, keeping the count so far in the file ``STOP.count``; prints ``VACUUMS <count>``.

``LC_TEST_S3`` (JSON) holds storage options for ``s3://`` URLs; ``LC_TEST_LEASE=lease,margin,renew``
overrides the lease constants (seconds) in this process; with ``LC_TEST_NO_PIDS=1`` no other process can
be seen (``os.kill`` says none exists), as on another machine; ``LC_TEST_LATER=SECONDS`` sets this
process's clock (``time.time``) that far ahead, as on a machine where that much more time has passed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import lakecompute as lc
import lakecompute.versioned._leases as leases
from tests.helpers import wait_for_file


def _options() -> dict[str, Any] | None:
    raw = os.environ.get("LC_TEST_S3")
    return json.loads(raw) if raw else None


def _load(url: str) -> lc.Dataset:
    return lc.load(url, storage_options=_options()) if url.startswith("s3://") else lc.load(url)


def write(url: str, start: int, n: int) -> None:
    """Append inside a block, report READY, wait for the go file, commit."""
    ds = _load(url)
    go = os.environ["LC_TEST_GO"]
    try:
        with ds:
            for i in range(start, start + n, 100):
                ds.x.extend(np.arange(i, min(i + 100, start + n), dtype=np.int64))
            assert len(ds.x.numpy()) >= n  # reading flushes the block's samples into its segment
            print("READY", flush=True)
            wait_for_file(go, timeout=600)  # as long as the test takes to say go
    except lc.LakeComputeError as err:
        print(f"ERROR {type(err).__name__} {err}", flush=True)
        return
    print(f"DONE {ds.version}", flush=True)


def committed(urls: list[str]) -> None:
    """Append to and commit each dataset (its lease released, renewed while idle), print ``READY`` and
    keep the handles until the go file exists; print ``DONE``."""
    handles = [_load(url) for url in urls]
    for ds in handles:
        with ds:
            ds.x.append(np.int64(-1))
    print("READY", flush=True)
    wait_for_file(os.environ["LC_TEST_GO"], timeout=600)
    print("DONE", len(handles), flush=True)


def vacuum_loop(stop: str, urls: list[str]) -> None:
    """Vacuum every dataset with no grace until ``stop`` exists."""
    count = 0
    while not os.path.exists(stop):
        for url in urls:
            _load(url).vacuum(grace_seconds=0, progressbar=False)  # stderr is a pipe nobody reads
            count += 1
        Path(f"{stop}.count.tmp").write_text(str(count))
        os.replace(f"{stop}.count.tmp", f"{stop}.count")  # whole, for the test that waits on it
        time.sleep(0.01)  # a breath between rounds, for the evals beside it
    print(f"VACUUMS {count}", flush=True)


def _no_such_process(pid: int, sig: int) -> None:
    raise ProcessLookupError(pid)


def main(argv: list[str]) -> None:
    """Dispatch on the mode."""
    if os.environ.get("LC_TEST_NO_PIDS"):
        os.kill = _no_such_process
    later = float(os.environ.get("LC_TEST_LATER", "0"))
    if later:
        now = time.time
        time.time = lambda: now() + later
    override = os.environ.get("LC_TEST_LEASE")
    if override:
        lease, margin, renew = (float(v) for v in override.split(","))
        leases.LEASE_SECONDS, leases.LEASE_MARGIN_SECONDS, leases.RENEW_SECONDS = lease, margin, renew
    if argv[0] == "write":
        write(argv[1], int(argv[2]), int(argv[3]))
    elif argv[0] == "committed":
        committed(argv[1:])
    elif argv[0] == "vacuum":
        print(json.dumps(_load(argv[1]).vacuum(grace_seconds=0, progressbar=False)), flush=True)
    elif argv[0] == "vacuum-loop":
        vacuum_loop(argv[1], argv[2:])
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
