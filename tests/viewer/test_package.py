"""The built package ships the viewer's page: a wheel built from this tree holds lakecompute/viewer/static,
and the viewer imported from that wheel (not from the source tree) loads it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lakecompute.viewer._server import ASSETS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_ships_the_page_and_the_installed_viewer_loads_it(tmp_path: Path) -> None:
    """pip builds a wheel that holds every asset, byte for byte; imported from the unpacked wheel, the
    viewer serves them."""
    source = tmp_path / "source"  # a copy: building leaves build/ and *.egg-info beside the sources
    shutil.copytree(
        ROOT / "lakecompute", source / "lakecompute", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("lakecompute-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for name in ASSETS:
            member = f"lakecompute/viewer/static/{name}"
            assert member in names
            assert zf.read(member) == (ROOT / member).read_bytes()
        zf.extractall(tmp_path / "installed")
    code = (
        "import lakecompute.viewer._server as s, pathlib\n"
        "assert 'installed' in s.__file__, s.__file__\n"
        "print(sorted((k, len(v)) for k, v in s.load_assets().items()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "installed")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(
        sorted((n, (ROOT / "lakecompute/viewer/static" / n).stat().st_size) for n in ASSETS)
    )
