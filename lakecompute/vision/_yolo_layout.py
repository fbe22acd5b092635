"""Where a YOLO folder's images and label files are: ``data.yaml`` read as untrusted input.

ultralytics' ``data.yaml`` (as its ``check_det_dataset`` reads it, and ``export_yolo`` writes it) says:

* ``names``: the class names, a list or a dict ``0: name, 1: name, ...``.
* ``path``: the dataset root. Relative to the folder holding ``data.yaml`` (ultralytics tries the working
  directory and its own datasets folder; here it is the file's folder, whatever the working directory);
  absent, that folder.
* ``train``, ``val`` (or ``validation``), ``test``: a split's images, relative to the root: a folder
  (every image under it), a ``.txt`` file listing images (one per line, relative to the list's folder), or
  a list of those. A value starting with ``../`` that leads nowhere inside the folder is read without it,
  as ultralytics does for Roboflow's exports (``train: ../train/images`` beside ``data.yaml``).
* ``kpt_shape``, ``flip_idx``, ``kpt_names``: a pose dataset's keypoints (`PoseLayout`): every label row
  is then a box followed by that many keypoints.
* An image's label file: the image's path below the folder with its last ``images`` folder turned into
  ``labels`` and its extension into ``.txt`` (ultralytics' ``img2label_paths``); an image with no
  ``images`` folder in its path has its label file beside it.

Every one of those paths is resolved (symbolic links followed) and must stay inside the folder the caller
named, else `InvalidArgumentError` naming the key (or the list file and line). ``download`` and any other
key are ignored: nothing is downloaded or run. Without ``train``/``val``/``test``, the images are those
under ``images/`` (or ``images/<split>``), as before ``data.yaml`` named splits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from lakecompute.errors import InvalidArgumentError
from lakecompute.ingest import IMAGE_EXTENSIONS, skipped_images
from lakecompute.localfiles import Folder, inside
from lakecompute.vision._common import image_files, require
from lakecompute.vision._yolo_pose import PoseLayout

__all__ = ["SPLIT_KEYS", "YoloLayout"]

#: The keys of ``data.yaml`` that name a split's images (those ultralytics reads).
SPLIT_KEYS = ("train", "val", "test")


@dataclass(frozen=True, slots=True)
class _Source:
    """One place a split's images come from: a folder, or the images a ``.txt`` file lists."""

    top: str
    """The folder the images' names (``file_name``) are relative to: the folder, or the one that holds
    every image of the list."""
    images: tuple[tuple[str, str], ...]
    """Per image ``(its path as found, the file it resolves to)``, both inside the folder given: the path
    as found (a folder's path and the names below it, a listed path resolved) names the image and its
    label file, as ultralytics names them; the resolved one is read."""


@dataclass(frozen=True, slots=True)
class YoloLayout:
    """A YOLO folder read through its ``data.yaml``: class names and the images of the split(s) asked for,
    each with its label file, every path inside the folder.

    Build it with `YoloLayout.read`.
    """

    names: tuple[str, ...]
    """The class names."""
    items: tuple[tuple[str, str, str], ...]
    """Per image ``(image path, label path, file_name)``, ordered by ``file_name``: the image's path
    below the folder of the split read (the common folder of the splits, with ``split=None``)."""
    pose: PoseLayout | None = None
    """The keypoints of each label row (``kpt_shape``, ``flip_idx``, ``kpt_names``), None when rows
    are boxes or polygons."""

    @classmethod
    def read(cls, folder: str, split: str | None) -> YoloLayout:
        """Read ``folder``'s ``data.yaml`` and find the images of ``split`` (None: every split it names).

        Raises:
            InvalidArgumentError: no or unreadable ``data.yaml``, bad ``names`` or pose keys, a path
                that leaves the folder or names nothing usable (the key named), no images, or two images
                with one label file.
        """
        root = Folder.of(folder)
        config_path, config = _read_config(root)
        names = _names(config_path, config)
        pose = PoseLayout.read(config_path, config, len(names))
        sources = _sources(root, config_path, config, split)
        items = _items(root, sources)
        if not items:
            where = ", ".join(repr(s.top) for s in sources)
            raise InvalidArgumentError(f"Found no images under {where}. Check the folder and split.")
        _refuse_shared_labels(root, items)
        return cls(tuple(names), tuple(items), pose)


# -- data.yaml ---------------------------------------------------------------------------------------


