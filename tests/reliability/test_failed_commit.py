"""A `with` block whose commit fails on a full disk keeps none of its writes (the file-size limit makes
every write past it fail with EFBIG, as a full disk fails with ENOSPC)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import lakecompute as lc

_SCRIPT = textwrap.dedent(
    """
    import json, resource, signal, sys
    import lakecompute as lc

    path = sys.argv[1]
    ds = lc.load(path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    error = None
    try:
        with ds:
            ds.x.append(50)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))  # the block's commit cannot write
    except OSError as exc:
        error = f"{type(exc).__name__} {exc.errno}"
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    pending = ds.has_pending_changes
    ds.x.append(99)
    print(json.dumps({"error": error, "pending": pending, "x": ds.x.numpy().tolist()}))
    """
)


def test_with_block_failed_commit_rolls_back(tmp_path: Path) -> None:
    """After a block's commit fails with EFBIG, its writes are gone and the next append commits alone."""
    path = str(tmp_path / "ds")
    ds = lc.empty(path)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend([0, 1, 2])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, path], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["error"] == f"OSError {errno.EFBIG}"
    assert got == {"error": got["error"], "pending": False, "x": [0, 1, 2, 99]}
    assert lc.load(path, read_only=True).x.numpy().tolist() == [0, 1, 2, 99]
