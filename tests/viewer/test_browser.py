"""The browser lane: the viewer's pages in Debian's Chromium, driven by Playwright.

Playwright's own browser download does not work everywhere (nor offline), so the tests launch the system's
Chromium (``apt-get install chromium``; `.ci/run` installs it) by its path. They are marked ``browser``
and skip, saying why, where the browser or Playwright's Python client is missing; with
``LAKECOMPUTE_REQUIRE_BROWSER=1`` (`.ci/run` sets it) they fail there instead.

Every page a test opens has its requests recorded: none may go anywhere but the viewer on 127.0.0.1.
The tests save screenshots of the pages; with ``LAKECOMPUTE_SCREENSHOTS=docs/images`` they write the ones
docs/viewer.md shows (`SCREENSHOTS`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.viewer import Viewer, serve
from tests.viewer.scene import BOX, CLASSES, SCREENSHOTS, N, damage_chunks

CHROMIUM = Path("/usr/bin/chromium")
#: Chromium's flags for a test: no sandbox (containers), no GPU, and none of its own traffic.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

REQUIRED = bool(os.environ.get("LAKECOMPUTE_REQUIRE_BROWSER"))
if REQUIRED:
    from playwright import sync_api
else:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the browser lane needs playwright (dev extra)"
    )
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists() and not REQUIRED, reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium, headless, launched by its path."""
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def requests_made() -> list[str]:
    """The URL of every request the test's pages made."""
    return []


@pytest.fixture
def page(browser: Any, viewer: Viewer, requests_made: list[str]) -> Iterator[Any]:
    """A fresh page (its own context: no cache) whose requests are recorded; after the test, none of
    them went anywhere but the viewer."""
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    context.on("request", lambda request: requests_made.append(request.url))
    yield context.new_page()
    context.close()
    origin = viewer.url.rstrip("/")
    assert requests_made, "the page made no request at all"
    assert [u for u in requests_made if not (u.startswith((origin + "/", "data:")))] == []


def _open(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready]")


def _all_loaded(page: Any, selector: str) -> int:
    """Scroll every image matching ``selector`` into view (they load lazily) and wait until each has
    loaded; how many there are."""
    images = page.locator(selector)
    for k in range(images.count()):
        images.nth(k).scroll_into_view_if_needed()
    page.wait_for_function(
        "s => [...document.querySelectorAll(s)].every(i => i.complete && i.naturalWidth > 0)", arg=selector
    )
    count: int = images.count()
    return count


