"""ingest_coco treats the annotations file as untrusted: hostile paths, duplicate ids, malformed annotations,
declared sizes and RLE bombs all end in a library error naming the file, the entry and the rule."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc

pytest.importorskip("pycocotools")

# pycocotools 2.0 builds arrays through an __array__ without numpy 2's copy keyword; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept:DeprecationWarning")

SQUARE = [[2.0, 3.0, 12.0, 3.0, 12.0, 8.0, 2.0, 8.0]]


def base_document() -> dict[str, Any]:
    """Two images (20 x 30 and 16 x 16 PNGs), two categories (one with keypoints), three annotations."""
    return {
        "images": [
            {"id": 1, "file_name": "a.png", "height": 20, "width": 30},
            {"id": 2, "file_name": "b.png", "height": 16, "width": 16},
        ],
        "categories": [
            {"id": 1, "name": "thing"},
            {"id": 2, "name": "person", "keypoints": ["head", "foot"], "skeleton": [[1, 2]]},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 3, 10, 5], "area": 50.0, "iscrowd": 0,
             "segmentation": SQUARE},
            {"id": 2, "image_id": 1, "category_id": 2, "bbox": [1, 1, 4, 4], "area": 16.0, "iscrowd": 0,
             "segmentation": [[1, 1, 5, 1, 5, 5]], "keypoints": [2, 2, 2, 3, 4, 1], "num_keypoints": 2},
            {"id": 3, "image_id": 2, "category_id": 1, "bbox": [0, 0, 4, 4], "area": 16.0, "iscrowd": 0,
             "segmentation": [[0, 0, 4, 0, 4, 4]]},
        ],
    }  # fmt: skip


def write_folder(root: Path, doc: dict[str, Any], sizes: dict[str, tuple[int, int]] | None = None) -> Path:
    """Write ``root/images/<name>`` PNGs of ``sizes`` (default a.png 20 x 30, b.png 16 x 16) and
    ``root/instances.json`` holding ``doc``; return the JSON's path."""
    sizes = {"a.png": (20, 30), "b.png": (16, 16)} if sizes is None else sizes
    for seed, (name, size) in enumerate(sizes.items()):
        path = root / "images" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path)
    annotations = root / "instances.json"
    annotations.write_text(json.dumps(doc))
    return annotations


def ingest(root: Path, **options: Any) -> lc.Dataset:
    """ingest_coco of ``root``'s folder into ``root/ds`` without a progress bar."""
    return lc.ingest_coco(root / "images", root / "instances.json", root / "ds", progressbar=False, **options)


def test_base_document_ingests(tmp_path: Path) -> None:
    """The document the other tests break is itself accepted (so each refusal is the one change's)."""
    write_folder(tmp_path, base_document())
    ds = ingest(tmp_path)
    assert ds.annotation_ids.numpy(aslist=True)[0].tolist() == [1, 2]
    assert ds.masks[0].numpy().shape == (20, 30, 2)
    assert ds.keypoints[0].numpy()[1].tolist() == [[2, 2, 2], [3, 4, 1]]


