"""Exporting again into a folder: the folder then holds exactly the new export's files. What the previous
export wrote and the new one does not is removed (only that, and only unchanged); a file nobody exported is
left alone, or refused where a reader would take it as part of the export; a kill at any step leaves the
previous export, the new one, or no index file, and the next export cleans up."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import lakecompute as lc
from lakecompute import localfiles
from tests.vision.export_helpers import EXPORTS, boxes_dataset

pytest.importorskip("yaml")


def _export(kind: str, ds: Any, out: Path, split: str | None = None) -> None:
    if kind == "coco":
        ds.export_coco(out / "annotations.json", out / "images")
    else:
        ds.export_yolo(out, split=split)


def _visible(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` a reader sees (hidden ones left out), with ``data.yaml``'s ``path`` line
    made independent of the folder, as relative name -> bytes."""
    files = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            data = p.read_bytes()
            if rel.name == "data.yaml":
                data = data.replace(str(out.resolve()).encode(), b"<folder>")
            files[str(rel)] = data
    return files


def _leftovers(out: Path) -> list[str]:
    """Hidden entries under ``out`` other than the listing: staging folders, temporary files."""
    return sorted(str(p.relative_to(out)) for p in out.rglob(".*") if p.name != localfiles.LISTING)


OLD = [f"img{i}.png" for i in range(6)]
NEW = ["img0.png", "img4.png", "renamed.png", "sub/deeper.png"]


@pytest.mark.parametrize("kind", EXPORTS)
def test_reexport_holds_exactly_the_new_exports_files(kind: str, tmp_path: Path) -> None:
    """A smaller export with other file names into a folder that holds an earlier one leaves exactly what
    the same export into an empty folder writes: the earlier export's other images and label files are
    gone, the folders it alone used too."""
    out = tmp_path / "out"
    _export(kind, boxes_dataset(tmp_path / "old", [*OLD, "gone/x.png"]), out)
    new = boxes_dataset(tmp_path / "new", NEW, shade=50)
    _export(kind, new, tmp_path / "fresh")
    _export(kind, new, out)
    assert _visible(out) == _visible(tmp_path / "fresh")
    assert not (out / "images" / "gone").exists()
    assert _leftovers(out) == []


@pytest.mark.parametrize("kind", EXPORTS)
def test_reexport_leaves_files_it_did_not_write(kind: str, tmp_path: Path) -> None:
    """Files nobody exported — notes, a label file of no image, an image beside a COCO export — survive a
    re-export that removes the earlier export's own files."""
    out = tmp_path / "out"
    _export(kind, boxes_dataset(tmp_path / "old", OLD), out)
    images = out / "images"
    theirs = {images / "README.txt": b"mine", out / "labels" / "extra.txt": b"0 0.5 0.5 0.1 0.1\n"}
    if kind == "coco":
        theirs[images / "photo.png"] = b"not an export's"
    for path, data in theirs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    _export(kind, boxes_dataset(tmp_path / "new", NEW[:2], shade=50), out)
    assert {p: p.read_bytes() for p in theirs} == theirs
    assert not (images / "img1.png").exists()


def test_reexport_yolo_refuses_an_image_it_did_not_write(tmp_path: Path) -> None:
    """An image in the split's folder that no export wrote (ultralytics would train on it as a background
    image) is refused, naming it, and the folder is left as it was."""
    out = tmp_path / "out"
    _export("yolo", boxes_dataset(tmp_path / "old", OLD), out, split="train")
    (out / "images" / "train" / "stray").mkdir()
    (out / "images" / "train" / "stray" / "cat.JPG").write_bytes(b"someone's photo")
    before = _visible(out)
    listing = (out / localfiles.LISTING).read_bytes()
    with pytest.raises(lc.InvalidArgumentError, match=r"1 file\(s\).*'images/train/stray/cat\.JPG'") as info:
        _export("yolo", boxes_dataset(tmp_path / "new", NEW, shade=50), out, split="train")
    assert "ultralytics would read as images of split 'train'" in str(info.value)
    assert _visible(out) == before
    assert (out / localfiles.LISTING).read_bytes() == listing
    assert _leftovers(out) == []


