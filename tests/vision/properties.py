"""Property-based attacks on the COCO and YOLO readers (hypothesis), run by tests/vision/test_properties.py
in a child process under an address-space limit, so that a crash or a huge allocation fails a test instead
of the test run.

The strategies draw near-valid inputs: a valid COCO document with one or two fields replaced by odd
values (wrong types, wrong lengths, huge and negative numbers, RLEs of random sizes whose counts are
random, exact, or one character off), raw bytes as the annotations file, and YOLO folders whose data.yaml
and label files are drawn line by line from valid and broken tokens (pose folders: drawn kpt_shape,
flip_idx and kpt_names, and rows of a box and keypoints with a value, a visibility or the count off).
The property: each ends in a dataset or a `LakeComputeError`, never another exception.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import resource
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import lakecompute as lc
from tests.vision.test_coco_trust import base_document, write_folder

SETTINGS: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

# -- values ----------------------------------------------------------------------------------------

_EDGE_INTS = [0, 1, -1, 2, 3, 20, 30, 600, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63, 10**30, -(2**63) - 1]
numbers = st.one_of(
    st.integers(-50, 700),
    st.sampled_from(_EDGE_INTS),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.floats(-100, 100),
)
odd = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    st.text(max_size=6),
    st.lists(numbers, max_size=8),
    st.lists(st.lists(numbers, max_size=8), max_size=3),
    st.dictionaries(
        st.sampled_from(["size", "counts", "id", "x"]), numbers | st.text(max_size=4), max_size=3
    ),
)


@st.composite
def partitions(draw: st.DrawFn, total: int) -> list[int]:
    """Run lengths summing to ``total`` (a valid uncompressed RLE of that many pixels)."""
    cuts = sorted(draw(st.lists(st.integers(0, total), max_size=12)))
    edges = [0, *cuts, total]
    return [b - a for a, b in itertools.pairwise(edges)]


def _compress(counts: list[int], height: int, width: int) -> str:
    from pycocotools import mask as mask_utils

    rle = mask_utils.frPyObjects({"size": [height, width], "counts": counts}, height, width)
    return str(rle["counts"].decode("ascii"))


@st.composite
def rles(draw: st.DrawFn) -> dict[str, Any]:
    """RLE dicts: the image's size or another (small or huge), counts exact, random, or compressed (exact,
    random characters, or one character changed)."""
    height, width = draw(st.sampled_from([(20, 30), (16, 16), (30, 20), (1, 1), (0, 5), (60000, 60000)]))
    kind = draw(st.sampled_from(["exact", "random", "compressed", "garbled", "text"]))
    exact = draw(partitions(min(height * width, 10**6)))
    counts: Any = exact
    if kind == "random":
        counts = draw(st.lists(st.integers(-3, 2**33), max_size=10))
    elif kind in ("compressed", "garbled") and height * width == sum(exact):
        counts = _compress(exact, height, width)
        if kind == "garbled" and counts:
            i = draw(st.integers(0, len(counts) - 1))
            counts = counts[:i] + chr(draw(st.integers(40, 120))) + counts[i + 1 :]
    elif kind == "text":
        counts = draw(st.text(alphabet=st.characters(min_codepoint=40, max_codepoint=120), max_size=12))
    return {"size": [height, width], "counts": counts}


segmentations = st.one_of(
    st.lists(st.lists(numbers, max_size=12), max_size=3),
    rles(),
    odd,
)
annotation_fields = {
    "id": odd,
    "image_id": st.sampled_from([1, 2, 3]) | odd,
    "category_id": st.sampled_from([1, 2, 5]) | odd,
    "bbox": st.lists(numbers, max_size=8) | odd,
    "area": numbers | odd,
    "iscrowd": st.sampled_from([0, 1, 2, True, 300, "1"]) | odd,
    "segmentation": segmentations,
    "keypoints": st.lists(st.sampled_from([0, 1, 2, 3, 7, 1.5, -1, 1e9]), max_size=9) | odd,
    "num_keypoints": odd,
}
image_fields = {"id": odd, "file_name": st.sampled_from(["a.png", "b.png", "../a.png", "/a.png"]) | odd,
                "height": odd, "width": odd}  # fmt: skip
category_fields = {"id": odd, "name": odd, "keypoints": odd, "skeleton": odd}


@st.composite
def mutation(draw: st.DrawFn, doc: dict[str, Any]) -> None:
    """Change one thing of ``doc``: a field of an entry set or removed, an entry duplicated or replaced."""
    where = draw(st.sampled_from(["annotations", "annotations", "annotations", "images", "categories"]))
    entries = doc[where]
    if not entries:
        return
    i = draw(st.integers(0, len(entries) - 1))
    fields = {"annotations": annotation_fields, "images": image_fields, "categories": category_fields}[where]
    action = draw(st.sampled_from(["set", "set", "set", "set", "delete", "duplicate", "replace"]))
    if action == "set" and isinstance(entries[i], dict):
        # The fields with the most structure (and the declared sizes) are drawn most often.
        keys = (
            [*sorted(fields), *(["segmentation"] * 6 + ["bbox", "keypoints"] * 2)]
            if fields is annotation_fields
            else sorted(fields)
        )
        key = draw(st.sampled_from(keys))
        entries[i][key] = draw(fields[key])
    elif action == "delete" and isinstance(entries[i], dict) and entries[i]:
        del entries[i][draw(st.sampled_from(sorted(entries[i])))]
    elif action == "duplicate":
        entries.append(json.loads(json.dumps(entries[i])))
    elif action == "replace":
        entries[i] = draw(odd)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid COCO document with one or two things changed; half of them with an RLE drawn by `rles` (the
    declared sizes and counts are where a reader's allocations go wrong)."""
    doc = base_document()
    if draw(st.booleans()):
        ann = doc["annotations"][draw(st.integers(0, len(doc["annotations"]) - 1))]
        ann.update(segmentation=draw(rles()), iscrowd=draw(st.sampled_from([0, 1])))
    for _ in range(draw(st.integers(0 if "size" in json.dumps(doc) else 1, 2))):
        draw(mutation(doc))
    return doc


