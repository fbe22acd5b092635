"""The selecting commands: ``filter`` (and ``--save``), ``count``, the class histograms of ``info``, and
``show --where/--objects``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.testing.data import CLASS_NAMES, make_shapes_dataset
from lakecompute.viz import contact_sheet
from tests.helpers import run_cli


@pytest.fixture
def shapes(tmp_path: Path) -> str:
    path = str(tmp_path / "shapes")
    make_shapes_dataset(path, n=30, size=(12, 12))
    return path


def test_filter_prints_the_rows_and_saves_them(
    capsys: pytest.CaptureFixture[str], shapes: str, tmp_path: Path
) -> None:
    """``filter`` prints how many rows match and which; ``--save`` writes them with their query in the log."""
    ds = lc.load(shapes)
    want = [i for i, v in enumerate(ds.labels.numpy().tolist()) if CLASS_NAMES[v] == "square"]
    code, out, err = run_cli(capsys, "filter", shapes, "labels == 'square'")
    assert code == 0, err
    assert out.splitlines() == [
        f"{len(want)} of 30 rows match \"labels == 'square'\" (version {ds.version}).",
        "rows: " + ", ".join(map(str, want)),
    ]
    dest = str(tmp_path / "squares")
    code, out, err = run_cli(capsys, "filter", shapes, "labels=='square'", "--save", dest, "--no-progress")
    assert code == 0, err
    assert (
        out.splitlines()[-1]
        == f"Saved {len(want)} rows to {dest} (filter(labels == 'square'), from version {ds.version})."
    )
    saved = lc.load(dest)
    assert saved.labels.numpy().tolist() == [CLASS_NAMES.index("square")] * len(want)
    assert saved.log()[-1]["origin"]["inputs"]["query"] == ["filter(labels == 'square')"]
    code, out, _ = run_cli(capsys, "log", dest)
    assert "where filter(labels == 'square')" in out
    code, _, err = run_cli(capsys, "filter", shapes, "labels != 'square'", "--save", dest)
    assert code == 1
    assert "Pass --overwrite to replace it." in err
    code, _, err = run_cli(capsys, "filter", shapes, "labels != 'square'", "--save", dest, "--overwrite")
    assert code == 0, err
    assert len(lc.load(dest)) == 30 - len(want)


def test_count_prints_a_table_most_frequent_first(capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    """``count`` prints value, count, share and a bar per value, then the total."""
    labels = Counter(CLASS_NAMES[v] for v in lc.load(shapes).labels.numpy().tolist())
    code, out, err = run_cli(capsys, "count", shapes, "labels")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["value", "count", "share"]
    rows = [line.split()[:3] for line in lines[2:-1]]
    assert [(name, int(count)) for name, count, _ in rows] == sorted(labels.items(), key=lambda kv: -kv[1])
    assert lines[-1] == "total: 30"
    first = next(k for k, _ in sorted(labels.items(), key=lambda kv: -kv[1]))
    code, out, _ = run_cli(capsys, "count", shapes, "labels", "--where", f"labels == '{first}'")
    assert out.splitlines()[2].split()[:2] == [first, str(labels[first])]


def test_info_shows_a_class_histogram_per_label_tensor(
    capsys: pytest.CaptureFixture[str], shapes: str
) -> None:
    """``info`` prints the summary table, then each class_label tensor's counts."""
    labels = Counter(CLASS_NAMES[v] for v in lc.load(shapes).labels.numpy().tolist())
    code, out, err = run_cli(capsys, "info", shapes)
    assert code == 0, err
    table = out[out.index("labels (class_label):") :].splitlines()
    assert {line.split()[0]: int(line.split()[1]) for line in table[3:-1]} == dict(labels)
    assert table[-1].strip() == "total: 30"


def test_show_draws_only_the_selected_rows_and_objects(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``show --objects`` draws the kept boxes only: the sheet equals the view's contact sheet."""
    ds = lc.empty(str(tmp_path / "det"), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox")
        ds.create_tensor("categories", htype="class_label", class_names=["car", "bus"])
        for i in range(4):
            ds.append(
                {
                    "images": np.full((24, 24, 3), 40 * i, np.uint8),
                    "boxes": np.float32([[1, 1, 10, 10], [12, 12, 22, 22]]),
                    "categories": np.uint32([0, 1]) if i % 2 else np.uint32([0, 0]),
                }
            )
    grid = tmp_path / "grid.png"
    code, _, err = run_cli(
        capsys, "show", ds.path, "--objects", "categories == 'bus'", "--labels", "none", "-o", str(grid)
    )
    assert code == 0, err
    view = ds.filter_labels("categories == 'bus'")
    assert len(view) == 2
    want = contact_sheet(view, label_tensor=None, indices="spread")
    assert np.array_equal(np.asarray(Image.open(grid).convert("RGB")), np.asarray(want))
    every_box = contact_sheet(ds[[1, 3]], label_tensor=None, indices="spread")
    assert not np.array_equal(np.asarray(every_box), np.asarray(want))  # the cars are not drawn
    code, _, err = run_cli(capsys, "show", ds.path, "--where", "len(boxes) > 5", "-o", str(grid))
    assert code == 1
    assert "has no samples to show" in err