def _read_config(root: Folder) -> tuple[str, dict[str, Any]]:
    """``data.yaml`` parsed safely (plain YAML, no Python tags), read only from inside ``root``."""
    yaml = require("yaml", "Reading data.yaml")
    path = root.confine("data.yaml", what=f"data.yaml of {root.given!r}")
    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except FileNotFoundError:
        raise InvalidArgumentError(
            f"No data.yaml in {root.given!r}. A YOLO dataset is a folder with data.yaml (names: [...]), "
            "images/ and labels/."
        ) from None
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:
        # ValueError: not UTF-8; YAMLError: not YAML, or a tag safe_load refuses; RecursionError: too deep.
        detail = " ".join(str(exc).split())  # yaml's messages span lines
        raise InvalidArgumentError(f"Cannot read {path!r} as YAML ({detail:.300}). Fix the file.") from exc
    shown = os.path.join(root.given, "data.yaml")
    return shown, config if isinstance(config, dict) else {}


def _names(path: str, config: dict[str, Any]) -> list[str]:
    """The class names: distinct strings, one or more, from a list or a dict index -> name."""
    names = config.get("names")
    if (
        isinstance(names, dict)
        and {k.__class__ for k in names} <= {int}
        and sorted(names) == [*range(len(names))]
    ):
        names = [names[i] for i in range(len(names))]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidArgumentError(
            f"{path}: expected 'names' as a list of class names or a dict 0: name, 1: name, ... "
            f"Got {names!r:.120}."
        )
    if not names:
        raise InvalidArgumentError(f"{path}: expected at least one class name under 'names'. Got none.")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(
            f"{path}: class names must be distinct (a label is an index into them). Got {twice[0]!r} more "
            "than once. Fix the file."
        )
    return names


def _resolve(root: Folder, base: str, value: str, what: str, hint: str = "") -> str:
    """``value`` (relative to ``base``, or absolute) resolved with links followed, refused unless inside
    ``root``."""
    path = os.path.realpath(os.path.join(base, value))
    if not inside(root.real, path):
        raise InvalidArgumentError(
            f"{what} is {value!r:.200}, which resolves outside the folder {root.given!r} (to {path!r:.200}). "
            "Everything data.yaml names must stay inside the folder given: "
            f"{hint or 'fix the entry, or ingest the folder that holds the data.'}"
        )
    return path


def _dataset_root(root: Folder, config_path: str, config: dict[str, Any]) -> str:
    """The folder ``path`` names (relative to data.yaml's folder), or data.yaml's folder."""
    value = config.get("path")
    if value is None or value == "":
        return root.real
    what = f"{config_path}: 'path'"
    if not isinstance(value, str) or "\x00" in value:
        raise InvalidArgumentError(
            f"{what} must be a folder's path (relative to data.yaml's folder). Got {value!r:.200}."
        )
    moved = (
        "a data.yaml copied or moved with its folder still names the old place (export_yolo writes the "
        "folder's absolute path for ultralytics): set path: . or remove it, and the folder holding data.yaml "
        "is the dataset root."
    )
    base = _resolve(root, root.real, value, what, moved if os.path.isabs(value) else "")
    if not os.path.isdir(base):
        raise InvalidArgumentError(
            f"{what} is {value!r:.200}, which is not a folder ({base!r:.200}); it is read relative to the "
            "folder holding data.yaml. Fix it (path: . names that folder) or remove it."
        )
    return base


def _sources(root: Folder, config_path: str, config: dict[str, Any], split: str | None) -> list[_Source]:
    """Where the images of ``split`` (None: every split data.yaml names) come from."""
    base = _dataset_root(root, config_path, config)
    named = {k: _key(config, k) for k in SPLIT_KEYS if config.get(_key(config, k)) not in (None, "", [])}
    keys = list(named.values()) if split is None else [named[split]] if split in named else []
    if not keys:
        # No split data.yaml names: the images under images/ (or images/<split>) of the dataset root.
        sub = os.path.join(os.path.relpath(base, root.real), "images", *([] if split is None else [split]))
        what = "the images folder" if split is None else f"the images folder of split {split!r}"
        return [_folder_source(root, root.confine(sub, what=what))]
    sources = []
    for key in keys:
        value = config[key]
        entries = value if isinstance(value, list) else [value]
        for n, entry in enumerate(entries):
            what = f"{config_path}: {key!r}" + (f" entry {n}" if isinstance(value, list) else "")
            sources.append(_split_source(root, _split_path(root, base, entry, what), entry, what))
    return sources


def _key(config: dict[str, Any], split: str) -> str:
    """The key of ``split`` in data.yaml: ``validation`` stands for ``val`` when there is no ``val``
    (ultralytics renames it)."""
    return "validation" if split == "val" and "val" not in config and "validation" in config else split


