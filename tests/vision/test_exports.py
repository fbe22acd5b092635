"""Exports write whole files inside their target only: a failed or killed export keeps the previous one,
file names from the dataset never leave the folder, and two samples never share a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute import localfiles
from tests.vision.export_helpers import EXPORTS, boxes_dataset


def _export(kind: str, ds: Any, out: Path) -> None:
    if kind == "coco":
        ds.export_coco(out / "annotations.json", out / "images")
    else:
        ds.export_yolo(out)


def _leftovers(out: Path) -> list[Path]:
    """Hidden files and folders under ``out`` other than the export listing: a staging folder or a
    temporary file left behind."""
    return [p for p in out.rglob(".*") if p.name != localfiles.LISTING]


def _snapshot(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` (relative name -> bytes)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


NAMES = [f"img{i}.png" for i in range(6)]


_FULL_DISK = """
import resource, signal, sys
import numpy as np
import lakecompute as lc

kind, src, out = sys.argv[1:4]
ds = lc.load(src)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)  # fails with ENOSPC
resource.setrlimit(resource.RLIMIT_FSIZE, (16384, hard))  # the small files fit; the fourth image does not
try:
    if kind == "coco":
        ds.export_coco(out + "/annotations.json", out + "/images")
    else:
        ds.export_yolo(out)
except lc.StorageError as exc:
    print(exc.url)
    print(exc)
"""


@pytest.mark.parametrize("kind", EXPORTS)
def test_export_that_fails_half_way_keeps_the_previous_export(kind: str, tmp_path: Path) -> None:
    """A second export whose fourth image cannot be written (the file-size limit: EFBIG, as a full disk
    gives ENOSPC) is a StorageError naming that file, and the folder holds the first export byte for
    byte, with nothing of the second left behind."""
    out = tmp_path / "out"
    _export(kind, boxes_dataset(tmp_path / "a", NAMES), out)
    before = _snapshot(out)
    second = boxes_dataset(tmp_path / "b", NAMES, shade=100)
    noise = np.random.default_rng(0).integers(0, 256, (100, 100, 3), dtype=np.uint8)
    second.images[3] = noise  # about 30 kB as PNG, past the limit; the others take a few hundred bytes
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, kind, str(tmp_path / "b"), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    url, message = done.stdout.splitlines()[:2]
    assert url == str(out / "images" / "img3.png")
    assert "(File too large); the file keeps what it held before" in message
    assert _snapshot(out) == before
    assert _leftovers(out) == []


@pytest.mark.parametrize("kind", EXPORTS)
def test_export_that_raises_in_the_caller_keeps_the_previous_export(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception while an export writes its files (here, at the fourth) leaves the previous export as it
    was, and nothing of the failed one."""
    out = tmp_path / "out"
    _export(kind, boxes_dataset(tmp_path / "a", NAMES), out)
    before = _snapshot(out)
    real = localfiles.FolderExport.write
    calls = []

    def failing(self: Any, *args: Any, **kwargs: Any) -> str:
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(localfiles.FolderExport, "write", failing)
    with pytest.raises(KeyboardInterrupt):
        _export(kind, boxes_dataset(tmp_path / "b", NAMES, shade=100), out)
    assert _snapshot(out) == before
    assert _leftovers(out) == []


_CHILD = """
import sys, os
import lakecompute as lc
from lakecompute.localfiles import FolderExport
kind, src, out, ready = sys.argv[1:5]
real = FolderExport.write
count = [0]
def paused(self, *args, **kwargs):
    count[0] += 1
    if count[0] == 4:  # three files written: say so, then wait (on stdin) to be killed
        open(ready, "w").close()
        sys.stdin.read()
    return real(self, *args, **kwargs)
FolderExport.write = paused
ds = lc.load(src)
if kind == "coco":
    ds.export_coco(os.path.join(out, "annotations.json"), os.path.join(out, "images"))
else:
    ds.export_yolo(out)
"""


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the child never reached the middle of its export"
        time.sleep(0.02)


@pytest.mark.parametrize("kind", EXPORTS)
def test_export_killed_half_way_keeps_the_previous_export(kind: str, tmp_path: Path) -> None:
    """A process killed (SIGKILL) in the middle of an export leaves the previous export byte for byte;
    the next export removes what the killed one staged and writes its own whole."""
    out = tmp_path / "out"
    _export(kind, boxes_dataset(tmp_path / "a", NAMES), out)
    before = _snapshot(out)
    second = boxes_dataset(tmp_path / "b", NAMES, shade=100)
    ready = tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, kind, str(tmp_path / "b"), str(out), str(ready)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        _wait_for(ready, proc)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stderr):
            if stream is not None:
                stream.close()
    assert _visible(_snapshot(out)) == _visible(before)
    _export(kind, second, tmp_path / "fresh")
    _export(kind, second, out)
    fresh = _snapshot(tmp_path / "fresh")
    again = _snapshot(out)
    if kind == "yolo":  # data.yaml names its folder
        assert again.pop("data.yaml") == fresh.pop("data.yaml").replace(b"/fresh\n", b"/out\n")
    assert again == fresh  # the killed export's staging is gone too