# -- COCO ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def coco_folder() -> Iterator[Path]:
    """A folder with the base document's images (a.png 20 x 30, b.png 16 x 16), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="coco-props-") as tmp:
        root = Path(tmp)
        write_folder(root, base_document())
        yield root


def same_columns(anns: list[Any], entry: dict[str, Any], rules: Any) -> None:
    """The whole-image check and the annotation-by-annotation one agree: the same columns, or the same
    refusal (nothing accepted by the first that the second refuses)."""
    from lakecompute.vision._coco_annotations import annotation_columns

    try:
        fast = annotation_columns(anns, entry, rules).columns
    except lc.LakeComputeError:
        fast = None
    try:
        careful = annotation_columns(anns, entry, rules, one_by_one=True).columns
    except lc.LakeComputeError:
        careful = None
    assert (fast is None) == (careful is None), f"one path refused what the other accepted: {anns!r:.300}"
    if fast is None or careful is None:
        return
    assert sorted(fast) == sorted(careful)
    for name, values in fast.items():
        if isinstance(values, np.ndarray):
            assert values.dtype == careful[name].dtype, name
            np.testing.assert_array_equal(values, careful[name], err_msg=name)
        else:
            assert values == careful[name], name


def coco_gate(max_examples: int) -> None:
    """The gate and the worker's function on drawn documents: a row per image or a LakeComputeError, and
    the same columns by the whole-image and the annotation-by-annotation checks."""
    from lakecompute.vision._coco_checks import parse_document

    with coco_folder() as root:
        where = str(root / "instances.json")

        @settings(max_examples=max_examples, **SETTINGS)
        @given(documents())
        def check(doc: dict[str, Any]) -> None:
            try:
                document = parse_document(doc, str(root / "images"), where)
                rules = document.rules(where)
                for image in document.images:
                    same_columns(document.annotations[image.id], image.entry, rules)
                    sample = json.dumps([image.path, image.entry, document.annotations[image.id]]).encode()
                    rows: list[Any] = []
                    lc.vision.coco_image(sample, rows, "RGB", "png", rules, True)
                    assert rows[0]["masks"].shape[:2] == rows[0]["images"].shape[:2]
            except lc.LakeComputeError:
                pass

        check()


def coco_ingest(max_examples: int) -> None:
    """ingest_coco on drawn annotations files (documents, or any bytes): a dataset or a LakeComputeError."""
    with coco_folder() as root:
        files = st.one_of(documents().map(lambda d: json.dumps(d).encode()), st.binary(max_size=64))

        @settings(max_examples=max_examples, **SETTINGS)
        @given(files)
        def check(content: bytes) -> None:
            (root / "instances.json").write_bytes(content)
            try:
                ds = lc.ingest_coco(
                    root / "images", root / "instances.json", "mem://coco-props", overwrite=True,
                    progressbar=False, num_workers=0,
                )  # fmt: skip
            except lc.LakeComputeError:
                return
            for i in range(len(ds)):  # what was stored reads back
                assert ds.masks[i].numpy().shape[:2] == ds.images[i].numpy().shape[:2]
                assert len(ds.boxes[i].numpy()) == len(ds.categories[i].numpy())

        check()


# -- YOLO ------------------------------------------------------------------------------------------

tokens = st.one_of(
    st.sampled_from(["0", "1", "2", "3", "-1", "1.0", "0x1", "1_0"]),
    st.sampled_from(["0.5", "0.25", "0", "1", "1.5", "-0.1", "nan", "inf", "-inf", "1e309", "1e-300"]),
    st.floats(0, 1).map(repr),
    st.text(max_size=4),
)
unit = st.floats(0, 1).map(repr)
valid_boxes = st.tuples(st.sampled_from("012"), unit, unit, unit, unit).map(" ".join)
valid_polygons = st.tuples(st.sampled_from("012"), st.lists(unit, min_size=6, max_size=10)).map(
    lambda t: " ".join([t[0], *t[1][: len(t[1]) // 2 * 2]])
)
label_lines = st.one_of(valid_boxes, valid_polygons, st.lists(tokens, max_size=9).map(" ".join))
label_files = st.one_of(
    st.lists(label_lines, max_size=4).map("\n".join).map(str.encode), st.binary(max_size=40)
)
data_yamls = st.one_of(
    st.just(b"names: [car, person, dog]\n"),
    st.just(b"names: {0: car, 1: person, 2: dog}\n"),
    st.sampled_from([
        "names: {0: car, 2: dog}\n", "names: [car, car]\n", "names: []\n", "names: [1, 2]\n", "names: car\n",
        "- car\n", "names: [car\n", "names: !!python/object:os.system [x]\n", "names: {a: car, 1: dog}\n",
        "names: &a [car]\nx: *a\n",
    ]).map(str.encode),
    st.text(max_size=30).map(str.encode),
    st.binary(max_size=30),
)  # fmt: skip


split_values = st.one_of(
    st.sampled_from([
        ".", "", "images", "images/train", "images/val", "../train/images", "../images/train", "../../x", "/",
        "/etc", "train.txt", "images/train/a.png", "labels", "missing", "a\x00b", "./images/../images/val",
    ]),
    st.just("train.txt"),
    st.lists(st.sampled_from(["images/train", "images/val", "train.txt", "../x", 3, None]), max_size=3),
    st.one_of(
        st.integers(-2, 2), st.none(), st.booleans(), st.text(max_size=6),
        st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    ),
)  # fmt: skip
roots = st.one_of(st.sampled_from([".", "", "./", "..", "/", "images", "../yolo", "train.txt"]), split_values)
listings = st.lists(
    st.sampled_from(
        [
            "./images/train/a.png",
            "images/val/c.png",
            "../x.png",
            "/etc/passwd",
            "images/train",
            "",
            "  ",
            "missing.png",
            "images/train/b.png",
            "labels/train/a.txt",
            "./../yolo/images/val/c.png",
        ]
    )
    | st.text(max_size=8),
    max_size=4,
).map("\n".join).map(str.encode) | st.binary(max_size=20)


@st.composite
def split_yamls(draw: st.DrawFn) -> bytes:
    """A data.yaml with valid names and drawn ``path``/``train``/``val``/``test`` entries."""
    import yaml

    doc: dict[str, Any] = {"names": ["car", "person", "dog"]}
    for key in ("path", "train", "val", "test"):
        if draw(st.booleans()):
            doc[key] = draw(roots if key == "path" else split_values)
    return yaml.safe_dump(doc).encode()


def yolo_images() -> dict[str, bytes]:
    """Three small PNG files' bytes, by their path under images/."""
    out = {}
    for i, name in enumerate(["train/a.png", "train/b.png", "val/c.png"]):
        buf = io.BytesIO()
        Image.fromarray(np.full((8 + i, 10, 3), 40 * i, np.uint8)).save(buf, format="PNG")
        out[name] = buf.getvalue()
    return out