# -- paths ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink-file", "symlink-folder"])
def test_ingest_coco_refuses_file_names_outside_the_images_folder(tmp_path: Path, kind: str) -> None:
    """A file_name that resolves outside the images folder (``..``, absolute, or through a symbolic link)
    is refused naming the file and entry; the outside file is never read into a dataset."""
    secret = tmp_path / "secret" / "x.png"
    secret.parent.mkdir()
    Image.fromarray(np.full((20, 30, 3), 7, np.uint8)).save(secret)
    root = tmp_path / "coco"
    doc = base_document()
    write_folder(root, doc)
    name = {
        "dotdot": "../../secret/x.png",
        "absolute": str(secret),
        "symlink-file": "link.png",
        "symlink-folder": "linked/x.png",
    }[kind]
    if kind == "symlink-file":
        (root / "images" / "link.png").symlink_to(secret)
    if kind == "symlink-folder":
        (root / "images" / "linked").symlink_to(secret.parent)
    doc["images"][0]["file_name"] = name
    (root / "instances.json").write_text(json.dumps(doc))
    with pytest.raises(lc.InvalidArgumentError) as info:
        ingest(root)
    message = str(info.value)
    assert "file_name of image 1" in message
    assert str(root / "instances.json") in message
    assert ("absolute path" if kind == "absolute" else "resolves outside the folder") in message
    assert not lc.exists(str(root / "ds"))


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("where", ["json-folder", "json-file", "above-json"])
def test_ingest_coco_refuses_dest_holding_its_annotations(
    tmp_path: Path, where: str, overwrite: bool
) -> None:
    """A destination that is the annotations file or a folder holding it is refused before anything is
    deleted: every file beside the JSON survives."""
    root = tmp_path / "data"
    write_folder(root, base_document())
    (root / "notes.txt").write_text("keep me")
    before = sorted((p, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())
    dest = {"json-folder": root, "json-file": root / "instances.json", "above-json": tmp_path}[where]
    with pytest.raises(lc.InvalidArgumentError, match=r"annotations file .*Choose a destination outside"):
        lc.ingest_coco(root / "images", root / "instances.json", dest, overwrite=overwrite, progressbar=False)
    assert sorted((p, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()) == before


# -- the document: duplicates and ids ------------------------------------------------------------------


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set ``doc[a][i][b]`` (``path`` "a.i.b") to ``value``; ``...`` deletes the key."""
    *head, last = path.split(".")
    node: Any = doc
    for key in head:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is ...:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value


DOCUMENT_CASES = [
    ("images.1.id", 1, r"image id 1 appears twice \(images #0 and #1\)"),
    ("categories.1.id", 1, r"category id 1 appears twice"),
    ("images.1.file_name", "a.png", r"file_name 'a.png' .* images 1 and 2"),
    ("images.1.file_name", "./a.png", r"file_name './a.png' .* images 1 and 2"),
    ("annotations.1.id", 1, r"annotation id 1 appears twice"),
    ("images.0.id", "1", r"id of image #0 .*expected an integer.*Got str: '1'"),
    ("images.0.id", 1.0, r"id of image #0 .*expected an integer.*Got float: 1.0"),
    ("images.0.id", True, r"id of image #0 .*expected an integer.*Got bool: True"),
    ("images.0.id", 2**70, r"id of image #0 .*int64"),
    ("categories.0.id", "1", r"id of category #0 .*expected an integer"),
    ("annotations.0.id", 1.5, r"id of annotation #0 .*expected an integer"),
    ("annotations.0.id", ..., r"id of annotation #0 .*expected an integer.*Got NoneType"),
    ("annotations.0.image_id", "1", r"image_id of annotation 1 .*expected an integer"),
    ("annotations.0.image_id", ..., r"image_id of annotation 1 .*expected an integer"),
    ("annotations.0.image_id", 9, r"annotation 1 names image_id 9, which is not among the images"),
    ("images.0.height", 0, r"height of image 1 .*a positive integer"),
    ("images.0.width", "30", r"width of image 1 .*a positive integer"),
    ("images.0.file_name", 5, r"file_name of image 1 .*must be a non-empty relative path"),
    ("images.0", [1, 2], r"image #0 .*expected a JSON object"),
    ("annotations.0", "x", r"annotation #0 .*expected a JSON object"),
    ("categories.0", None, r"category #0 .*expected a JSON object"),
    ("categories.0.name", 3, r"distinct names"),
    ("categories.1.keypoints", "head", r"keypoints of category 2 .*list of distinct names"),
    ("categories.1.keypoints", ["head", "head"], r"keypoints of category 2 .*list of distinct names"),
    ("categories.1.skeleton", [[1, 3]], r"skeleton of category 2 .*pairs of keypoint numbers in 1..2"),
]


@pytest.mark.parametrize(("path", "value", "message"), DOCUMENT_CASES)
def test_ingest_coco_refuses_a_broken_document(tmp_path: Path, path: str, value: Any, message: str) -> None:
    """Duplicate image, category and annotation ids, duplicate file names (after resolution) and ids that
    are not integers are refused before anything is created, naming the file, the entry and the rule."""
    doc = base_document()
    _set(doc, path, value)
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidArgumentError, match=message) as info:
        ingest(tmp_path)
    assert str(tmp_path / "instances.json") in str(info.value)
    assert not isinstance(info.value, lc.InvalidSampleError)
    assert not lc.exists(str(tmp_path / "ds"))


def test_ingest_coco_refuses_categories_with_different_keypoint_schemas(tmp_path: Path) -> None:
    """Two categories naming different keypoints are refused (the keypoints tensor has one schema),
    naming both categories."""
    doc = base_document()
    doc["categories"][0].update(keypoints=["tail"], skeleton=[])
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidArgumentError, match=r"categories 1 and 2 name different keypoints") as info:
        ingest(tmp_path)
    assert "['tail']" in str(info.value)
    assert "['head', 'foot']" in str(info.value)


# -- annotations: the entry and the rule, on the annotation's tensor -------------------------------------

RLE_OK = {"size": [20, 30], "counts": [0, 600]}

ANNOTATION_CASES = [
    ("bbox", [1, 2, 3, 4, 5, 6, 7, 8], "boxes", r"expected 'bbox' as 4 numbers \[x, y, width, height\]"),
    ("bbox", [1, 2, 3], "boxes", r"expected 'bbox' as 4 numbers"),
    ("bbox", ..., "boxes", r"expected 'bbox' as 4 numbers.*Got None"),
    ("bbox", [1, 2, "3", 4], "boxes", r"expected 'bbox' as 4 numbers"),
    ("bbox", [1, 2, True, 4], "boxes", r"expected 'bbox' as 4 numbers"),
    ("bbox", [1, 2, -3, 4], "boxes", r"width >= 0 and height >= 0"),
    ("category_id", 9, "categories", r"category_id 9 is not among the file's categories"),
    ("category_id", "1", "categories", r"category_id.*expected an integer"),
    ("category_id", True, "categories", r"category_id.*expected an integer"),
    ("iscrowd", 300, "iscrowd", r"iscrowd.*0 or 1. Got 300"),
    ("iscrowd", 2, "iscrowd", r"iscrowd.*0 or 1. Got 2"),
    ("iscrowd", "0", "iscrowd", r"iscrowd.*0 or 1. Got '0'"),
    ("area", "big", "areas", r"area.*a number >= 0"),
    ("area", -1, "areas", r"area.*a number >= 0"),
    ("segmentation", "abc", "polygons", r"segmentation.*a list of polygons or an RLE dict. Got str"),
    ("segmentation", 7, "polygons", r"segmentation.*a list of polygons or an RLE dict. Got int"),
    ("segmentation", [[1, 2, 3, 4]], "polygons", r"polygon 0.*at least 3 points"),
    ("segmentation", [[1, 2, 3, 4, 5]], "polygons", r"polygon 0.*an even count"),
    ("segmentation", [1, 2, 3, 4, 5, 6], "polygons", r"polygon 0.*a list of numbers"),
    ("segmentation", [[1, 2, 3, "4", 5, 6]], "polygons", r"polygon 0.*numbers"),
    ("segmentation", [[-40, 0, 10, 10, 5, 5]], "polygons", r"polygon 0.*reaches far beyond the 20 x 30"),
    ("segmentation", [[0, 0, 60, 40] * 10], "polygons", r"polygon 0.*an outline no longer than the image"),
    ("segmentation", {"size": [20, 30]}, "rles", r"RLE.*'counts'"),
    ("segmentation", {"counts": [600], "size": [20]}, "rles", r"RLE.*'size' as \[height, width\]"),
    ("segmentation", {"counts": [0, "600"], "size": [20, 30]}, "rles", r"counts.*integers >= 0"),
    ("segmentation", {"counts": [0, -5, 605], "size": [20, 30]}, "rles", r"counts.*integers >= 0"),
    ("segmentation", {"counts": [0, 599], "size": [20, 30]}, "rles", r"counts sum to 599.*20 x 30 = 600"),
    ("segmentation", {"counts": "0\x00", "size": [20, 30]}, "rles", r"compressed RLE counts"),
    ("segmentation", {"counts": 5, "size": [20, 30]}, "rles", r"'counts' as a list of run lengths or"),
    ("segmentation", {"counts": [0, 1200], "size": [40, 30]}, "rles", r"RLE of size 40 x 30.*20 x 30"),
    ("keypoints", [1, 2, 2, 3], "keypoints", r"keypoints.*6 numbers \(2 keypoints of category 2"),
    ("keypoints", [1, 2, 2, 3, 4, 1, 5, 5, 2], "keypoints", r"keypoints.*6 numbers"),
    ("keypoints", [1, 2, 7, 3, 4, 1], "keypoints", r"visibility.*0, 1 or 2. Got 7"),
    ("keypoints", [1, 2, 2, "x", 4, 1], "keypoints", r"keypoints.*numbers"),
    ("num_keypoints", -1, "num_keypoints", r"num_keypoints.*an integer >= 0"),
]


@pytest.mark.parametrize(("key", "value", "tensor", "message"), ANNOTATION_CASES)
def test_ingest_coco_blames_a_bad_annotation_on_its_tensor(
    tmp_path: Path, key: str, value: Any, tensor: str, message: str
) -> None:
    """A malformed annotation is an InvalidSampleError on the annotation's tensor naming the annotations
    file, the annotation, its image and the rule — never split, dropped, or blamed on the image file."""
    doc = base_document()
    _set(doc, f"annotations.1.{key}", value)
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidSampleError, match=message) as info:
        ingest(tmp_path)
    text = str(info.value)
    assert info.value.tensor == tensor
    assert f"annotation 2 of image 1 ('a.png') in {str(tmp_path / 'instances.json')!r}" in text
    assert "cannot read image file" not in text
    assert "skip_errors=True" in text
    assert not lc.exists(str(tmp_path / "ds"))


def test_a_number_beyond_float64_is_refused(tmp_path: Path) -> None:
    """JSON's 1e400 (read as infinity) in a box is refused as not finite, on the boxes tensor."""
    write_folder(tmp_path, base_document())
    path = tmp_path / "instances.json"
    text = path.read_text()
    path.write_text(text.replace('"bbox": [1, 1, 4, 4]', '"bbox": [1, 1, 1e400, 4]'))
    with pytest.raises(lc.InvalidSampleError, match=r"finite.*Got \[1, 1, inf, 4\]") as info:
        ingest(tmp_path)
    assert info.value.tensor == "boxes"


def test_keypoints_on_a_category_without_keypoints_are_refused(tmp_path: Path) -> None:
    """Keypoints on an annotation whose category names none are refused (they would be stored against
    another category's names)."""
    doc = base_document()
    doc["annotations"][0]["keypoints"] = [1, 1, 2, 2, 2, 2]
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidSampleError, match=r"category 1 names no keypoints") as info:
        ingest(tmp_path)
    assert info.value.tensor == "keypoints"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_bad_annotation_is_blamed_alike_on_workers(tmp_path: Path, num_workers: int) -> None:
    """On worker processes too, a bad annotation arrives as the InvalidSampleError on its tensor, naming
    the annotation (not the image file)."""
    doc = base_document()
    doc["annotations"][2]["bbox"] = [1, 2, 3, 4, 5, 6, 7, 8]
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidSampleError, match=r"annotation 3 of image 2 \('b.png'\)") as info:
        ingest(tmp_path, num_workers=num_workers)
    assert info.value.tensor == "boxes"
    assert isinstance(info.value.__cause__, lc.TransformError)
    assert not lc.exists(str(tmp_path / "ds"))