def _hidden(name: str) -> bool:
    return any(part.startswith(".") for part in Path(name).parts)


def _visible(snapshot: dict[str, bytes]) -> dict[str, bytes]:
    """The files of a snapshot a reader of the export sees (not the hidden listing or staging)."""
    return {k: v for k, v in snapshot.items() if not _hidden(k)}


@pytest.mark.parametrize("kind", EXPORTS)
@pytest.mark.parametrize("name", ["../../escaped.png", "<absolute>", "a/../../up.png"])
def test_export_refuses_a_file_name_that_leaves_the_folder(kind: str, name: str, tmp_path: Path) -> None:
    """A file_name that is absolute or climbs out of the target is refused naming the sample, and nothing
    is written anywhere."""
    name = name.replace("<absolute>", str(tmp_path / "absolute.png"))
    ds = boxes_dataset(tmp_path / "ds", ["ok.png", name])
    out = tmp_path / "deep" / "er" / "out"
    with pytest.raises(lc.InvalidArgumentError, match=r"file_name of sample 1") as info:
        _export(kind, ds, out)
    assert name[:10] in str(info.value)
    assert _snapshot(out) == {}
    assert sorted(p.name for p in tmp_path.rglob("*") if p.suffix in (".png", ".txt")) == []


@pytest.mark.parametrize("kind", EXPORTS)
def test_export_refuses_a_file_name_through_a_symlink_out(kind: str, tmp_path: Path) -> None:
    """A file_name whose folder is a symbolic link leading out of the target is refused like a '..'."""
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "images").mkdir(parents=True)
    os.symlink(elsewhere, out / "images" / "link")
    if kind == "yolo":
        (out / "labels").mkdir()
        os.symlink(elsewhere, out / "labels" / "link")
    ds = boxes_dataset(tmp_path / "ds", ["link/x.png"])
    with pytest.raises(lc.InvalidArgumentError, match=r"file_name of sample 0.*resolves outside"):
        _export(kind, ds, out)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("kind", EXPORTS)
def test_export_refuses_two_samples_with_one_file_name(kind: str, tmp_path: Path) -> None:
    """Two samples whose file names name the same file are refused, both named, and nothing is written."""
    ds = boxes_dataset(tmp_path / "ds", ["a.png", "b.png", "sub/../a.png"])
    out = tmp_path / "out"
    with pytest.raises(lc.InvalidArgumentError, match=r"file_name of sample 2 .*file_name of sample 0"):
        _export(kind, ds, out)
    assert _snapshot(out) == {}


def test_export_coco_writes_the_annotations_file_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """export_coco puts every image in place before it writes the annotations file."""
    order: list[str] = []
    real = os.replace

    def recording(src: str, dst: str) -> None:
        # The annotations file takes its place by a rename (written whole beside it first): what is in
        # place in images/ at that moment is what a reader of the new annotations.json could see.
        if os.path.basename(dst) == "annotations.json":
            order.append("annotations.json")
            order.extend(sorted(n for n in os.listdir(tmp_path / "out" / "images") if not n.startswith(".")))
        real(src, dst)

    monkeypatch.setattr(os, "replace", recording)
    boxes_dataset(tmp_path / "ds", NAMES).export_coco(
        tmp_path / "out" / "annotations.json", tmp_path / "out" / "images"
    )
    assert order == ["annotations.json", *NAMES]
    assert (
        json.loads((tmp_path / "out" / "annotations.json").read_text())["images"][5]["file_name"] == NAMES[5]
    )


def test_export_files_are_readable_like_files_open_makes(tmp_path: Path) -> None:
    """Exported files get the mode open() gives a new file (not the owner-only mode of a temporary file)."""
    umask = os.umask(0o022)
    os.umask(umask)
    boxes_dataset(tmp_path / "ds", NAMES[:1]).export_yolo(tmp_path / "out")
    for path in (tmp_path / "out" / "data.yaml", tmp_path / "out" / "images" / NAMES[0]):
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_export_refuses_an_image_its_file_name_cannot_hold(tmp_path: Path) -> None:
    """An RGBA image asked for as JPEG (JPEG has no alpha) or a name without an image ending is refused
    naming the sample, not a raw Pillow error, and nothing is written."""
    ds = lc.empty(str(tmp_path / "ds"))
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("file_name", htype="text")
        ds.create_tensor("boxes", htype="bbox")
        ds.create_tensor("categories", htype="class_label", class_names=["a"])
    blank = {"boxes": np.zeros((0, 4)), "categories": np.zeros(0, np.int64)}
    ds.append({"images": np.zeros((4, 4, 4), np.uint8), "file_name": "a.jpg", **blank})
    with pytest.raises(lc.InvalidArgumentError, match=r"file_name of sample 0 \('a.jpg'\): the image cannot"):
        ds.export_coco(tmp_path / "out" / "a.json", tmp_path / "out" / "images", image_format="jpeg")
    ds.file_name[0] = "a.txt"
    with pytest.raises(lc.InvalidArgumentError, match=r"file_name of sample 0 \('a.txt'\) does not end in"):
        ds.export_yolo(tmp_path / "yolo")
    assert _snapshot(tmp_path / "out") == {}
    assert _snapshot(tmp_path / "yolo") == {}
