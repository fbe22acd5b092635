"""The two lanes of the suite (tests/conftest.py): a test marked ``needs`` is skipped with its reason in the
light lane and fails in the full lane where its package is missing, and every test file that imports a
package of the full lane says so."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import full_lane_imports

ROOT = Path(__file__).resolve().parent.parent

_CASE = textwrap.dedent(
    """
    import pytest


    @pytest.mark.needs("lakecompute_no_such_package")
    def test_needs_a_missing_package():
        raise AssertionError("a test whose package is missing must not run")


    @pytest.mark.needs("json")
    def test_needs_a_package_that_imports():
        assert True
    """
)


def _run_case(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_case.py").write_text(_CASE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", "-rs",
         "test_case.py", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_light_lane_skips_a_missing_package_naming_it(tmp_path: Path) -> None:
    """Without --full-lane, a test whose package does not import is skipped, and the summary says which
    package it needs and which command runs it; a test whose package imports runs."""
    run = _run_case(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 1 skipped" in run.stdout
    assert (
        "needs lakecompute_no_such_package, which only the full lane installs (make test-full)" in run.stdout
    )


def test_full_lane_fails_a_missing_package(tmp_path: Path) -> None:
    """With --full-lane the same test errs in its setup, naming the package and the import error."""
    run = _run_case(tmp_path, "--full-lane")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 passed, 1 error" in run.stdout
    assert "the full lane lacks lakecompute_no_such_package: ModuleNotFoundError" in run.stdout


def test_full_lane_imports_are_found_in_code() -> None:
    """The scan behind the marks of parametrized pages and scripts finds `import x` and `from x.y import z`
    of the full lane's packages only, in any indentation."""
    code = "import numpy\nfrom torchvision.transforms import v2\n    import pytorch_lightning as pl\n"
    assert full_lane_imports(code) == ("pytorch_lightning", "torchvision")
    assert full_lane_imports("import torchvisionary\n") == ()


def test_every_test_file_importing_a_full_lane_package_is_marked() -> None:
    """A test file that imports torchvision, Lightning, Accelerate, torchdata or ultralytics marks the tests
    that need it with `needs`, so that the light lane skips them with a reason instead of failing."""
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        source = path.read_text()
        for module in full_lane_imports(source):
            if not re.search(rf"needs\([^)]*['\"]{module}['\"]", source):
                unmarked.append(
                    f"{path.relative_to(ROOT)} imports {module}: mark it @pytest.mark.needs({module!r})"
                )
    assert unmarked == []