def test_skip_errors_skips_the_image_with_the_real_reason(tmp_path: Path) -> None:
    """skip_errors=True skips the image whose annotation is malformed, keeps the others, and warns with the
    annotation's own reason (not 'unreadable file')."""
    doc = base_document()
    doc["annotations"][1]["bbox"] = [1, 2, 3]
    write_folder(tmp_path, doc)
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 1 of 2 images") as record:
        ds = ingest(tmp_path, skip_errors=True)
    message = str(record[0].message)
    assert "annotation 2 of image 1 ('a.png')" in message
    assert "expected 'bbox' as 4 numbers" in message
    assert ds.image_id.numpy().tolist() == [2]
    assert ds.annotation_ids.numpy(aslist=True)[0].tolist() == [3]


# -- declared sizes ------------------------------------------------------------------------------------


def test_declared_image_size_must_match_the_file(tmp_path: Path) -> None:
    """An image entry declaring another size than its file decodes to is refused, naming both sizes."""
    doc = base_document()
    doc["images"][0].update(height=50, width=70)
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidSampleError, match=r"declares 50 x 70 \(height x width\)") as info:
        ingest(tmp_path)
    assert "the file is 20 x 30" in str(info.value)
    assert "cannot read image file" not in str(info.value)


def test_masks_take_the_decoded_image_size(tmp_path: Path) -> None:
    """Without height and width in the file, masks are the decoded image's size."""
    doc = base_document()
    for image in doc["images"]:
        del image["height"], image["width"]
    write_folder(tmp_path, doc)
    ds = ingest(tmp_path)
    assert ds.masks[0].numpy().shape == (20, 30, 2)
    assert ds.masks[1].numpy().shape == (16, 16, 1)