@pytest.mark.parametrize("kind", EXPORTS)
def test_reexport_keeps_a_file_changed_since_it_was_exported(kind: str, tmp_path: Path) -> None:
    """A file the earlier export wrote and someone changed since is theirs now: never removed. A changed
    label file stays beside the new export; a changed image stays too, and in a YOLO split's folder it is
    refused like any image the export did not write."""
    out = tmp_path / "out"
    _export(kind, boxes_dataset(tmp_path / "old", OLD), out)
    changed = (
        out / ("labels" if kind == "yolo" else "images") / ("img1.txt" if kind == "yolo" else "img1.png")
    )
    changed.write_bytes(b"edited by hand")
    _export(kind, boxes_dataset(tmp_path / "new", NEW[:2], shade=50), out)
    assert changed.read_bytes() == b"edited by hand"
    assert not (out / "images" / "img2.png").exists()  # unchanged: removed
    if kind == "yolo":
        (out / "images" / "img0.png").write_bytes(b"edited image")
        with pytest.raises(lc.InvalidArgumentError, match=r"'images/img0\.png'"):
            _export(kind, boxes_dataset(tmp_path / "newer", ["other.png"]), out)
        assert (out / "images" / "img0.png").read_bytes() == b"edited image"


def test_reexport_of_a_split_keeps_the_other_splits(tmp_path: Path) -> None:
    """Re-exporting one split replaces that split's files only: the other split's stay and data.yaml
    names both; an export without a split then replaces every split (its data.yaml reads all of
    images/)."""
    yaml = pytest.importorskip("yaml")
    out = tmp_path / "out"
    _export("yolo", boxes_dataset(tmp_path / "train", OLD), out, split="train")
    _export("yolo", boxes_dataset(tmp_path / "val", ["v0.png", "v1.png"], shade=9), out, split="val")
    val = {k: v for k, v in _visible(out).items() if "/val/" in k}
    _export("yolo", boxes_dataset(tmp_path / "train2", NEW[:2], shade=50), out, split="train")
    assert sorted(os.listdir(out / "images" / "train")) == ["img0.png", "img4.png"]
    assert sorted(os.listdir(out / "labels" / "train")) == ["img0.txt", "img4.txt"]
    assert {k: v for k, v in _visible(out).items() if "/val/" in k} == val
    config = yaml.safe_load((out / "data.yaml").read_text())
    assert (config["train"], config["val"]) == ("images/train", "images/val")
    _export("yolo", boxes_dataset(tmp_path / "all", ["a.png"]), out)
    assert sorted(_visible(out)) == ["data.yaml", "images/a.png", "labels/a.txt"]


def test_reexport_with_a_split_replaces_an_export_without_one(tmp_path: Path) -> None:
    """An export without a split, followed by one of split 'train': the first one's files are gone (its
    data.yaml is replaced by one that no longer reads them)."""
    out = tmp_path / "out"
    _export("yolo", boxes_dataset(tmp_path / "all", ["a.png", "val/b.png"]), out)
    _export("yolo", boxes_dataset(tmp_path / "train", ["c.png"]), out, split="train")
    assert sorted(_visible(out)) == ["data.yaml", "images/train/c.png", "labels/train/c.txt"]


@pytest.mark.parametrize("kind", EXPORTS)
@pytest.mark.parametrize(
    "names", [["A.png", "a.png"], ["sub/x.png", "SUB/x.png"], ["caf\u00e9.png", "cafe\u0301.png"]]
)
def test_export_refuses_names_that_differ_only_in_case(kind: str, names: list[str], tmp_path: Path) -> None:
    """Two file names that differ only in letter case (or Unicode form) are one file on macOS and Windows:
    refused naming both samples, and nothing is written."""
    ds = boxes_dataset(tmp_path / "ds", ["other.png", *names])
    with pytest.raises(
        lc.InvalidArgumentError, match=r"file_name of sample 2 .*file_name of sample 1"
    ) as info:
        _export(kind, ds, tmp_path / "out")
    assert "differ only in letter case" in str(info.value)
    assert _visible(tmp_path / "out") == {}


def test_export_yolo_refuses_label_files_that_differ_only_in_case(tmp_path: Path) -> None:
    """'a.png' and 'A.bmp' have the label files 'a.txt' and 'A.txt', one file on a case-insensitive
    filesystem: refused, naming both samples' label files. (Images stored as arrays keep both names: a PNG
    tensor would write 'A.bmp' as its stored PNG, 'A.png', refused as the image 'a.png' first.)"""
    ds = boxes_dataset(tmp_path / "ds", ["a.png", "A.bmp"], sample_compression=None)
    with pytest.raises(
        lc.InvalidArgumentError,
        match=r"the label file of file_name of sample 1 .*label file of file_name of sample 0",
    ):
        ds.export_yolo(tmp_path / "out")


# -- hostile listings --------------------------------------------------------------------------------


def _listing(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / localfiles.LISTING).read_text())
    return doc


