"""The real mypy, run on small user programs: ``@lc.compute`` keeps the bound parameters' types, and
``eval``/``batches`` their options' names and types, so a misspelt keyword is a type error."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import lakecompute

pytest.importorskip("mypy")

# The worktree's lakecompute, whatever else is installed: mypy reads MYPYPATH before site-packages.
ROOT = Path(lakecompute.__file__).resolve().parents[1]
# A cache kept between runs (beside `make lint`'s, which is .mypy_cache/3.11): what mypy learnt of numpy,
# torch and the standard library is checked again only when they change (a cold cache costs about 50 s).
# mypy checks every cached module against its source, so the cache never hides a change.
CACHE = ROOT / ".mypy_cache" / "typing-test"

PRELUDE = """\
from typing import Any

import numpy as np

import lakecompute as lc


@lc.compute
def resize(sample_in: Any, sample_out: Any, new_size: tuple[int, int], mode: str = "bilinear") -> None:
    sample_out.images.append(sample_in)


@lc.compute
class Embed:
    def __init__(self, model_path: str, batch: int = 8) -> None:
        self.model_path = model_path

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        sample_out.x.append(sample_in)


out = lc.empty("mem://typing", overwrite=True)
"""

PROGRAMS = {
    "correct": """
        resize(new_size=(64, 64)).eval([1], out, num_workers=2, scheduler="threaded", seed=3)
        resize((64, 64), mode="nearest").eval([1], out, batch_size=None, progressbar=False)
        lc.compose([resize(new_size=(8, 8)), resize(new_size=(4, 4))]).eval([1], out, checkpoint_interval=5)
        Embed("model.pt", batch=4)
        out.batches(4, shuffle=True, seed=1, num_workers=0)


        @lc.compute
        def jitter(sample_in: Any, sample_out: Any, rng: np.random.Generator | None = None) -> None:
            sample_out.x.append(sample_in)


        jitter().eval([1], out, seed=1)
        lc.ingest_classification("src", "dest", "png", False, num_workers=2, overwrite=True)
    """,
    "misspelt_keyword": """
        resize(new_sizee=(64, 64))
    """,
    "wrong_type": """
        resize(new_size="64x64")
    """,
    "class_keyword": """
        Embed(model_pth="model.pt")
    """,
    "eval_option": """
        resize(new_size=(64, 64)).eval([1], out, num_worker=2)
    """,
    "eval_option_type": """
        resize(new_size=(64, 64)).eval([1], out, checkpoint_interval="5")
    """,
    "loader_option": """
        out.batches(4, shufle=True)
    """,
    "ingest_option": """
        lc.ingest_classification("src", "dest", num_worker=2)
    """,
}


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The errors mypy (strict) reports in each program, by program name; one mypy run for all."""
    folder = tmp_path_factory.mktemp("typing")
    for name, body in PROGRAMS.items():
        (folder / f"{name}.py").write_text(PRELUDE + textwrap.dedent(body))
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(CACHE), *sorted(f"{name}.py" for name in PROGRAMS)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr + run.stdout  # 1: type errors found; 2: mypy itself failed
    errors: dict[str, list[str]] = {name: [] for name in PROGRAMS}
    for line in run.stdout.splitlines():
        found = re.match(r"^(\w+)\.py:\d+: error: (.*)$", line)
        if found:
            errors[found.group(1)].append(found.group(2))
    return errors


def test_typing_correct_calls_pass(mypy_errors: dict[str, list[str]]) -> None:
    """Correct bindings, eval options, loader options and ingest options type-check."""
    assert mypy_errors["correct"] == []


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        ("misspelt_keyword", 'Unexpected keyword argument "new_sizee" for "__call__" of "_ComputeFactory"'),
        ("wrong_type", 'Argument "new_size" to "__call__" of "_ComputeFactory" has incompatible type "str"'),
        ("class_keyword", 'Unexpected keyword argument "model_pth" for "Embed"'),
        ("eval_option", 'Unexpected keyword argument "num_worker" for "eval" of "Transform"'),
        ("eval_option_type", 'Argument "checkpoint_interval" to "eval" of "Transform" has incompatible type'),
        ("loader_option", 'Unexpected keyword argument "shufle" for "batches"'),
        ("ingest_option", 'Unexpected keyword argument "num_worker" for "ingest_classification"'),
    ],
)
def test_typing_mistakes_fail(mypy_errors: dict[str, list[str]], program: str, expected: str) -> None:
    """Each mistake is the one type error mypy reports in its program, with the expected message."""
    assert len(mypy_errors[program]) == 1, mypy_errors[program]
    assert mypy_errors[program][0].startswith(expected), mypy_errors[program]