def _compressed(counts: list[int], height: int, width: int) -> str:
    """pycocotools' compressed counts string for uncompressed ``counts`` (no mask is allocated)."""
    from pycocotools import mask as mask_utils

    rle = mask_utils.frPyObjects({"size": [height, width], "counts": counts}, height, width)
    return str(rle["counts"].decode("ascii"))


@pytest.mark.parametrize("masks", [True, False])
@pytest.mark.parametrize("crowd", [0, 1])
@pytest.mark.parametrize("compressed", [True, False])
def test_an_rle_of_another_size_is_refused(tmp_path: Path, masks: bool, crowd: int, compressed: bool) -> None:
    """An RLE (crowd or not, compressed or not) whose size is not the image's is refused, with or
    without masks: its pixels do not fit the image."""
    counts = [0, 40 * 30]
    doc = base_document()
    seg = {"size": [40, 30], "counts": _compressed(counts, 40, 30) if compressed else counts}
    doc["annotations"][1].update(segmentation=seg, iscrowd=crowd)
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidSampleError, match=r"RLE of size 40 x 30.*the image is 20 x 30") as info:
        ingest(tmp_path, masks=masks)
    assert info.value.tensor == "rles"


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ([0, 599], r"counts sum to 599"),
        ([10, 20, 30], r"counts sum to 60"),
        ([2**32 - 1, 2, 599], r"counts sum to"),
    ],
)
def test_compressed_counts_must_sum_to_the_image(tmp_path: Path, counts: list[int], message: str) -> None:
    """A compressed RLE whose runs do not cover the image exactly is refused (decoding it would write
    past the mask, or leave it short)."""
    doc = base_document()
    doc["annotations"][1]["segmentation"] = {"size": [20, 30], "counts": _compressed(counts, 20, 30)}
    write_folder(tmp_path, doc)
    with pytest.raises(lc.InvalidSampleError, match=message):
        ingest(tmp_path)


