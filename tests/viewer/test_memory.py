"""The viewer's memory stays bounded while a client pages through every thumbnail of a dataset several
times larger than all its caches together."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import CACHE_BYTES
from tests.viewer.scene import fetch, get_json

ROOT = Path(__file__).resolve().parents[2]
ROWS = 8_000  # 64x64 noise PNGs of ~12 KB: ~95 MB stored, ~95 MB of thumbnails served
THUMB_CACHE = 4 << 20


def _rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def _noise(path: Path) -> None:
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["a", "b"])
    rng = np.random.default_rng(0)
    for _ in range(0, ROWS, 1000):
        images = rng.integers(0, 255, (1000, 64, 64, 3), dtype=np.uint8)
        ds.extend({"images": list(images), "labels": rng.integers(0, 2, 1000)})


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc (Linux)")
def test_server_memory_is_bounded_while_paging_through_everything(tmp_path: Path) -> None:
    """Paging through all rows, thumbnail by thumbnail: once the caches (the handle's chunk cache, the
    thumbnail cache) are full, the server's RSS stops growing, though as many bytes again are served."""
    _noise(tmp_path / "ds")
    stored = sum(f.stat().st_size for f in (tmp_path / "ds").rglob("*") if f.is_file())
    assert stored > 2.5 * (CACHE_BYTES + THUMB_CACHE)
    command = [
        sys.executable,
        str(ROOT / "tests/viewer/memory_server.py"),
        str(tmp_path / "ds"),
        str(THUMB_CACHE),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            served, half, at_half = 0, 0, 0
            for offset in range(0, ROWS, 100):
                for row in get_json(url, f"/api/samples?offset={offset}&limit=100")["rows"]:
                    reply = fetch(url, row["thumb"])
                    assert reply.status == 200
                    served += len(reply.body)
                if offset + 100 == ROWS // 2:
                    half, at_half = served, _rss_mib(server.pid)
            end = _rss_mib(server.pid)
        finally:
            server.terminate()
    assert served - half > 40 << 20  # the second half served tens of MB more ...
    assert end - at_half < 24, (at_half, end)  # ... and the server grew by less than 24 MiB
