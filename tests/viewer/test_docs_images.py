"""docs/viewer.md shows the screenshots the browser tests take, and they are in the repository, small."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image

from tests.viewer.scene import SCREENSHOTS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_viewer_page_shows_the_browser_tests_screenshots() -> None:
    """Every image docs/viewer.md shows is one the browser tests write, and each is a small PNG there."""
    shown = re.findall(r"!\[[^\]]*\]\(images/([^)]+)\)", (DOCS / "viewer.md").read_text())
    assert sorted(shown) == sorted(SCREENSHOTS.values())
    for name in shown:
        path = DOCS / "images" / name
        assert path.stat().st_size < 200_000, name
        with Image.open(path) as img:
            assert img.format == "PNG"
            assert img.width >= 800
