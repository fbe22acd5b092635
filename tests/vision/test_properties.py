"""Property-based tests of the COCO and YOLO readers (strategies in tests/vision/properties.py): any
near-valid annotations file, data.yaml or label file ends in a dataset or a LakeComputeError.

Each property runs in a child process whose address space is limited (1 GiB beyond what it has mapped when
it starts): a raw exception, a crash (a signal) or an allocation far beyond the input fails the test, and
cannot take the test run down with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("pycocotools")
pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("name", "examples"), [("coco-gate", 400), ("coco-ingest", 100), ("yolo", 100), ("yolo-pose", 100)]
)
def test_reader_property(name: str, examples: int) -> None:
    """Every drawn input of the property ``name`` ends in a dataset or a LakeComputeError, in a child
    limited in address space (a failing example is printed with hypothesis' reproduce blob)."""
    code = f"from tests.vision.properties import run; run({name!r}, {examples})"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-6000:]}\n{run.stderr[-6000:]}"
    assert f"PASSED {name}" in run.stdout
