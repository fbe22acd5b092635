"""The Training page (docs/training.md) runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "training.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_training_page_python_blocks_run_in_order(tmp_path: Path) -> None:
    """The page's python blocks, run as one script in an empty directory, exit 0."""
    blocks = _BLOCK.findall(PAGE.read_text())
    assert len(blocks) >= 8
    script = tmp_path / "training.py"
    script.write_text("\n".join(blocks))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "4"