def test_compressed_counts_read_like_pycocotools() -> None:
    """Our reading of compressed counts gives pycocotools' own run lengths for real masks."""
    from pycocotools import mask as mask_utils

    from lakecompute.vision._coco_annotations import rle_counts

    rng = np.random.default_rng(3)
    for shape in [(1, 1), (7, 5), (40, 50), (123, 77)]:
        for density in (0.0, 0.1, 0.5, 1.0):
            mask = np.asfortranarray((rng.random(shape) < density).astype(np.uint8))
            rle = mask_utils.encode(mask)
            flat = mask.flatten(order="F").astype(np.int64)
            runs = np.diff(np.flatnonzero(np.diff(np.r_[-1, flat, -1]) != 0))
            expected = ([0] if flat[0] == 1 else []) + runs.tolist()
            assert rle_counts(rle["counts"].decode("ascii")).tolist() == expected, (shape, density)


BOMB = """
import json, resource, sys
sys.path.insert(0, {repo!r})
import lakecompute as lc
import pycocotools.mask  # imported before the limit, as any ingest with masks would have
with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
limit = size + 768 * 2**20   # what is mapped now, and 768 MiB more: far less than any bomb asks
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    lc.ingest_coco({images!r}, {annotations!r}, {dest!r}, num_workers=0, progressbar=False, masks={masks})
except lc.LakeComputeError as exc:
    print("REFUSED", type(exc).__name__, exc)
    sys.exit(0)
print("INGESTED")
"""


