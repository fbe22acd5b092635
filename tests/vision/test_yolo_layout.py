"""ingest_yolo reads data.yaml's `path`, `train`, `val` and `test` as ultralytics does (folders, .txt lists,
lists of those, Roboflow's '../train/images'), every path confined to the folder given and refused naming
its key; two images sharing one label file are refused naming both."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc

yaml = pytest.importorskip("yaml")

# name -> the label line of that image (unique base names, so any layout can be compared by them)
OBJECTS = {"a": "0 0.5 0.5 0.25 0.125", "b": "1 0.25 0.75 0.5 0.25", "c": "2 0.1 0.2 0.05 0.0625"}
SPLITS = {"train": ["a", "b"], "val": ["c"]}


def _image(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((16 + seed, 20, 3), 30 * seed, np.uint8)).save(path)  # ultralytics wants >= 10 px


def _write(root: Path, images: str, labels: str, config: dict[str, Any]) -> Path:
    """A YOLO folder at ``root``: each split's images at ``images.format(split=...)`` and its labels at
    ``labels.format(split=...)``, and data.yaml holding ``config`` plus the class names."""
    for seed, (split, names) in enumerate(SPLITS.items()):
        for k, name in enumerate(names):
            _image(root / images.format(split=split) / f"{name}.png", seed * 2 + k)
            label = root / labels.format(split=split) / f"{name}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text(OBJECTS[name] + "\n")
    (root / "data.yaml").write_text(yaml.safe_dump({**config, "names": ["car", "person", "dog"]}))
    return root


def _read(root: Path, split: str | None = None) -> dict[str, str]:
    """ingest_yolo of ``root``: file_name -> its one label line, as the dataset holds it."""
    ds = lc.ingest_yolo(root, root.parent / "ds", split=split, overwrite=True, progressbar=False)
    out = {}
    for i, name in enumerate(ds.file_name.text()):
        (cls,), (box,) = ds.labels[i].numpy().tolist(), ds.boxes[i].numpy().tolist()
        out[name] = " ".join([str(cls), *(repr(v) for v in box)])
    return out


def _expected(names: list[str], prefix: str = "") -> dict[str, str]:
    return {f"{prefix}{n}.png": OBJECTS[n] for n in names}


STANDARD = ("images/{split}", "labels/{split}")
UNDER_IMAGES = {"train": "images/train", "val": "images/val"}
LAYOUTS = {
    # export_yolo's (branch det-out): the folder as an absolute path, train and val under images/
    "absolute-path": (*STANDARD, {"path": "<root>", **UNDER_IMAGES}),
    "dot-path": (*STANDARD, {"path": ".", **UNDER_IMAGES}),
    "no-path": (*STANDARD, UNDER_IMAGES),
    "sub-path": ("data/images/{split}", "data/labels/{split}", {"path": "data", **UNDER_IMAGES}),
    "roboflow": ("{split}/images", "{split}/labels", {"train": "../train/images", "val": "../val/images"}),
    "lists": (*STANDARD, {"train": ["images/train"], "val": "val.txt"}),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_splits_data_yaml_names_are_read(tmp_path: Path, layout: str) -> None:
    """Each data.yaml form reads each split's images with their label files: split='train' and 'val'
    alone, and None for all of them (file names below the splits' common folder)."""
    images, labels, config = LAYOUTS[layout]
    config = {k: str(tmp_path / "yolo") if v == "<root>" else v for k, v in config.items()}
    root = _write(tmp_path / "yolo", images, labels, config)
    if layout == "lists":
        (root / "val.txt").write_text("./images/val/c.png\n\n")
    assert _read(root, "train") == _expected(["a", "b"])
    assert _read(root, "val") == _expected(["c"])
    top = {"roboflow": "{split}/images/"}.get(layout, "{split}/")
    everything = {
        **_expected(["a", "b"], top.format(split="train")),
        **_expected(["c"], top.format(split="val")),
    }
    assert _read(root) == everything


def test_one_folder_named_by_two_splits_is_read_once(tmp_path: Path) -> None:
    """train and val naming one folder (export_yolo without a split writes that) give each image once."""
    root = _write(tmp_path / "yolo", "images/{split}", "labels/{split}", {"train": "images", "val": "images"})
    assert _read(root) == {**_expected(["a", "b"], "train/"), **_expected(["c"], "val/")}


def test_validation_stands_for_val(tmp_path: Path) -> None:
    """A data.yaml saying 'validation' instead of 'val' (ultralytics renames it) has its images read as
    the val split, and by split=None."""
    config = {"train": "train/images", "validation": "val/images"}
    root = _write(tmp_path / "yolo", "{split}/images", "{split}/labels", config)
    assert _read(root, "val") == _expected(["c"])
    assert _read(root) == {**_expected(["a", "b"], "train/images/"), **_expected(["c"], "val/images/")}


def test_a_split_data_yaml_does_not_name_is_read_from_images(tmp_path: Path) -> None:
    """split= naming no key of data.yaml reads images/<split>, as when data.yaml names no splits."""
    root = _write(tmp_path / "yolo", "images/{split}", "labels/{split}", {"train": "images/train"})
    assert _read(root, "val") == _expected(["c"])


def test_a_txt_list_reads_the_images_it_names_in_its_folder(tmp_path: Path) -> None:
    """A .txt list names images relative to its own folder (with or without './'), in a sub-folder too."""
    root = _write(tmp_path / "yolo", "images/{split}", "labels/{split}", {"train": "lists/train.txt"})
    (root / "lists").mkdir()
    (root / "lists" / "train.txt").write_text("../images/train/a.png\n./../images/train/b.png\n")
    assert _read(root) == _expected(["a", "b"])


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"path": ".."}, r"data\.yaml: 'path' is '\.\.', which resolves outside the folder"),
        ({"path": "/"}, r"'path' is '/', which resolves outside the folder"),
        ({"train": "../../outside"}, r"'train' is '\.\./\.\./outside', which resolves outside the folder"),
        ({"val": "/etc"}, r"'val' is '/etc', which resolves outside the folder"),
        ({"train": ["images/train", "../../outside"]}, r"'train' entry 1 is '\.\./\.\./outside', which"),
        ({"path": "data", "train": "../../outside"}, r"'train' is '\.\./\.\./outside', which resolves"),
    ],
)  # fmt: skip
def test_data_yaml_paths_out_of_the_folder_are_refused_naming_the_key(
    tmp_path: Path, config: dict[str, Any], message: str
) -> None:
    """`path` and every split entry (a folder, a list entry) that resolves outside the folder given is
    refused naming the key, before anything is read or written; what is outside is never read."""
    (tmp_path / "outside").mkdir()
    _image(tmp_path / "outside" / "x.png", 1)
    root = _write(tmp_path / "yolo", "images/{split}", "labels/{split}", config)
    (root / "data").mkdir()
    with pytest.raises(lc.InvalidArgumentError, match=message) as info:
        lc.ingest_yolo(root, tmp_path / "ds", progressbar=False)
    assert str(root) in str(info.value)
    assert "Everything data.yaml names must stay inside the folder given" in str(info.value)
    assert not os.path.exists(tmp_path / "ds")


