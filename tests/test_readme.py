"""Every command in README.md and docs/quickstart.md works as written.

The ```python and ```bash blocks of each file run in document order in one empty directory: the python
blocks as one script (later blocks use what earlier ones made), then each bash line. ``lakecompute ...``
lines run the command line in a fresh interpreter; a few lines are skipped, each with its reason below.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "quickstart.md"]

# Bash lines that are not run here, and why.
SKIPPED = {
    "make": "make targets run in CI itself (.ci/run), and make demo is tested through `lakecompute demo`",
    "pip": "the tests already run in an environment where the package is installed",
    "source": "activating the Makefile's environment: the tests already run inside it",
}

_BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(path.read_text())]


def _commands(block: str) -> list[str]:
    lines = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_document_has_runnable_blocks(document: Path) -> None:
    """The document has python blocks and a lakecompute command to run (so this test checks something)."""
    kinds = [kind for kind, _ in _blocks(document)]
    assert "python" in kinds
    commands = [c for kind, block in _blocks(document) if kind == "bash" for c in _commands(block)]
    assert any(c.startswith("lakecompute ") for c in commands), commands


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_document_commands_work(document: Path, tmp_path: Path) -> None:
    """Every python block and every lakecompute command of the document runs and succeeds."""
    script: list[str] = []
    ran = 0

    def run_python() -> None:
        if not script:
            return
        source = tmp_path / "blocks.py"
        source.write_text("\n\n".join(script))
        proc = subprocess.run(
            [sys.executable, str(source)],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, f"python blocks of {document.name} failed:\n{proc.stdout}\n{proc.stderr}"

    for kind, block in _blocks(document):
        if kind == "python":
            script.append(block)
            continue
        run_python()  # the commands below use what the python blocks before them made
        script.clear()
        for command in _commands(block):
            argv = shlex.split(command)
            if argv[0] in SKIPPED:
                continue
            assert argv[0] == "lakecompute", f"{document.name}: no way to check the command {command!r}"
            proc = subprocess.run(
                [sys.executable, "-m", "lakecompute", *argv[1:]],
                cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert proc.returncode == 0, f"{document.name}: {command!r} failed:\n{proc.stdout}\n{proc.stderr}"
            ran += 1
    run_python()
    assert ran > 0