@pytest.mark.parametrize("entry", ["../outside.png", "/etc/passwd", "images/../../outside.png", "", "a//b"])
def test_a_listing_naming_files_outside_the_folder_is_refused(entry: str, tmp_path: Path) -> None:
    """A listing edited to name a path outside the folder (or not a plain relative path) is refused as
    not ours, naming the listing, and nothing is removed anywhere."""
    out = tmp_path / "out"
    _export("yolo", boxes_dataset(tmp_path / "old", OLD[:2]), out)
    (tmp_path / "outside.png").write_bytes(b"keep")
    doc = _listing(out)
    digest = doc["scopes"][""]["files"]["images/img0.png"]
    doc["scopes"][""]["files"][entry] = digest
    (out / localfiles.LISTING).write_text(json.dumps(doc))
    before = _visible(out)
    with pytest.raises(lc.InvalidArgumentError, match=r"\.lakecompute-export\.json' is not a listing"):
        _export("yolo", boxes_dataset(tmp_path / "new", ["z.png"]), out)
    assert _visible(out) == before
    assert (tmp_path / "outside.png").read_bytes() == b"keep"


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"format": "lakecompute-export", "version": 2}', b"\xff"])
def test_a_damaged_listing_is_refused(content: bytes, tmp_path: Path) -> None:
    """A listing that is not one lakecompute wrote is an InvalidArgumentError saying to delete it; once
    deleted, the export runs (and, not knowing the earlier files, refuses the images it did not write)."""
    out = tmp_path / "out"
    _export("yolo", boxes_dataset(tmp_path / "old", OLD[:2]), out)
    (out / localfiles.LISTING).write_bytes(content)
    with pytest.raises(lc.InvalidArgumentError, match=r"Delete it"):
        _export("yolo", boxes_dataset(tmp_path / "new", OLD[:2]), out)
    (out / localfiles.LISTING).unlink()
    with pytest.raises(lc.InvalidArgumentError, match=r"'images/img1\.png'"):
        _export("yolo", boxes_dataset(tmp_path / "new", OLD[:1]), out)
    _export("yolo", boxes_dataset(tmp_path / "newer", OLD[:2]), out)
    assert sorted(_visible(out)) == [
        "data.yaml",
        "images/img0.png",
        "images/img1.png",
        "labels/img0.txt",
        "labels/img1.txt",
    ]


def test_a_listing_entry_through_a_link_is_never_removed(tmp_path: Path) -> None:
    """A listed file reached through a symbolic link (here, to a folder outside) is not removed even when
    its content is what the listing says: only files reached without links are the export's."""
    out = tmp_path / "out"
    _export("coco", boxes_dataset(tmp_path / "old", OLD[:2]), out)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(out / "images" / "img1.png", outside / "img1.png")
    (out / "images" / "link").symlink_to(outside)
    doc = _listing(out / "images")
    scope = next(iter(doc["scopes"].values()))
    scope["files"]["link/img1.png"] = scope["files"]["img1.png"]
    (out / "images" / localfiles.LISTING).write_text(json.dumps(doc))
    _export("coco", boxes_dataset(tmp_path / "new", OLD[:1]), out)
    assert (outside / "img1.png").exists()
    assert not (out / "images" / "img1.png").exists()


# -- a kill at every step ----------------------------------------------------------------------------

_CHILD = """
import os, sys
kind, src, out, ready, stop = sys.argv[1:6]
stop = int(stop)
calls = [0]

def paused(real, target):
    def call(*args, **kwargs):
        path = os.path.abspath(os.fspath(args[target]))  # where the call changes the folder
        if path.startswith(out + os.sep) and ".lakecompute-export-" not in path:
            if calls[0] == stop:  # say so, then wait (on stdin) to be killed
                open(ready, "w").close()
                sys.stdin.read()
            calls[0] += 1
        return real(*args, **kwargs)
    return call

os.replace, os.remove, os.rmdir = paused(os.replace, 1), paused(os.remove, 0), paused(os.rmdir, 0)
import lakecompute as lc
ds = lc.load(src)
if kind == "coco":
    ds.export_coco(os.path.join(out, "annotations.json"), os.path.join(out, "images"))
else:
    ds.export_yolo(out)
print(calls[0])
"""


