"""A tutorial-style script without ``if __name__ == "__main__":`` works on S3 exactly as on a local path:
its workers (started from a fork server on S3, forked locally) never run the script again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# The Deep Lake tutorial's shape: everything at the top level, a compute function that calls a helper
# and reads a global of the script, an eval with workers, then a read-back.
_SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    import numpy as np

    import lakecompute as lc

    print("SCRIPT STARTS", flush=True)
    root, options = sys.argv[1], json.loads(sys.argv[2])

    src = lc.empty(f"{root}/src", overwrite=True, storage_options=options)
    with src:
        src.create_tensor("x", dtype="int64")
        src.x.extend(np.arange(100))
    out = lc.like(f"{root}/out", src, overwrite=True, storage_options=options)

    OFFSET = 7


    def shifted(value):
        return value + OFFSET


    @lc.compute
    def add_offset(sample_in, sample_out):
        sample_out.x.append(shifted(sample_in.x.numpy()))


    result = add_offset().eval(src, out, num_workers=2, progressbar=False)
    values = lc.load(f"{root}/out", storage_options=options).x.numpy().reshape(-1).tolist()
    print("RESULT", result.inputs, json.dumps(values), flush=True)
    """
)


def _run_script(
    tmp_path: Path, root: str, options: dict[str, Any] | None
) -> subprocess.CompletedProcess[str]:
    """Run the script as a user would (``python tutorial.py``) in its own session."""
    script = tmp_path / "tutorial.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, str(script), root, json.dumps(options)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        start_new_session=True,
    )


@pytest.mark.timeout(300)
def test_script_without_main_guard_same_on_s3_as_local(
    tmp_path: Path, bucket: str, storage_options: dict[str, Any]
) -> None:
    """The script runs once (its workers never run it again) and writes the same output on S3 and on disk."""
    local = _run_script(tmp_path, str(tmp_path / "data"), None)
    remote = _run_script(tmp_path, f"s3://{bucket}", storage_options)
    expected = f"RESULT 100 {json.dumps(list(range(7, 107)))}"
    for run in (local, remote):
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines() == ["SCRIPT STARTS", expected]
        assert "Traceback" not in run.stderr