def test_an_absolute_path_from_a_moved_folder_is_refused_with_the_fix(tmp_path: Path) -> None:
    """A data.yaml whose absolute `path` names the place its folder was copied from is refused, saying to
    set path: . (ultralytics would read the old place)."""
    old = _write(tmp_path / "old", "images/{split}", "labels/{split}", {"path": str(tmp_path / "old")})
    moved = tmp_path / "moved"
    old.rename(moved)
    old.mkdir()  # the old place exists again, with other content
    with pytest.raises(lc.InvalidArgumentError, match=r"'path' is '.*old'.*set path: \. or remove it"):
        lc.ingest_yolo(moved, tmp_path / "ds", progressbar=False)


def test_links_out_of_the_folder_in_data_yaml_entries_are_refused(tmp_path: Path) -> None:
    """A split folder, a `path` folder or a listed image that is a symbolic link out of the folder is
    refused naming the key (or the list and line)."""
    outside = tmp_path / "outside"
    _image(outside / "images" / "train" / "x.png", 1)
    root = _write(tmp_path / "yolo", "images/{split}", "labels/{split}", {})
    (root / "escape").symlink_to(outside / "images" / "train")
    (root / "elsewhere").symlink_to(outside)
    (root / "list.txt").write_text("images/train/a.png\nescape/x.png\n")
    for config, message in [
        ({"train": "escape"}, r"'train' is 'escape', which resolves outside"),
        ({"path": "elsewhere", "train": "images/train"}, r"'path' is 'elsewhere', which resolves outside"),
        ({"train": "list.txt"}, r"list\.txt line 2 is 'escape/x\.png', which resolves outside"),
    ]:
        (root / "data.yaml").write_text(yaml.safe_dump({**config, "names": ["car", "person", "dog"]}))
        with pytest.raises(lc.InvalidArgumentError, match=message):
            lc.ingest_yolo(root, tmp_path / "ds", progressbar=False)