def _child(kind: str, src: Path, out: Path, stop: int, ready: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, kind, str(src), str(out), str(ready), str(stop)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _kill_when_ready(proc: subprocess.Popen[bytes], ready: Path) -> None:
    deadline = time.monotonic() + 120
    try:
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the child never reached the step"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _index(kind: str, out: Path) -> Path:
    return out / ("annotations.json" if kind == "coco" else "data.yaml")


@pytest.mark.slow
@pytest.mark.parametrize("kind", EXPORTS)
def test_reexport_killed_at_any_step(kind: str, tmp_path: Path) -> None:
    """A re-export (one image rewritten with other pixels, one added, two of the earlier export's left
    behind) killed with SIGKILL before each of its renames and removals in the folder leaves the previous
    export (index and files byte for byte), the new one (whose index names another class), or no index
    file — never an index beside files it does not describe; the next export into the folder then leaves
    exactly its own files."""
    out, pristine = tmp_path / "out", tmp_path / "pristine"
    _export(kind, boxes_dataset(tmp_path / "old", ["a.png", "b.png", "c/c.png"]), out)
    shutil.copytree(out, pristine, symlinks=True)
    old, old_index = _visible(out), _index(kind, out).read_bytes()
    new_ds = boxes_dataset(tmp_path / "new", ["a.png", "d.png"], shade=100, classes=("cat", "dog", "bird"))
    _export(kind, new_ds, tmp_path / "fresh")
    new = _visible(tmp_path / "fresh")
    # A run that is never stopped counts the steps (and is the new export: its index is the one to expect).
    proc = _child(kind, tmp_path / "new", out, -1, tmp_path / "never")
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr.decode()[-3000:]
    steps = int(stdout.decode().split()[-1])
    assert _visible(out) == new
    new_index = _index(kind, out).read_bytes()
    assert steps >= (8 if kind == "coco" else 12)
    seen = set()
    for stop in range(steps):
        shutil.rmtree(out)
        shutil.copytree(pristine, out, symlinks=True)
        ready = tmp_path / f"ready-{stop}"
        _kill_when_ready(_child(kind, tmp_path / "new", out, stop, ready), ready)
        seen.add(_export_left(_index(kind, out), stop, (old_index, old), (new_index, new)))
        _next_export_holds_its_own_files(kind, tmp_path, out, stop)
    assert seen == {"old", "no index", "new"}


def _export_left(
    index: Path, stop: int, old: tuple[bytes, dict[str, bytes]], new: tuple[bytes, dict[str, bytes]]
) -> str:
    """Which export an export killed before step ``stop`` left (``old``, ``new``: each one's index bytes
    and visible files): ``"old"``, ``"new"`` or ``"no index"``; never an index beside other files."""
    out = index.parent
    if not index.exists():
        return "no index"
    if index.read_bytes() == old[0]:
        assert _visible(out) == old[1], f"killed before step {stop}: the old index beside other files"
        return "old"
    assert index.read_bytes() == new[0], f"killed before step {stop}: an index that is neither"
    assert _visible(out) == new[1], f"killed before step {stop}: the new index beside other files"
    return "new"


def _next_export_holds_its_own_files(kind: str, tmp_path: Path, out: Path, stop: int) -> None:
    """The next export into ``out`` leaves exactly its own files, as into a fresh folder."""
    third = boxes_dataset(tmp_path / "third", ["e.png"], shade=200)
    _export(kind, third, out)
    _export(kind, third, tmp_path / "third-fresh")
    assert _visible(out) == _visible(tmp_path / "third-fresh"), f"killed before step {stop}"
    assert _leftovers(out) == [], f"killed before step {stop}"
    shutil.rmtree(tmp_path / "third-fresh")


def test_coco_exports_with_other_annotations_files_share_an_images_folder(tmp_path: Path) -> None:
    """Two COCO exports into one images folder with two annotations files (train.json, val.json) keep each
    other's images; exporting train.json again replaces only what train.json's export wrote."""
    out = tmp_path / "out"
    boxes_dataset(tmp_path / "train", ["t0.png", "t1.png"]).export_coco(out / "train.json", out / "images")
    boxes_dataset(tmp_path / "val", ["v0.png"]).export_coco(out / "val.json", out / "images")
    boxes_dataset(tmp_path / "train2", ["t1.png"], shade=7).export_coco(out / "train.json", out / "images")
    assert sorted(os.listdir(out / "images")) == [localfiles.LISTING, "t1.png", "v0.png"]


def test_reexport_never_removes_a_file_that_was_there_before_the_first_export(tmp_path: Path) -> None:
    """Exporting COCO back into the folder its images came from overwrites them (as any copy does) but
    does not make them the export's: a smaller export with the same annotations file later leaves every
    one of them, and removes only the images the exports created."""
    images = tmp_path / "images"
    images.mkdir()
    originals = {name: bytes([i]) * 10 for i, name in enumerate(["img0.png", "img1.png", "img2.png"])}
    for name, data in originals.items():
        (images / name).write_bytes(data)
    boxes_dataset(tmp_path / "ds", ["img0.png", "img1.png", "new.png"]).export_coco(
        tmp_path / "a.json", images
    )
    boxes_dataset(tmp_path / "small", ["img0.png"]).export_coco(tmp_path / "a.json", images)
    assert sorted(os.listdir(images)) == [localfiles.LISTING, "img0.png", "img1.png", "img2.png"]