def _split_path(root: Folder, base: str, value: object, what: str) -> str:
    """The resolved path of one ``train``/``val``/``test`` entry (relative to ``base``), inside ``root``."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidArgumentError(
            f"{what} must be a folder of images or a .txt file listing them (relative to the dataset root), "
            f"or a list of those. Got {value!r:.200}."
        )
    escaped: InvalidArgumentError | None = None
    path = ""
    try:
        path = _resolve(root, base, value, what)
        if os.path.exists(path) or not value.startswith("../"):
            return path
    except InvalidArgumentError as exc:
        if not value.startswith("../"):
            raise
        escaped = exc
    # ultralytics reads '../x' as 'x' when '../x' is not there (Roboflow writes 'train: ../train/images').
    try:
        stripped = _resolve(root, base, value[3:], what)
    except InvalidArgumentError:
        stripped = ""
    if stripped and os.path.exists(stripped):
        return stripped
    if escaped is not None:
        raise escaped
    return path


def _split_source(root: Folder, path: str, value: str, what: str) -> _Source:
    """The images at ``path``: a folder's, or those a ``.txt`` file lists."""
    if os.path.isdir(path):
        return _folder_source(root, path)
    if os.path.isfile(path) and path.lower().endswith(".txt"):
        return _list_source(root, path, what)
    found = "is not there" if not os.path.exists(path) else "is neither a folder nor a .txt file"
    raise InvalidArgumentError(
        f"{what} is {value!r:.200}, which {found} ({path!r:.200}); a split is a folder of images or a .txt "
        "file listing them, relative to the dataset root ('path', else the folder holding data.yaml). Fix "
        "the entry."
    )


def _folder_source(root: Folder, folder: str) -> _Source:
    """Every image under ``folder`` (any depth, hidden entries skipped), each confined to ``root``."""
    skipped: list[str] = []
    names = image_files(folder, skipped) if os.path.isdir(folder) else []
    skipped_images(skipped, "ingest_yolo", folder)
    rel = os.path.relpath(folder, root.real)
    images = [
        (os.path.join(folder, n), root.confine(os.path.join(rel, n), what=f"image file {n!r}")) for n in names
    ]
    return _Source(folder, tuple(images))


def _list_source(root: Folder, path: str, what: str) -> _Source:
    """The images a ``.txt`` file lists: one path per line, relative to the file's folder (``./``
    included), each inside ``root`` and an image file that is there."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(
            f"{what} names {path!r}, which cannot be read as UTF-8 text ({exc}). Fix the file."
        ) from exc
    here = os.path.dirname(path)
    images = []
    for n, line in enumerate(lines, start=1):
        entry = line.strip()
        if not entry:
            continue
        where = f"{path} line {n}"
        image = _resolve(root, here, entry, where)
        if os.path.splitext(image)[1].lower() not in IMAGE_EXTENSIONS or not os.path.isfile(image):
            problem = "is not there" if not os.path.exists(image) else "is not an image file"
            raise InvalidArgumentError(
                f"{where}: {entry!r:.200} {problem} (expected one of {sorted(IMAGE_EXTENSIONS)}, "
                "relative to the list's folder). Fix the line."
            )
        images.append((image, image))
    top = os.path.commonpath([os.path.dirname(i) for i, _ in images]) if images else here
    return _Source(top, tuple(images))


# -- images and their label files --------------------------------------------------------------------


def _items(root: Folder, sources: list[_Source]) -> list[tuple[str, str, str]]:
    """``(image, label file, file_name)`` of every image of ``sources`` once (the first path that
    reaches a file names it), ordered by file_name."""
    top = os.path.commonpath([s.top for s in sources])
    seen: dict[str, tuple[str, str, str]] = {}
    for source in sources:
        for found, image in source.images:
            if image not in seen:
                seen[image] = (image, _label_file(root, found), os.path.relpath(found, top))
    return sorted(seen.values(), key=lambda item: item[2])


def _label_file(root: Folder, image: str) -> str:
    """The label file of the image found at ``image``: its path below ``root`` with the last ``images``
    folder turned into ``labels`` and the extension into ``.txt`` (none: beside the image), confined to
    ``root``."""
    parts = os.path.relpath(image, root.real).split(os.sep)
    folders = parts[:-1]
    if "images" in folders:
        last = len(folders) - 1 - folders[::-1].index("images")
        folders[last] = "labels"
    name = os.path.join(*folders, os.path.splitext(parts[-1])[0] + ".txt")
    return root.confine(name, what=f"label file {name!r}")


def _refuse_shared_labels(root: Folder, items: list[tuple[str, str, str]]) -> None:
    """Two images whose label file is the same (``a.jpg`` and ``a.png``) are refused, naming both."""
    owner: dict[str, str] = {}
    for _, label, name in items:
        earlier = owner.setdefault(label, name)
        if earlier != name:
            shared = os.path.relpath(label, root.real)
            raise InvalidArgumentError(
                f"The images {earlier!r} and {name!r} in {root.given!r} share the label file {shared!r} "
                "(YOLO names a label file after its image, without the extension), so its objects cannot be "
                "told apart. Rename one of the images (and give it its own label file), or remove one."
            )
