"""Helpers for tests of writer leases: let time pass for the leases stored in a dataset."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from lakecompute.storage import open_backend
from lakecompute.versioned._keys import LEASES


def expire_leases(url: str, storage_options: dict[str, Any] | None = None, pid: int | None = None) -> int:
    """Rewrite every lease file of the dataset at ``url`` (of process ``pid`` only, if given) as expired
    (what waiting out `LEASE_SECONDS` after its writer stopped renewing would do); returns how many."""
    backend = open_backend(url, storage_options)
    count = 0
    for name in backend.list(LEASES):
        if not name.endswith(".json") or name.startswith("."):
            continue
        raw = backend.read(f"{LEASES}/{name}")
        if raw is None:
            continue
        record = json.loads(raw)
        if pid is not None and record["pid"] != pid:
            continue
        record["expires"] = 0.0
        backend.write(f"{LEASES}/{name}", json.dumps(record).encode())
        count += 1
    return count


def lease_files(url: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The lease records stored in the dataset at ``url``."""
    backend = open_backend(url, storage_options)
    out = []
    for name in backend.list(LEASES):
        raw = (
            backend.read(f"{LEASES}/{name}") if name.endswith(".json") and not name.startswith(".") else None
        )
        if raw is not None:
            out.append(json.loads(raw))
    return out


LEASE_SCRIPT = Path(__file__).resolve().parent / "reliability" / "lease_script.py"
REPO_ROOT = Path(__file__).resolve().parents[1]


def _unshare_works() -> bool:
    """Whether this process may start children in a new pid namespace (root, with util-linux unshare)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30, check=False
    )
    return probe.returncode == 0


UNSHARE = _unshare_works()


def script_env(s3: dict[str, Any] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a lease_script.py process: this repository importable, S3 options given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_TEST_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    if s3 is not None:
        env["LC_TEST_S3"] = json.dumps(s3)
    env.update(extra)
    return env


def elsewhere(
    args: list[str], s3: dict[str, Any] | None = None, timeout: float = 120, later: float = 0.0
) -> str:
    """Run lease_script.py as if on another machine: in a new pid namespace where no process of this one
    is visible (``unshare``), or, where that is not allowed, with process lookups made impossible; with
    ``later``, on a machine whose clock is that many seconds ahead (what waiting that long would do,
    without the wait). Returns its stdout; fails the test if it fails."""
    cmd = [sys.executable, str(LEASE_SCRIPT), *args]
    env = script_env(s3, LC_TEST_LATER=str(later)) if later else script_env(s3)
    if UNSHARE:
        cmd = ["unshare", "--pid", "--fork", "--mount-proc", *cmd]
    else:
        env["LC_TEST_NO_PIDS"] = "1"
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def start_writer(
    url: str, start: int, n: int, go: Path, s3: dict[str, Any] | None = None, **extra: str
) -> subprocess.Popen[str]:
    """Start a lease_script.py writer and wait until its uncommitted samples are stored (``READY``)."""
    return start_script(["write", url, str(start), str(n)], go, s3, **extra)


def start_script(
    args: list[str], go: Path, s3: dict[str, Any] | None = None, **extra: str
) -> subprocess.Popen[str]:
    """Start lease_script.py with ``args`` (a mode that waits for the file ``go``) and wait for its
    ``READY``."""
    proc = subprocess.Popen(
        [sys.executable, str(LEASE_SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=script_env(s3, LC_TEST_GO=str(go), **extra),
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "READY":
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"lease_script.py {args[0]} did not get ready: {line!r}\n{err}")
    return proc
