"""The ``lakecompute`` command: every subcommand's output and exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.cli import main
from lakecompute.demo import write_image_folder
from lakecompute.testing.data import CLASS_NAMES, make_shapes_dataset

SUBCOMMANDS = ["info", "log", "ingest-classification", "compact", "show", "demo"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def shapes(tmp_path: Path) -> str:
    """A small committed image dataset (12 samples, png)."""
    path = str(tmp_path / "shapes")
    make_shapes_dataset(path, n=12, size=(16, 16))
    return path


@pytest.mark.parametrize("command", [None, *SUBCOMMANDS])
def test_cli_help(capsys: pytest.CaptureFixture[str], command: str | None) -> None:
    """``--help`` works for the command and every subcommand, exiting 0 with a usage line."""
    argv = ["--help"] if command is None else [command, "--help"]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: lakecompute")
    if command is None:
        for name in SUBCOMMANDS:
            assert name in out


def test_cli_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown command, a missing argument or a bad option value exit with 2."""
    for argv in (["frobnicate"], ["info"], ["show", "x", "--rows", "0"], []):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
    assert "usage:" in capsys.readouterr().err


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``--version`` prints the package version."""
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"lakecompute {lc.__version__}"


def test_cli_info(capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    """``info`` prints the summary table; ``--version`` shows an older version."""
    code, out, _ = _run(capsys, "info", shapes)
    assert code == 0
    assert "samples=12" in out
    assert "images  image        uint8   (12, 16, 16, 3)  png" in out
    code, out, _ = _run(capsys, "info", shapes, "--version", "0")
    assert code == 0
    assert "version=0, samples=0" in out


def test_cli_info_missing_dataset_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A path without a dataset is an error: exit 1, the message on stderr, no traceback."""
    code, out, err = _run(capsys, "info", str(tmp_path / "nothing"))
    assert code == 1
    assert out == ""
    assert err.startswith("lakecompute: error: No lakecompute dataset at")
    assert "Traceback" not in err


def test_cli_log(capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    """``log`` lists every committed version with its message and sample counts."""
    code, out, _ = _run(capsys, "log", shapes)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["version", "time", "message", "samples"]
    assert len(lines) == 1 + len(lc.load(shapes).log())
    assert "images=12, labels=12" in lines[-1]


def test_cli_ingest_classification(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``ingest-classification`` builds images + labels from class folders and reports what it did."""
    counts = write_image_folder(tmp_path / "src", n=20, size=(16, 16))
    dest = str(tmp_path / "out")
    code, out, _ = _run(capsys, "ingest-classification", str(tmp_path / "src"), dest, "--no-progress")
    assert code == 0
    assert f"Ingested 20 images of 3 classes ({', '.join(CLASS_NAMES)}) into {dest}." in out
    assert "Images stored as png: 5 of 20 files kept as they are, 15 converted (" in out
    ds = lc.load(dest)
    assert np.bincount(ds.labels.numpy()).tolist() == [counts[c] for c in CLASS_NAMES]
    # A second run refuses to replace the dataset unless asked.
    code, _, err = _run(capsys, "ingest-classification", str(tmp_path / "src"), dest, "--no-progress")
    assert code == 1
    assert "overwrite" in err
    code, _, _ = _run(
        capsys, "ingest-classification", str(tmp_path / "src"), dest, "--overwrite", "--no-progress",
        "--image-compression", "none", "--num-workers", "0",
    )  # fmt: skip
    assert code == 0
    assert lc.load(dest).images.sample_compression is None


def test_cli_ingest_classification_corrupt_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A corrupt file fails the ingest with exit 1 naming it; ``--skip-errors`` skips and lists it."""
    write_image_folder(tmp_path / "src", n=6, size=(16, 16))
    (tmp_path / "src" / "circle" / "broken.png").write_bytes(b"not a png")
    args = ["ingest-classification", str(tmp_path / "src"), str(tmp_path / "out"), "--no-progress"]
    code, _, err = _run(capsys, *args)
    assert code == 1
    assert "broken.png" in err
    code, out, err = _run(capsys, *args, "--skip-errors")
    assert code == 0
    assert "Ingested 6 images" in out
    assert "lakecompute: warning: Skipped 1 unreadable file(s)" in err
    assert "broken.png" in err


def test_cli_compact(capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    """``compact`` commits a new version with the same content."""
    before = lc.load(shapes)
    before.extend({"images": before.images.numpy()[:3], "labels": [0, 1, 2]})  # a second fragment
    images = before.images.numpy()
    code, out, _ = _run(capsys, "compact", shapes)
    assert code == 0
    after = lc.load(shapes)
    assert out.strip() == f"Compacted {shapes}: version {after.version}."
    assert after.version == before.version + 1
    assert np.array_equal(after.images.numpy(), images)


def test_cli_show(capsys: pytest.CaptureFixture[str], shapes: str, tmp_path: Path) -> None:
    """``show`` writes a contact sheet PNG of rows x cols cells (or the chosen indices)."""
    grid = tmp_path / "grid.png"
    code, out, _ = _run(
        capsys, "show", shapes, "--tensor", "images", "--rows", "2", "--cols", "3", "-o", str(grid)
    )
    assert code == 0
    assert out.strip() == f"Wrote {grid} (288x220)."
    with Image.open(grid) as image:
        assert image.size == (288, 220)
    code, _, _ = _run(capsys, "show", shapes, "--indices", "0,5,11", "--cols", "3", "-o", str(grid))
    assert code == 0
    with Image.open(grid) as image:
        assert image.size == (288, 110)


def test_cli_show_errors(capsys: pytest.CaptureFixture[str], shapes: str, tmp_path: Path) -> None:
    """An unknown tensor or an index out of range exits 1 with a message."""
    code, _, err = _run(capsys, "show", shapes, "--tensor", "pixels", "-o", str(tmp_path / "g.png"))
    assert code == 1
    assert "'pixels' does not exist" in err
    code, _, err = _run(capsys, "show", shapes, "--indices", "3,99", "-o", str(tmp_path / "g.png"))
    assert code == 1
    assert "[99]" in err
    code, _, err = _run(capsys, "show", shapes, "--indices", "a,b", "-o", str(tmp_path / "g.png"))
    assert code == 1
    assert "comma-separated integers" in err


def test_cli_demo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``demo`` ingests, runs flip -> resize on workers, writes two contact sheets, and says where."""
    out_dir = tmp_path / "demo"
    code, out, _ = _run(
        capsys, "demo", "--output-dir", str(out_dir), "--samples", "40", "--num-workers", "2", "--no-progress"
    )
    assert code == 0
    for name in ("before.png", "after.png"):
        assert str(out_dir / name) in out
        with Image.open(out_dir / name) as image:
            assert image.format == "PNG"
    src, flipped = lc.load(out_dir / "shapes"), lc.load(out_dir / "shapes-flipped-64")
    assert len(src) == len(flipped) == 40
    assert flipped.images.shape == (40, 64, 64, 3)
    expected = np.asarray(
        Image.fromarray(np.flip(src.images[7].numpy(), axis=0)).resize((64, 64), Image.BILINEAR)
    )
    assert np.array_equal(flipped.images[7].numpy(), expected)
    assert "lakecompute info" in out


def test_cli_runs_as_a_module(shapes: str) -> None:
    """``python -m lakecompute`` runs the same command line in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-m", "lakecompute", "info", shapes], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "samples=12" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "lakecompute", "log", shapes + "-missing"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "No lakecompute dataset" in proc.stderr