def yolo(max_examples: int) -> None:
    """ingest_yolo on drawn data.yaml and label files: a dataset or a LakeComputeError."""
    images = yolo_images()

    @settings(max_examples=max_examples, **SETTINGS)
    @given(data_yamls | split_yamls(), st.lists(label_files, min_size=3, max_size=3), listings)
    def check(data_yaml: bytes, labels: list[bytes], listing: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "yolo"
            for (name, data), label in zip(images.items(), labels, strict=True):
                (root / "images" / name).parent.mkdir(parents=True, exist_ok=True)
                (root / "images" / name).write_bytes(data)
                (root / "labels" / name).parent.mkdir(parents=True, exist_ok=True)
                (root / "labels" / name).with_suffix(".txt").write_bytes(label)
            (root / "data.yaml").write_bytes(data_yaml)
            (root / "train.txt").write_bytes(listing)
            Image.new("RGB", (4, 4)).save(Path(tmp) / "x.png")  # outside the folder: never read
            try:
                ds = lc.ingest_yolo(
                    root, "mem://yolo-props", overwrite=True, progressbar=False, num_workers=0
                )
            except lc.LakeComputeError:
                return
            for i in range(len(ds)):
                assert len(ds.boxes[i].numpy()) == len(ds.labels[i].numpy())
            # Every image read is one of the folder's own (named below the splits' folder).
            assert all(not n.startswith("..") and not os.path.isabs(n) for n in ds.file_name.text())
            assert len(ds) <= len(images)

    check()


# -- YOLO pose -------------------------------------------------------------------------------------

visibilities = st.sampled_from(["0", "1", "2", "2.0", "3", "-1", "nan", "0.5", "x"])


@st.composite
def pose_lines(draw: st.DrawFn) -> str:
    """A pose row of 2 keypoints (x y v, or x y), valid or with a value, the visibility or the count off."""
    dims = draw(st.sampled_from([3, 3, 2]))
    values = [draw(unit) for _ in range(4)]
    for _ in range(2):
        values += [draw(unit), draw(unit)] + ([draw(st.sampled_from("012"))] if dims == 3 else [])
    kind = draw(st.sampled_from(["valid", "valid", "value", "visibility", "count", "count"]))
    if kind == "value":
        values[draw(st.integers(0, len(values) - 1))] = draw(tokens)
    elif kind == "visibility" and dims == 3:
        values[6] = draw(visibilities)
    elif kind == "count":
        values = values[: draw(st.integers(0, len(values) + 2))] + draw(st.lists(unit, max_size=3))
    return " ".join([draw(st.sampled_from("0120")), *values])


shapes = st.one_of(
    st.sampled_from(["[2, 3]", "[2, 3]", "[2, 2]"]),
    st.sampled_from(
        ["[2]", "[2, 4]", "[0, 3]", "[-2, 3]", "[true, 3]", "'2,3'", "[1000000000, 3]", "[2.0, 3]"]
    ),
    st.lists(st.integers(-3, 4), max_size=3).map(str),
)
flips = st.one_of(
    st.none(),
    st.sampled_from(["[1, 0]", "[0, 1]", "[0, 0]", "[1]", "[0, 1, 2]", "[a, b]", "{0: 1}", "[1.0, 0]"]),
)
point_names = st.one_of(
    st.none(),
    st.sampled_from([
        "{0: [l, r]}", "{0: [left_a, right_a], 1: [left_a, right_a]}", "{0: [a]}", "{0: [a, a]}",
        "{9: [a, b]}", "[a, b]", "{0: [a, b], 1: [c, d]}", "{0: [1, 2]}", "{true: [a, b]}",
    ]),
)  # fmt: skip


@st.composite
def pose_yamls(draw: st.DrawFn) -> bytes:
    """A data.yaml with valid names and drawn kpt_shape, flip_idx and kpt_names."""
    text = f"names: [car, person, dog]\nkpt_shape: {draw(shapes)}\n"
    for key, strategy in (("flip_idx", flips), ("kpt_names", point_names)):
        value = draw(strategy)
        if value is not None:
            text += f"{key}: {value}\n"
    return text.encode()


def yolo_pose(max_examples: int) -> None:
    """ingest_yolo of pose folders with drawn pose keys and rows: a dataset whose keypoints are one group
    of (x, y, 0/1/2) on the image per box, or a LakeComputeError."""
    images = yolo_images()

    @settings(max_examples=max_examples, **SETTINGS)
    @given(pose_yamls(), st.lists(st.lists(pose_lines(), max_size=3).map("\n".join), min_size=3, max_size=3))
    def check(data_yaml: bytes, labels: list[str]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "yolo"
            for (name, data), label in zip(images.items(), labels, strict=True):
                (root / "images" / name).parent.mkdir(parents=True, exist_ok=True)
                (root / "images" / name).write_bytes(data)
                (root / "labels" / name).parent.mkdir(parents=True, exist_ok=True)
                (root / "labels" / name).with_suffix(".txt").write_text(label)
            (root / "data.yaml").write_bytes(data_yaml)
            try:
                ds = lc.ingest_yolo(
                    root, "mem://yolo-pose-props", overwrite=True, progressbar=False, num_workers=0
                )
            except lc.LakeComputeError:
                return
            for i in range(len(ds)):
                height, width = ds.images[i].shape[:2]
                points = ds.keypoints[i].numpy().reshape(-1, 2, 3)
                assert len(points) == len(ds.boxes[i].numpy()) == len(ds.labels[i].numpy())
                assert set(points[..., 2].reshape(-1).tolist()) <= {0.0, 1.0, 2.0}
                assert (points[..., 0] <= width).all()
                assert (points[..., 1] <= height).all()
                assert (points[..., :2] >= 0).all()

    check()


# -- the child -------------------------------------------------------------------------------------

PROPERTIES = {"coco-gate": coco_gate, "coco-ingest": coco_ingest, "yolo": yolo, "yolo-pose": yolo_pose}


def run(name: str, max_examples: int, headroom: int = 1 << 30) -> None:
    """Run one property in this process with its address space limited to what is mapped now plus
    ``headroom`` bytes: far less than any size bomb asks, far more than the tiny inputs need."""
    import pycocotools.mask  # noqa: F401  # loaded before the limit, as any ingest with masks would have

    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    limit = size + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    PROPERTIES[name](max_examples)
    print(f"PASSED {name}")
