"""Every example in the package's docstrings runs as written (doctest), module by module.

The examples are written as a user's session in which ``import lakecompute as lc`` and ``import numpy as
np`` were run, the convention of the docs (docs/index.md, "Writing the docs"): the package's own modules
never import the ``lakecompute`` facade, their examples included. Each module's examples run with its own
globals plus those two names, in an empty directory; a line that cannot run here (it needs files the
example does not make) says ``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.helpers import needs_marks

PACKAGE = Path(lc.__file__).resolve().parent

#: Examples a change must not lose: those the docs point at (a scan that found none would pass).
KNOWN = [
    lc.VersionDiff,
    lc.Dataset.checkout,
    lc.copy,
    lc.DatasetView.filter,
    lc.DatasetView.save,
    lc.from_numpy,
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules_with_examples() -> list[tuple[str, str]]:
    """(module name, source) of every module of the package whose text has a ``>>>`` line, found without
    importing anything (a module that needs a full-lane package is marked so)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        if any(line.lstrip().startswith(">>>") for line in source.splitlines()):
            found.append((_module_name(path), source))
    return found


MODULES = _modules_with_examples()


def _doctests(name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder().find(module, name, extraglobs={"lc": lc, "np": np})
    # A module's finder also reaches objects it imports from elsewhere; each runs in its own module.
    return [t for t in tests if t.examples and t.filename == module.__file__]


@pytest.mark.parametrize(
    "name", [pytest.param(name, id=name, marks=needs_marks(source)) for name, source in MODULES]
)
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every example line of the module's docstrings gives the output its docstring shows."""
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = _doctests(name)
    assert tests, f"{name} has a >>> line but no example doctest finds"
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_docstring_examples_are_all_collected() -> None:
    """The scan covers the modules of the examples the docs rely on, and each of those has examples."""
    names = {name for name, _ in MODULES}
    for obj in KNOWN:
        assert obj.__module__ in names, obj.__qualname__
        tests = doctest.DocTestFinder(recurse=False).find(obj, obj.__qualname__, globs={})
        assert sum(len(t.examples) for t in tests) > 0, f"{obj.__qualname__} has no example"


def test_docstring_examples_never_import_the_facade() -> None:
    """Below the facade, no example imports ``lakecompute`` itself: ``lc`` is given, as in the docs."""
    found = [
        name
        for name, source in MODULES
        if name != "lakecompute"
        for line in source.splitlines()
        if line.lstrip().startswith(">>>") and "lakecompute as lc" in line
    ]
    assert found == []
