"""Every code block of README.md and of every page in docs/ runs as written (the convention is in
docs/index.md, "Writing the docs").

Each page runs in its own empty directory, in one Python process, block after block in document
order: ```python blocks share one namespace (later blocks use what earlier ones made), and the
``lakecompute ...`` lines of ```bash blocks run the command line in a fresh interpreter at that point.
A block inside a collapsible note (``??? example "Setup ..."``) runs like any other: that is how a page
shows the data its examples need without putting it in the way. ```text blocks (output, trees) are not
code. A block that cannot run here follows a ``<!-- docs-test: skip (reason) -->`` comment.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import needs_marks

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# First words of bash lines that are not run here, and why.
SKIPPED_COMMANDS = {
    "make": "make targets run in CI itself (.ci/run), and make demo is tested through `lakecompute demo`",
    "pip": "the tests already run in an environment where the package is installed",
    "source": "activating the Makefile's environment: the tests already run inside it",
}

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*$")
_SKIP = re.compile(r"^\s*<!-- docs-test: skip \((?P<reason>[^)]+)\) -->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    lang: str
    """The fence's language: python, bash, text, or empty."""
    line: int
    """The line number (1-based) of the block's first line of code."""
    code: str
    """The code, dedented to the fence's indentation."""
    skip: str | None
    """The reason given by a skip marker just before the block, or None."""


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i, skip = 0, None
    while i < len(lines):
        marker, fence = _SKIP.match(lines[i]), _FENCE.match(lines[i])
        if marker:
            skip = marker.group("reason")
        elif fence:
            indent, end = fence.group("indent"), i + 1
            while not re.fullmatch(rf"{indent}```\s*", lines[end]):
                end += 1
            code = "\n".join(line[len(indent) :] for line in lines[i + 1 : end])
            found.append(Block(fence.group("lang"), i + 2, code + "\n", skip))
            i, skip = end, None
        elif lines[i].strip():
            skip = None  # a marker applies to the block right after it only
        i += 1
    return found


def commands(block: str) -> list[str]:
    """The commands of a bash block, without comments and blank lines."""
    lines = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def steps(path: Path) -> list[dict[str, object]]:
    """What running the page means: python code to exec and command lines to run, in order."""
    out: list[dict[str, object]] = []
    for block in blocks(path):
        if block.skip is not None or block.lang not in ("python", "bash"):
            continue
        if block.lang == "python":
            # Blank lines in front, so that a traceback names the line of the Markdown file.
            out.append({"python": "\n" * (block.line - 1) + block.code, "where": f"{path.name}:{block.line}"})
            continue
        for command in commands(block.code):
            argv = shlex.split(command)
            if argv[0] in SKIPPED_COMMANDS:
                continue
            assert argv[0] == "lakecompute", f"{path.name}:{block.line}: no way to check {command!r}"
            out.append({"argv": argv[1:], "where": f"{path.name}:{block.line}"})
    return out


# Runs a page's steps in one process: the python blocks in one namespace, the commands as subprocesses.
_DRIVER = """
import json, subprocess, sys
namespace = {"__name__": "__main__"}
for step in json.load(open(sys.argv[1])):
    if "python" in step:
        exec(compile(step["python"], sys.argv[2], "exec"), namespace)
        continue
    argv = [sys.executable, "-m", "lakecompute", *step["argv"]]
    proc = subprocess.run(argv, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode:
        sys.exit(f"{step['where']}: lakecompute {' '.join(step['argv'])} exited with {proc.returncode}")
"""


def _env() -> dict[str, str]:
    # Progress bars off (they go to stderr, which must stay free of warnings and tracebacks).
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "TQDM_DISABLE": "1"}


def test_docs_every_page_is_checked() -> None:
    """The README and every docs page are here, and every runnable block of them is run or says why not."""
    assert {p.name for p in DOCUMENTS} >= {"README.md", "index.md", "quickstart.md", "transforms.md"}
    for path in DOCUMENTS:
        for block in blocks(path):
            assert block.lang in ("python", "bash", "text"), (
                f"{path.name}:{block.line}: say ```text for output"
            )
            assert block.skip is None or len(block.skip) > 20, f"{path.name}:{block.line}: give the reason"


def test_docs_blocks_parsed() -> None:
    """Fences indented in a collapsible note are blocks too, and a skip marker covers the next block only."""
    page = (
        "# T\n\n"
        '??? example "Setup"\n\n'
        "    ```python\n"
        "    x = 1\n"
        "    ```\n\n"
        "<!-- docs-test: skip (needs a cluster we do not have) -->\n"
        "```python\n"
        "ray.init()\n"
        "```\n\n"
        "```bash\n"
        "lakecompute info ./x   # the summary\n"
        "```\n"
    )
    path = Path(__file__).parent / "__blocks_test__.md"
    try:
        path.write_text(page)
        found = blocks(path)
    finally:
        path.unlink()
    assert found == [
        Block("python", 6, "x = 1\n", None),
        Block("python", 11, "ray.init()\n", "needs a cluster we do not have"),
        Block("bash", 15, "lakecompute info ./x   # the summary\n", None),
    ]
    assert commands(found[2].code) == ["lakecompute info ./x"]


@pytest.mark.parametrize("name", ["README.md", "quickstart.md", "cli.md"])
def test_docs_page_runs_commands(name: str) -> None:
    """The pages a newcomer reads first have python blocks and lakecompute commands to run."""
    todo = steps(ROOT / name if name == "README.md" else ROOT / "docs" / name)
    assert any("python" in step for step in todo)
    assert any("argv" in step for step in todo)


def _page_case(path: Path) -> object:
    """A page as a case of test_docs_blocks_run, marked with the full-lane packages its run imports."""
    code = "".join(str(step["python"]) for step in steps(path) if "python" in step)
    return pytest.param(path, id=path.name, marks=needs_marks(code))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("document", [_page_case(p) for p in DOCUMENTS if steps(p)])
def test_docs_blocks_run(document: Path, tmp_path: Path) -> None:
    """The page's blocks run in order in an empty directory, without a warning or a traceback."""
    todo = steps(document)
    (tmp_path / ".steps.json").write_text(json.dumps(todo))
    proc = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", _DRIVER, ".steps.json", str(document)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    assert proc.returncode == 0, f"{document.name} failed:\n{proc.stdout}\n{proc.stderr}"
    assert "Warning" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def _resolve(target: str) -> object:
    """The object a ``::: target`` line of the API reference documents."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise AssertionError(f"cannot import {target!r}")


def test_docs_reference_lists_each_public_name_once() -> None:
    """docs/reference.md documents each name of ``lakecompute.__all__`` once, and no package whole."""
    import lakecompute as lc

    documented: list[str] = []
    for target in re.findall(r"^::: (\S+)$", (ROOT / "docs" / "reference.md").read_text(), re.MULTILINE):
        obj = _resolve(target)
        if inspect.ismodule(obj):
            assert target == "lakecompute.errors", f"{target} would document a whole package"
            documented += obj.__all__
        else:
            documented.append(getattr(obj, "__name__", target))
    public = sorted(name for name in lc.__all__ if name != "__version__")
    assert sorted(name for name in documented if name in public) == public


def test_docs_docstrings_have_no_sphinx_roles() -> None:
    """Docstrings use Markdown (backticks, mkdocstrings cross-references), never Sphinx roles like :class:."""
    role = re.compile(r":(class|func|meth|attr|mod|exc|data|obj):`")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "lakecompute").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if role.search(line)
    ]
    assert found == []