@pytest.mark.parametrize(
    ("config", "listing", "message"),
    [
        ({"train": "images/nowhere"}, None, r"'train' is 'images/nowhere', which is not there"),
        ({"train": "images/train/a.png"}, None, r"'images/train/a\.png', which is neither a folder nor a"),
        ({"train": 3}, None, r"'train' must be a folder of images or a \.txt file listing them.*Got 3"),
        ({"val": {"x": 1}}, None, r"'val' must be a folder of images"),
        ({"path": 7}, None, r"'path' must be a folder's path.*Got 7"),
        ({"path": "images/train/a.png"}, None, r"'path' is 'images/train/a\.png', which is not a folder"),
        ({"train": "t.txt"}, "images/train/a.png\nzz.png\n", r"t\.txt line 2: 'zz\.png' is not there"),
        ({"train": "t.txt"}, "images/train/a.png\ndata.yaml\n", r"line 2: 'data\.yaml' is not an image"),
        ({"train": "t.txt"}, b"\xff\xfe\x00x", r"'train' names .*t\.txt', which cannot be read as UTF-8"),
        ({"train": "t.txt"}, "\n\n", r"Found no images under"),
        ({"train": "images/empty"}, None, r"Found no images under .*empty"),
    ],
)  # fmt: skip
def test_split_entries_that_name_nothing_usable_are_refused(
    tmp_path: Path, config: dict[str, Any], listing: str | bytes | None, message: str
) -> None:
    """A split that is not there, is not a folder or .txt list, has the wrong type, or lists a line that
    is not an image file is an InvalidArgumentError naming the key (or the list and line)."""
    root = _write(tmp_path / "yolo", "images/{split}", "labels/{split}", config)
    (root / "images" / "empty").mkdir()
    if listing is not None:
        (root / "t.txt").write_bytes(listing if isinstance(listing, bytes) else listing.encode())
    with pytest.raises(lc.InvalidArgumentError, match=message):
        lc.ingest_yolo(root, tmp_path / "ds", progressbar=False)


