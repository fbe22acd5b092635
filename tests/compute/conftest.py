"""Fixtures for the transform tests: one fixture parametrising every scheduler."""

from __future__ import annotations

import pytest

from tests.compute.compute_helpers import SCHEDULERS, Sched


@pytest.fixture(params=SCHEDULERS, ids=str)
def scheduler(request: pytest.FixtureRequest) -> Sched:
    """Every scheduler the acceptance names: serial (0 and 2 workers), threaded and processed (2 workers)."""
    sched: Sched = request.param
    return sched
