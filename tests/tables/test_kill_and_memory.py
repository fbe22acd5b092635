"""``to_parquet`` in a process killed with SIGKILL at any point leaves the previous file or none; an export
of images many times its row-group budget keeps its memory to a stated bound. Both in subprocesses."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

import lakecompute as lc
from tests.helpers import touch, wait_for_file, wait_until
from tests.tables.conftest import make_photos

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

# The child writes the Parquet file with every row group's write followed by a handshake: it says
# "written-k" and waits for "go-k", so the parent can kill it between any two row groups (or before the
# first, or after the rename) and look at the folder in that state.
EXPORT = """
import sys
import pyarrow.parquet as pq
import lakecompute as lc
from tests.helpers import touch, wait_for_file

src, target, sync = sys.argv[1:4]
write = pq.ParquetWriter.write_table
count = [0]


def write_table(self, table, *args, **kwargs):
    write(self, table, *args, **kwargs)
    count[0] += 1
    touch(f"{sync}/written-{count[0]}")
    wait_for_file(f"{sync}/go-{count[0]}")


pq.ParquetWriter.write_table = write_table
ds = lc.load(src)
touch(f"{sync}/started")
ds.to_parquet(target, row_group_size=3, progressbar=False)
touch(f"{sync}/done")
"""

GROUPS = 4  # 12 rows in row groups of 3


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kill_after", [0, 1, 3, GROUPS, None])
def test_to_parquet_killed_leaves_the_previous_file_or_the_new_one(
    tmp_path: Path, kill_after: int | None
) -> None:
    """Killed before its first row group, between two, after the last (before the rename): the target
    holds the previous file, byte for byte, and nothing else is visible. Not killed: the new file, whole;
    and the next export removes what the killed one left behind."""
    ds = make_photos(str(tmp_path / "ds"))
    out = tmp_path / "out"
    out.mkdir()
    target = out / "photos.parquet"
    previous = b"PAR1 the previous export"
    target.write_bytes(previous)
    sync = tmp_path / "sync"
    sync.mkdir()
    child = subprocess.Popen([sys.executable, "-c", EXPORT, ds.path, str(target), str(sync)], env=ENV)
    try:
        wait_for_file(sync / "started")
        last = GROUPS if kill_after is None else kill_after
        for k in range(1, last + 1):
            wait_for_file(sync / f"written-{k}")
            if k < last or kill_after is None:
                touch(sync / f"go-{k}")
        if kill_after is None:
            wait_until(lambda: child.poll() is not None, what="the export to finish")
            assert child.returncode == 0
            assert pq.read_table(target).equals(ds.to_arrow())
            return
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert target.read_bytes() == previous
    assert _visible(out) == ["photos.parquet"]
    left = [p.name for p in out.iterdir() if p.name.endswith(".partial")]
    assert len(left) == (1 if kill_after else len(left))
    ds.to_parquet(
        target, progressbar=False
    )  # the next export of the same path removes the killed one's temporary file
    assert sorted(p.name for p in out.iterdir()) == ["photos.parquet"]
    assert pq.read_table(target).equals(ds.to_arrow())


# The peak is the kernel's high-water mark of this process's resident set (VmHWM), reset before the export
# where the kernel allows: not getrusage's ru_maxrss, which a child inherits from the process it forked from.
MEMORY = """
import sys
import lakecompute as lc

src, target, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = lc.load(src)
# The imports and first reads, outside the measure:
ds[:2].to_parquet(target + ".warm", row_group_bytes=budget, progressbar=False)


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again from the resident set now
except OSError:
    pass
before = status("VmRSS")
ds.to_parquet(target, row_group_bytes=budget, progressbar=False)
print(before, status("VmHWM"))
"""

BUDGET = 1 << 20
BOUND = 64 << 20  # the stated bound (docs/tables.md): the 32 MiB chunk cache and a few row groups


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_exporting_images_many_times_the_budget_keeps_memory_bounded(tmp_path: Path) -> None:
    """120 MiB of PNG images (noise) exported with 1 MiB row groups: the process's peak RSS grows by less
    than 64 MiB (the chunk cache's 32 MiB and a few row groups), about half the data."""
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(256, 256, 3), dtype=np.uint8)).save(buf, format="PNG")
    (tmp_path / "noise.png").write_bytes(buf.getvalue())
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    picture = lc.read(tmp_path / "noise.png")
    n = (120 << 20) // len(buf.getvalue()) + 1
    with ds:
        ds.images.extend([picture] * n)
    target = tmp_path / "images.parquet"
    run = subprocess.run(
        [sys.executable, "-c", MEMORY, ds.path, str(target), str(BUDGET)],
        capture_output=True, text=True, env=ENV, timeout=540, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    before, peak = (int(v) for v in run.stdout.split())
    size = target.stat().st_size
    assert size > 100 << 20
    assert pq.ParquetFile(target).metadata.num_row_groups >= size // (2 * BUDGET)
    assert peak - before < BOUND, (
        f"peak RSS grew by {(peak - before) / 2**20:.0f} MiB for {size / 2**20:.0f} MiB"
    )
