"""The examples in the docstrings of the version API run as written (doctest)."""

from __future__ import annotations

import doctest
from typing import Any

import pytest

import lakecompute as lc

EXAMPLES = [lc.VersionDiff, lc.Dataset.checkout, lc.copy, lc.DatasetView.save]


@pytest.mark.parametrize("obj", EXAMPLES, ids=lambda o: o.__qualname__)
def test_docstring_example_runs(obj: Any) -> None:
    """Every example line gives the output its docstring shows."""
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(obj, obj.__qualname__, globs={})
    assert sum(len(t.examples) for t in tests) > 0, f"{obj.__qualname__} has no example"
    for test in tests:
        runner.run(test)
    assert runner.failures == 0