def _bomb(kind: str) -> dict[str, Any]:
    """An annotation (or image entry) claiming far more pixels than the 20 x 30 image holds."""
    bombs: dict[str, Any] = {
        # 14 bytes claiming 60000 x 60000, and 6 claiming 20000 x 20000
        "crowd-rle-60000": {"size": [60000, 60000], "counts": _compressed([60000**2], 60000, 60000)},
        "rle-20000": {"size": [20000, 20000], "counts": _compressed([20000**2], 20000, 20000)},
        "uncompressed-rle-60000": {"size": [60000, 60000], "counts": [60000**2]},
        # sums past the image's 600 pixels: pycocotools would write past the end of its mask
        "overflowing-counts": {"size": [20, 30], "counts": [0, 2**32 - 1]},
        # rasterising walks every pixel of the outline
        "polygon-far-away": [[0, 0, 1e9, 0, 0, 1e9]],
    }
    if kind in bombs:
        return {"segmentation": bombs[kind]}
    if kind == "image-100000":
        return {"image": {"height": 100000, "width": 100000}}  # a claimed 100000 x 100000 image
    return {}  # the control: the limit leaves room for an ordinary ingest


BOMBS = [
    "none",
    "crowd-rle-60000",
    "rle-20000",
    "uncompressed-rle-60000",
    "overflowing-counts",
    "polygon-far-away",
    "image-100000",
]


@pytest.mark.parametrize("masks", [True, False])
@pytest.mark.parametrize("kind", BOMBS)
def test_size_bombs_are_refused_before_allocating(tmp_path: Path, kind: str, masks: bool) -> None:
    """Declared sizes far beyond the image (RLE sizes, counts, polygon extents, image entries) are refused
    with a LakeComputeError in a child process limited to 768 MiB more address space than it started with:
    a regression that allocates fails this test (MemoryError, a signal) instead of the machine."""
    doc = base_document()
    bomb = _bomb(kind)
    if "image" in bomb:
        doc["images"][0].update(bomb["image"])
    else:
        doc["annotations"][1].update(iscrowd=1, **bomb)
    write_folder(tmp_path, doc)
    code = BOMB.format(
        repo=str(Path(__file__).resolve().parents[2]),
        images=str(tmp_path / "images"),
        annotations=str(tmp_path / "instances.json"),
        dest=str(tmp_path / "ds"),
        masks=masks,
    )
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        # glibc reserves 64 MiB of address space per malloc arena, an arena per thread that allocates:
        # the eval's reader threads under load took the control case past the limit (a zstd buffer
        # refused). Two arenas keep the address space the limit measures about what is allocated.
        env={**os.environ, "MALLOC_ARENA_MAX": "2"},
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, f"child ended with {run.returncode}:\n{run.stdout}\n{run.stderr[-3000:]}"
    if kind == "none":
        assert run.stdout.startswith("INGESTED"), run.stdout
        return
    assert run.stdout.startswith("REFUSED InvalidSampleError"), run.stdout + run.stderr[-3000:]
    assert "annotation 2 of image 1" in run.stdout or "image 1 ('a.png')" in run.stdout


