"""Every script in examples/ runs on its own generated data, and the examples README describes each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import needs_marks

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

# What each example must print: evidence that it did its job, not just that it exited 0.
EXPECTED = {
    "01_tutorial.py": [
        "flipped: 100 samples",
        "failed on data_in[3]",
        "after removing it: 30 samples",
        "view: failed on data_in[20] (dataset row 70)",
        "view: failed on data_in[69] (dataset row 120)",
        "after removing rows [70, 120]: 98 samples",
    ],
    "02_ingest_and_augment.py": ["(180, 48, 48, 3)", "wrote augmented.png"],
    "03_embeddings.py": ["outputs={'images': 0, 'labels': 0, 'embedding': 200}", "embedding (200, 512)"],
    "04_tokenize.py": ["tokenized 500 documents; the rerun did nothing (still version 6)", "seq_len=64"],
    "05_recover_and_resume.py": [
        "100 inputs, 63 written, 37 skipped",
        "resumed_from=100",
        "70 outputs kept",
        "fixed run: resumed_from=70; warned: Resuming the unfinished eval (to_number)",
    ],
    "06_train.py": ["16 steps of 32 per epoch", "weights identical to the uninterrupted run: True"],
    "07_detection.py": [
        "24 augmented samples from 12 images (seed 0)",
        "torchvision: 24 augmented samples",
        "batch 5: images (4, 3, 64, 80)",
    ],
    "08_accelerate.py": [
        "process 0 of 1: 256 embeddings at version 6, column (256, 512)",
        "1 commit made it visible: eval Embed (in place)",
    ],
    "09_tables.py": [
        "ingested 24 rows, classes ['bird', 'cat', 'dog']; skipped row 24: Column 'file': the image path",
        "duckdb counts by label: [(0, 8), (1, 8), (2, 8)]",
        "HF features: {'file': 'Image', 'label': 'ClassLabel', 'score': 'Value'}",
        "round trip: 24 rows, same bytes: True, same labels: True",
        "brightness of 24 images; the rerun: True",
    ],
    "10_select.py": [
        "objects per class: {'diamond': 29, 'box': 27} (56 annotations in the JSON)",
        "18 of 24 images have a diamond and another object",
        "pycocotools reads 9 annotations of 8 images",
        "where filter_labels(boxes[2] * boxes[3] > 800) | sort(len(boxes), descending=True)",
    ],
}


def test_examples_are_all_listed() -> None:
    """Every example has expected output here and a paragraph in examples/README.md."""
    names = [p.name for p in EXAMPLES]
    assert names == sorted(EXPECTED)
    readme = (ROOT / "examples" / "README.md").read_text()
    for name in names:
        assert f"**[{name}]({name})**" in readme, name


@pytest.mark.parametrize(
    "script", [pytest.param(p, id=p.name, marks=needs_marks(p.read_text())) for p in EXAMPLES]
)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    """The example exits 0 in an empty directory and prints what it is meant to show."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        # A guard against a hung example, not a speed check: examples 07 and 08 train models, which
        # took over 120 s on the 2 shared cores at load 20.
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for text in EXPECTED[script.name]:
        assert text in proc.stdout, (text, proc.stdout)
