"""Fixtures of the viewer's tests: the scene dataset (tests/viewer/scene.py) and a viewer serving it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import lakecompute as lc
from lakecompute.viewer import Viewer, serve
from tests.viewer.scene import make_scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> lc.Dataset:
    """The scene dataset, built once per test module (tests that change it build their own)."""
    return make_scene(str(tmp_path_factory.mktemp("scene") / "ds"))


@pytest.fixture(scope="module")
def viewer(scene: lc.Dataset) -> Iterator[Viewer]:
    """A viewer on the scene, on a free port of 127.0.0.1, in this process."""
    with serve(scene.path, open_browser=False) as running:
        yield running


@pytest.fixture
def own_scene(tmp_path: Path) -> lc.Dataset:
    """A scene of this test's own, to change or damage."""
    return make_scene(str(tmp_path / "ds"))
