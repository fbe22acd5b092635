"""The disk cache shared by processes (issue 44's attacks): processes and loader workers filling one
``cache_dir`` at once, a reader killed with SIGKILL mid-download, a disk that fills up, and datasets
written before the cache existed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import CacheSpec, DiskCache
from tests.helpers import wait_until
from tests.s3.moto_server import MotoServer

N = 8 * 131_072  # int64 values: 8 chunks of 1 MiB
ROOT = Path(__file__).resolve().parents[2]

READER = textwrap.dedent(
    """
    import json, sys, numpy as np, lakecompute as lc
    url, options, cache_dir, size = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    epochs = int(sys.argv[5])
    ds = lc.load(url, storage_options=options, cache_dir=cache_dir, cache_size=int(size))
    for epoch in range(epochs):
        seen = []
        for batch in ds.batches(50_000, shuffle=True, epoch=epoch, seed=int(sys.argv[6])):
            seen.append(batch["x"])
        got = np.sort(np.concatenate(seen))
        assert (got == np.arange(len(got)) * 3).all() and len(got) == len(ds), "wrong values"
    print("ok")
    """
)


def _make(url: str, options: dict[str, Any]) -> None:
    ds = lc.empty(url, storage_options=options)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.arange(N) * 3)


def _reader(
    url: str, options: dict[str, Any], cache_dir: Path, size: int, epochs: int, seed: int
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [url, json.dumps(options), str(cache_dir), str(size), str(epochs), str(seed)]
    return subprocess.Popen(
        [sys.executable, "-c", READER, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _leftovers(cache_dir: Path) -> list[Path]:
    return list(cache_dir.rglob("*.partial"))


@pytest.mark.parametrize("fits", [True, False])
def test_two_processes_and_two_loader_workers_fill_one_cache_at_once(
    fits: bool, bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    url = f"s3://{bucket}/shared"
    _make(url, storage_options)
    size = 64 * 2**20 if fits else 3 * 2**20  # 8 chunks fit, or 3 do: eviction under readers
    others = [_reader(url, storage_options, tmp_path, size, 2, seed) for seed in (1, 2)]
    ds = lc.load(url, storage_options=storage_options, cache_dir=tmp_path, cache_size=size)
    for epoch in range(2):
        seen = [b["x"] for b in ds.batches(50_000, shuffle=True, epoch=epoch, num_workers=2)]
        assert (np.sort(np.concatenate(seen)) == np.arange(N) * 3).all()
    for proc in others:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == "ok"
    assert _leftovers(tmp_path) == []
    info = DiskCache(CacheSpec(str(tmp_path), size)).info()
    assert info.partial == 0
    assert info.nbytes <= size + 2**20 + 200
    if fits:
        assert info.entries == 8


def test_a_reader_killed_mid_download_leaves_nothing_served_and_no_deadlock(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    url = f"s3://{bucket}/killed"
    _make(url, storage_options)
    proc = _reader(url, storage_options, tmp_path, 64 * 2**20, 50, 0)
    root = tmp_path / "lakecompute-cache"
    wait_until(
        lambda: root.exists() and any(p.name != "lock" for p in root.rglob("*") if p.is_file()),
        120,
        "a first entry",
    )
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    # What a kill may leave mid-write: a temporary file of a dead process, and a torn entry.
    folder = next(p.parent for p in root.rglob("*") if p.is_file() and len(p.name) == 38)
    (folder / f".{'0' * 38}.{proc.pid}.abcd1234.partial").write_bytes(b"half a chunk")
    torn = folder / ("f" * 38)
    torn.write_bytes(b"LCCHUNK1" + b"\0" * 10)
    ds = lc.load(url, storage_options=storage_options, cache_dir=tmp_path, cache_size=64 * 2**20)
    assert (ds.x.numpy() == np.arange(N) * 3).all()
    info = DiskCache(CacheSpec(str(tmp_path), 64 * 2**20)).info()
    assert info.partial == 0
    assert _leftovers(tmp_path) == []


def test_a_full_disk_warns_once_and_reads_go_on_from_the_store(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    """A process whose files may grow to 512 KiB (RLIMIT_FSIZE: writes past it fail with EFBIG, as on a
    full disk) reads a dataset of 8 MiB through the cache: one warning, every value right."""
    url = f"s3://{bucket}/full"
    ds = lc.empty(url, storage_options=storage_options)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.random.default_rng(0).integers(0, 2**62, N))  # incompressible: 1 MiB files
    script = textwrap.dedent(
        """
        import json, resource, signal, sys, warnings, numpy as np, lakecompute as lc
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2**19, 2**19))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = lc.load(sys.argv[1], storage_options=json.loads(sys.argv[2]), cache_dir=sys.argv[3])
            want = np.random.default_rng(0).integers(0, 2**62, len(ds))
            assert (ds.x.numpy() == want).all()
            assert (ds.x.numpy() == want).all()
        ours = [str(w.message) for w in caught if issubclass(w.category, lc.LakeComputeWarning)]
        print(json.dumps(ours))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script, url, json.dumps(storage_options), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    warned = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(warned) == 1, warned
    assert "the disk is full" in warned[0]
    assert _leftovers(tmp_path) == []


def test_an_old_format_dataset_on_s3_reads_through_a_cache(
    bucket: str, storage_options: dict[str, Any], moto_server: MotoServer, tmp_path: Path
) -> None:
    import obstore

    source = ROOT / "tests" / "storage" / "old_format"
    expected = json.loads((source / "expected.json").read_text())
    store = moto_server.store(bucket)
    for path in (source / "dataset").rglob("*"):
        if path.is_file():
            obstore.put(store, "old/" + path.relative_to(source / "dataset").as_posix(), path.read_bytes())
    url = f"s3://{bucket}/old"
    for version, want in expected["versions"].items():
        ds = lc.load(url, storage_options=storage_options, version=int(version), cache_dir=tmp_path)
        assert (ds.x.numpy().tolist() if "x" in ds.tensors else None) == want["x"], version
        assert (ds.name.text() if "name" in ds.tensors else None) == want["name"], version
    shutil.rmtree(tmp_path / "lakecompute-cache", ignore_errors=True)