def _shot(page: Any, name: str, tmp_path: Path) -> Path:
    """A screenshot of the page, saved small (a 256-colour PNG) where LAKECOMPUTE_SCREENSHOTS says (else
    in the test's folder)."""
    folder = Path(os.environ.get("LAKECOMPUTE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    img = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    path = folder / SCREENSHOTS[name]
    img.quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path


def test_grid_shows_every_row_with_its_thumbnail(page: Any, viewer: Viewer, tmp_path: Path) -> None:
    """The grid has a cell per row of the page, each with its loaded thumbnail and class names."""
    _open(page, viewer.url)
    assert page.locator("#grid figure.cell").count() == N
    assert _all_loaded(page, "#grid figure.cell img") == N
    assert page.locator("#summary").inner_text() == f"rows 1\u2013{N} of {N} \u00b7 page 1 of 1"
    first = page.locator('#grid figure.cell[data-index="1"] figcaption').inner_text()
    assert first == f"1 · {CLASSES[1]}, {CLASSES[1]}"  # labels, then the box's category
    assert _shot(page, "grid", tmp_path).stat().st_size < 400_000


def test_a_box_is_drawn_at_its_edge(page: Any, viewer: Viewer) -> None:
    """Row 0's box outline shows in the screenshot where its left edge is, in its class's colour."""
    _open(page, viewer.url)
    img = page.locator('#grid figure.cell[data-index="0"] img')
    _all_loaded(page, '#grid figure.cell[data-index="0"] img')
    box = img.bounding_box()
    width, height = img.evaluate("i => [i.naturalWidth, i.naturalHeight]")
    scale = min(box["width"] / width, box["height"] / height)  # object-fit: contain, centred
    left, top = box["x"] + (box["width"] - scale * width) / 2, box["y"] + (box["height"] - scale * height) / 2
    shot = np.asarray(Image.open(io.BytesIO(page.screenshot())).convert("RGB"))

    def at(x: float, y: float) -> np.ndarray:
        """The screenshot's pixel over the centre of the thumbnail's pixel (x, y)."""
        return shot[round(top + (y + 0.5) * scale), round(left + (x + 0.5) * scale)].astype(int)

    x1, y1, _, y2 = BOX
    red = np.array([230, 25, 75])  # the palette's first colour: class 0
    for y in np.linspace(y1 + 3, y2 - 3, 5):
        assert np.abs(at(x1, y) - red).max() <= 8, (y, at(x1, y))
    assert np.abs(at(x1 + 2, 30) - red).max() > 40  # and only there


def test_sample_page_shows_the_stored_image_and_values(page: Any, viewer: Viewer, tmp_path: Path) -> None:
    """A cell leads to its sample page: the image at full size, every tensor's value, previous and next."""
    _open(page, viewer.url)
    page.locator('#grid figure.cell[data-index="4"] a').click()
    page.wait_for_selector("body[data-ready]")
    assert page.url.endswith("/sample/4")
    assert _all_loaded(page, ".sample-images img") == 1
    assert page.locator(".sample-images img").evaluate("i => [i.naturalWidth, i.naturalHeight]") == [48, 48]
    assert page.locator('tr[data-tensor="caption"] pre').inner_text() == '"row 4"'
    assert page.locator('tr[data-tensor="labels"] pre').inner_text() == '1  ["dog"]'
    assert (page.locator("#prev").inner_text(), page.locator("#next").inner_text()) == ("← 3", "5 →")
    page.locator(".sample-images input[type=checkbox]").check()
    page.wait_for_function("() => document.querySelector('.sample-images img').src.includes('overlays=1')")
    _all_loaded(page, ".sample-images img")
    _shot(page, "sample", tmp_path)
    page.locator("#next").click()
    page.wait_for_selector("body[data-ready]")
    assert page.url.endswith("/sample/5")


def test_versions_page_lists_branches_tags_and_evals(page: Any, viewer: Viewer, tmp_path: Path) -> None:
    """The versions page draws every version with its branch and tag, and the eval that made one."""
    _open(page, viewer.url + "versions")
    rows = page.locator("#graph .row")
    assert rows.count() == len(lc.load(viewer.server.app.source.path).log(all_branches=True))
    assert page.locator('.row[data-version="3"] .badge.branch').inner_text() == "experiment"
    assert page.locator('.row[data-version="2"] .badge.tag').inner_text() == "v1.0"
    assert page.locator('.row[data-version="3"] .eval').inner_text() == "eval: flip_images (done)"
    assert page.locator("#graph svg circle").count() == rows.count()
    _shot(page, "versions", tmp_path)


def test_diff_page_shows_replaced_rows_old_and_new(page: Any, viewer: Viewer, tmp_path: Path) -> None:
    """The diff of main and the branch counts rows per tensor and shows every replaced row, old | new."""
    _open(page, viewer.url + "diff?a=main&b=experiment")
    assert page.locator('#diff-counts tr[data-tensor="images"] td').nth(1).inner_text() == str(N)
    assert page.locator("#pairs figure.pair").count() == N
    assert _all_loaded(page, "#pairs figure.pair img") == 2 * N
    old = page.locator('#pairs figure.pair[data-index="0"] img').nth(0).get_attribute("src")
    new = page.locator('#pairs figure.pair[data-index="0"] img').nth(1).get_attribute("src")
    assert old is not None
    assert new is not None
    assert old != new
    _shot(page, "diff", tmp_path)


def test_no_request_leaves_the_machine(page: Any, viewer: Viewer, requests_made: list[str]) -> None:
    """Every page, and every picture on it, is fetched from the viewer itself (the fixture checks the
    log; here every page is visited)."""
    for path in ["", "sample/1", "versions", "diff?a=main&b=experiment"]:
        _open(page, viewer.url + path)
        page.wait_for_load_state("networkidle")
    assert any("/api/thumb?" in u for u in requests_made)
    assert any("/api/image?" in u for u in requests_made)


@pytest.fixture
def damaged(own_scene: lc.Dataset) -> Iterator[Viewer]:
    """A viewer on a scene whose image and label chunks are damaged."""
    ds = lc.load(own_scene.path)
    damage_chunks(ds, "images")
    damage_chunks(ds, "labels")
    with serve(ds.path, open_browser=False) as v:
        yield v


def test_damaged_data_shows_the_library_message(browser: Any, damaged: Viewer) -> None:
    """A damaged dataset: the grid shows DatasetCorruptError's message (in the banner for the labels, in
    the cells for the images), and the other pages still work."""
    page = browser.new_page()
    try:
        _open(page, damaged.url)
        assert "DatasetCorruptError: " in page.locator("#error").inner_text()
        assert "tensor 'labels'" in page.locator("#error").inner_text()
        page.wait_for_function("() => document.querySelectorAll('#grid .cell-error').length > 0")
        assert page.locator("#grid .cell-error").first.inner_text().startswith("DatasetCorruptError: ")
        _open(page, damaged.url + "versions")
        assert page.locator("#graph .row").count() > 0
    finally:
        page.close()


def test_an_expression_filters_the_grid_and_its_url_reproduces_it(page: Any, viewer: Viewer) -> None:
    """Typing an expression shows exactly the rows Python keeps; the URL holds it, and reloading shows
    the same rows."""
    expr = "labels == 'dog'"
    kept = [int(p) for p in lc.load(viewer.server.app.source.path).filter(expr).positions]
    _open(page, viewer.url)
    page.locator("#expr").fill(expr)
    page.locator("#expr").press("Enter")
    page.wait_for_url(f"**/?expr={quote(expr).replace('%20', '+')}")
    page.wait_for_selector("body[data-ready]")

    def shown() -> list[int]:
        return [
            int(i)
            for i in page.locator("#grid figure.cell").evaluate_all("cs => cs.map(c => c.dataset.index)")
        ]

    assert shown() == kept
    page.reload()
    page.wait_for_selector("body[data-ready]")
    assert shown() == kept
    assert page.locator("#expr").input_value() == expr


def test_sidebar_counts_and_toggles_write_the_expression(page: Any, viewer: Viewer, tmp_path: Path) -> None:
    """The sidebar shows each label tensor's counts; ticking values or-s them into the expression (in
    the URL), and the grid shows the rows Python keeps for it; unticking takes a value out again."""
    ds = lc.load(viewer.server.app.source.path)
    _open(page, viewer.url)
    page.wait_for_selector('ul.counts[data-tensor="labels"] li')
    counts = page.locator('ul.counts[data-tensor="labels"] li').evaluate_all(
        "lis => lis.map(li => [li.querySelector('label').textContent.trim(),"
        " Number(li.querySelector('.n').textContent)])"
    )
    assert dict(counts) == ds.count_values("labels")
    _shot(page, "grid", tmp_path)

    def tick(value: str, on: bool) -> str:
        box = page.locator(f'ul.counts[data-tensor="labels"] input[data-clause="labels == \'{value}\'"]')
        with page.expect_navigation():
            box.set_checked(on)
        page.wait_for_selector("body[data-ready]")
        expr = page.locator("#expr").input_value()
        shown = page.locator("#grid figure.cell").evaluate_all("cs => cs.map(c => Number(c.dataset.index))")
        kept = ds.filter(expr).positions if expr else range(len(ds))
        assert shown == [int(p) for p in kept]
        return expr

    assert tick("dog", True) == "labels == 'dog'"
    assert tick("bird", True) == "(labels == 'dog' or labels == 'bird')"
    assert tick("dog", False) == "labels == 'bird'"
    assert tick("bird", False) == ""