# -- no raw exception from the file ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe{not utf-8", r"Cannot read .* as JSON"),
        (b"[" * 100000 + b"]" * 100000, r"Cannot read .* as JSON"),
        (b'{"images": [], "annotations": [], "categories": [], "x": NaN}', r"NaN"),
        (
            b'{"images": [{"id": 1, "file_name": "a.png"}], "annotations": [], "categories": {}}',
            r"categories",
        ),
        (b"[]", r"expected a JSON object"),
    ],
)
def test_unreadable_annotation_files_are_library_errors(tmp_path: Path, content: bytes, message: str) -> None:
    """Bytes that are not UTF-8, nesting too deep to parse, NaN, or the wrong top-level shape are an
    InvalidArgumentError naming the file, never a raw exception."""
    write_folder(tmp_path, base_document())
    (tmp_path / "instances.json").write_bytes(content)
    with pytest.raises(lc.InvalidArgumentError, match=message):
        ingest(tmp_path)


# -- lossless stays lossless ---------------------------------------------------------------------------


def test_auto_warns_when_lossless_files_would_be_stored_as_jpeg(tmp_path: Path) -> None:
    """A mostly-JPEG folder stores its PNG as JPEG only with a LakeComputeWarning giving the plan and the
    way to keep it exact; image_compression='png' keeps every pixel."""
    doc = base_document()
    doc["images"] = [{"id": i + 1, "file_name": n} for i, n in enumerate(["a.jpg", "b.jpg", "c.png"])]
    doc["annotations"] = []
    sizes = {"a.jpg": (20, 30), "b.jpg": (20, 30), "c.png": (20, 30)}
    write_folder(tmp_path, doc, sizes)
    with pytest.warns(lc.LakeComputeWarning, match=r"Images stored as jpeg: 2 of 3 files kept") as record:
        ds = ingest(tmp_path)
    assert "lossless" in str(record[0].message)
    assert "image_compression='png'" in str(record[0].message)
    assert ds.images.sample_compression == "jpeg"
    exact = lc.ingest_coco(
        tmp_path / "images", tmp_path / "instances.json", tmp_path / "png", image_compression="png",
        progressbar=False,
    )  # fmt: skip
    with Image.open(tmp_path / "images" / "c.png") as png:
        np.testing.assert_array_equal(exact.images[2].numpy(), np.asarray(png))


def test_cli_ingest_coco_prints_the_lossy_plan(tmp_path: Path) -> None:
    """``lakecompute ingest-coco`` tells the user, on stderr, that PNG files will be stored as JPEG."""
    doc = base_document()
    doc["images"] = [{"id": i + 1, "file_name": n} for i, n in enumerate(["a.jpg", "b.jpg", "c.png"])]
    doc["annotations"] = []
    write_folder(tmp_path, doc, {"a.jpg": (20, 30), "b.jpg": (20, 30), "c.png": (20, 30)})
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    run = subprocess.run(
        [sys.executable, "-m", "lakecompute", "ingest-coco", str(tmp_path / "images"),
         str(tmp_path / "instances.json"), str(tmp_path / "ds"), "--no-progress"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "lakecompute: warning: Images stored as jpeg: 2 of 3 files kept" in run.stderr


def test_documents_are_not_changed_by_the_checks(tmp_path: Path) -> None:
    """The checks keep the annotations exactly: export gives back the file's annotations."""
    doc = base_document()
    write_folder(tmp_path, doc)
    ds = ingest(tmp_path, masks=False)
    out = ds.export_coco(tmp_path / "out.json")
    assert out["annotations"] == copy.deepcopy(doc["annotations"])