@pytest.mark.parametrize(
    "config", [{}, {"train": "images/train", "val": "images/val"}], ids=["plain", "splits"]
)
def test_two_images_sharing_a_label_file_are_refused_naming_both(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    """a.png and a.jpg both take labels/train/a.txt: refused naming both images and the label file, before
    any dataset is made."""
    root = _write(tmp_path / "yolo", "images/{split}", "labels/{split}", config)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(root / "images" / "train" / "a.jpg")
    with pytest.raises(lc.InvalidArgumentError, match=r"share the label file") as info:
        lc.ingest_yolo(root, tmp_path / "ds", progressbar=False)
    assert f"The images 'train/a.jpg' and 'train/a.png' in {str(root)!r} share the label file " in str(
        info.value
    )
    assert repr(os.path.join("labels", "train", "a.txt")) in str(info.value)
    assert not os.path.exists(tmp_path / "ds")


def test_label_files_follow_the_last_images_folder_below_the_folder_given(tmp_path: Path) -> None:
    """The label rule is applied below the folder given: a folder given inside an 'images' folder still
    finds its labels inside itself, and split folders without 'images' in their path have labels beside
    the images."""
    root = tmp_path / "images" / "yolo"
    root.mkdir(parents=True)
    _image(root / "train" / "a.png", 0)
    (root / "train" / "a.txt").write_text(OBJECTS["a"] + "\n")
    (root / "data.yaml").write_text(yaml.safe_dump({"train": "train", "names": ["car", "person", "dog"]}))
    assert _read(root) == _expected(["a"])


_ULTRALYTICS = """
import json, os, sys
from ultralytics.data import YOLODataset
from ultralytics.data.utils import check_det_dataset

out = {}
for layout, data_yaml in json.loads(sys.argv[1]).items():
    os.chdir(os.path.dirname(data_yaml))  # where ultralytics reads a relative 'path' as ours does
    data = check_det_dataset(data_yaml, autodownload=False)
    out[layout] = {}
    for split in ("train", "val"):
        dataset = YOLODataset(img_path=data[split], data=data, task="detect", augment=False, imgsz=32)
        out[layout][split] = {
            os.path.basename(label["im_file"]): [float(label["cls"][0][0]), *map(float, label["bboxes"][0])]
            for label in dataset.labels
        }
json.dump(out, sys.stdout)
"""


@pytest.mark.needs("ultralytics")
def test_ultralytics_reads_the_same_images_and_labels(tmp_path: Path) -> None:
    """For every data.yaml form above, ultralytics (check_det_dataset, then YOLODataset per split, run from
    the data.yaml's folder) reads the same images with the same label lines as ingest_yolo."""
    if importlib.util.find_spec("ultralytics") is None:  # not imported here: it patches Pillow's open
        pytest.skip("needs ultralytics, which only the full lane installs (make test-full)")
    ours, yamls = {}, {}
    for layout, (images, labels, config) in LAYOUTS.items():
        root = tmp_path / layout
        config = {k: str(root) if v == "<root>" else v for k, v in config.items()}
        _write(root, images, labels, config)
        if layout == "lists":
            (root / "val.txt").write_text("./images/val/c.png\n")
        ours[layout] = {s: {os.path.basename(k): v for k, v in _read(root, s).items()} for s in SPLITS}
        yamls[layout] = str(root / "data.yaml")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "YOLO_CONFIG_DIR": str(tmp_path / "ultralytics-settings"),
        "YOLO_OFFLINE": "1",
        "YOLO_VERBOSE": "False",
    }
    done = subprocess.run(
        [sys.executable, "-c", _ULTRALYTICS, json.dumps(yamls)],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout)

    def numbers(read: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
        return {split: {k: [float(t) for t in str(v).split()] if isinstance(v, str) else v
                        for k, v in files.items()} for split, files in read.items()}  # fmt: skip

    expected = numbers({"train": _expected(["a", "b"]), "val": _expected(["c"])})
    for layout in LAYOUTS:
        for read in (ours[layout], theirs[layout]):  # ultralytics holds float32: equal to 1e-6
            got = numbers(read)
            assert {s: sorted(f) for s, f in got.items()} == {s: sorted(f) for s, f in expected.items()}, (
                layout
            )
            for split, files in expected.items():
                for name, values in files.items():
                    np.testing.assert_allclose(got[split][name], values, atol=1e-6, err_msg=layout)
