"""Getting data in: ingest_classification, lc.read and lc.from_numpy."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.demo import write_image_folder
from lakecompute.testing.internals import dataset_core


def _rgb(seed: int, size: tuple[int, int] = (12, 10)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


def _save(path: Path, image: Image.Image, fmt: str, **options: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format=fmt, **options)
    return path


def _decoded(path: Path, mode: str = "RGB") -> np.ndarray:
    with Image.open(path) as image:
        if image.mode in ("P", "LA", "PA"):
            image = image.convert("RGBA")
        return np.asarray(image.convert(mode))


@pytest.fixture
def animals(tmp_path: Path) -> Path:
    """Two classes, nested folders, four formats, mixed sizes and modes (RGBA, greyscale, palette)."""
    root = tmp_path / "animals"
    _save(root / "dogs" / "b.png", Image.fromarray(_rgb(1)), "PNG")
    _save(root / "dogs" / "puppies" / "a.bmp", Image.fromarray(_rgb(2, (7, 9))), "BMP")
    _save(root / "dogs" / "c.WEBP", Image.fromarray(_rgb(3)), "WEBP", lossless=True)
    rgba = np.dstack([_rgb(4), np.full((12, 10), 128, np.uint8)])
    _save(root / "cats" / "z.png", Image.fromarray(rgba, "RGBA"), "PNG")
    grey = np.random.default_rng(5).integers(0, 256, (20, 16), dtype=np.uint8)
    _save(root / "cats" / "y.jpg", Image.fromarray(grey, "L"), "JPEG", quality=95)
    _save(root / "cats" / "deep" / "deeper" / "x.png", Image.fromarray(_rgb(6)).convert("P"), "PNG")
    (root / "cats" / "notes.txt").write_text("not an image")
    (root / "cats" / ".hidden.png").write_bytes(b"ignored")
    (root / "README.md").write_text("top-level files are ignored")
    return root


def test_ingest_classification_nested_classes_and_mixed_formats(animals: Path, tmp_path: Path) -> None:
    """Class names are the sorted folder names; nested images join their class; order is by sorted path."""
    ds = lc.ingest_classification(animals, tmp_path / "out", progressbar=False)
    assert ds.labels.info.class_names == ["cats", "dogs"]
    expected = [
        animals / "cats" / "deep" / "deeper" / "x.png",
        animals / "cats" / "y.jpg",
        animals / "cats" / "z.png",
        animals / "dogs" / "b.png",
        animals / "dogs" / "c.WEBP",
        animals / "dogs" / "puppies" / "a.bmp",
    ]
    assert len(ds) == len(expected)
    assert ds.labels.numpy().tolist() == [0, 0, 0, 1, 1, 1]
    assert ds.images.sample_compression == "png"
    for i, path in enumerate(expected):
        # Everything is RGB because some images are colour; sizes are kept; lossless formats are exact.
        assert np.array_equal(ds.images[i].numpy(), _decoded(path)), path
    assert ds.images.shape == (6, None, None, 3)


def test_ingest_classification_is_deterministic_under_processes(animals: Path, tmp_path: Path) -> None:
    """Two worker processes give exactly what the in-process run gives."""
    serial = lc.ingest_classification(animals, tmp_path / "a", progressbar=False, num_workers=0)
    parallel = lc.ingest_classification(animals, tmp_path / "b", progressbar=False, num_workers=2)
    assert parallel.labels.numpy().tolist() == serial.labels.numpy().tolist()
    for a, b in zip(serial.images.numpy(aslist=True), parallel.images.numpy(aslist=True), strict=True):
        assert np.array_equal(a, b)


def test_ingest_classification_all_greyscale_is_stored_hxw(tmp_path: Path) -> None:
    """A folder of greyscale images becomes HxW samples, not RGB."""
    root = tmp_path / "digits"
    for k, name in enumerate(["one", "zero"]):
        grey = np.full((8, 8), 40 * k, np.uint8)
        _save(root / name / f"{k}.png", Image.fromarray(grey, "L"), "PNG")
    ds = lc.ingest_classification(root, tmp_path / "out", progressbar=False)
    assert ds.images.shape == (2, 8, 8)
    assert ds.labels.info.class_names == ["one", "zero"]
    assert [int(ds.images[i].numpy().max()) for i in range(2)] == [0, 40]


def test_ingest_classification_jpeg_files_are_stored_as_they_are(tmp_path: Path) -> None:
    """With image_compression='jpeg', JPEG files are not re-encoded: pixels equal the file's own decoding."""
    root = tmp_path / "photos"
    path = _save(root / "a" / "1.jpg", Image.fromarray(_rgb(7, (32, 32))), "JPEG", quality=70)
    ds = lc.ingest_classification(root, tmp_path / "out", image_compression="jpeg", progressbar=False)
    assert ds.images.sample_compression == "jpeg"
    assert np.array_equal(ds.images[0].numpy(), _decoded(path))


def _stored_blobs(ds: lc.Dataset) -> list[bytes]:
    """The encoded bytes the images tensor stores, sample by sample (no decoding)."""
    blobs: list[bytes] = []
    for encoded in dataset_core(ds).reader("images").read_encoded(0, len(ds.images)):
        assert encoded.blob is not None
        blobs.append(encoded.blob)
    return blobs


def _jpeg_folder(root: Path, n: int = 12) -> list[Path]:
    paths = []
    for i in range(n):
        cls = "cats" if i % 2 else "dogs"
        paths.append(
            _save(root / cls / f"{i:03d}.jpg", Image.fromarray(_rgb(20 + i, (24, 20))), "JPEG", quality=80)
        )
    return sorted(paths)


def test_ingest_classification_jpeg_folder_keeps_file_bytes_by_default(tmp_path: Path) -> None:
    """A folder of JPEGs stays JPEG: every stored sample is the file's own bytes (no re-encoding)."""
    paths = _jpeg_folder(tmp_path / "photos")
    ds = lc.ingest_classification(tmp_path / "photos", tmp_path / "out", progressbar=False, num_workers=2)
    assert ds.images.sample_compression == "jpeg"
    assert _stored_blobs(ds) == [p.read_bytes() for p in paths]
    plan = lc.ingest.plan_classification(tmp_path / "photos")
    assert (plan.compression, plan.kept, plan.converted) == ("jpeg", 12, {})
    assert plan.summary() == "Images stored as jpeg: all 12 files kept as they are."


def test_ingest_classification_explicit_compression_still_converts(tmp_path: Path) -> None:
    """image_compression='png' on a JPEG folder re-encodes (losslessly, as the decoded pixels)."""
    paths = _jpeg_folder(tmp_path / "photos", n=4)
    ds = lc.ingest_classification(
        tmp_path / "photos", tmp_path / "out", image_compression="png", progressbar=False
    )
    assert ds.images.sample_compression == "png"
    assert all(blob.startswith(b"\x89PNG") for blob in _stored_blobs(ds))
    for i, path in enumerate(paths):
        assert np.array_equal(ds.images[i].numpy(), _decoded(path))


def test_ingest_classification_most_common_format_wins(tmp_path: Path) -> None:
    """'auto' stores the most common format; the other files are converted and counted in the plan, and
    storing lossless files as JPEG is said with a warning giving the plan line."""
    root = tmp_path / "mixed"
    paths = _jpeg_folder(root, n=5)
    png = _save(root / "cats" / "p.png", Image.fromarray(_rgb(40)), "PNG")
    bmp = _save(root / "dogs" / "b.bmp", Image.fromarray(_rgb(41)), "BMP")
    plan = lc.ingest.plan_classification(root)
    assert (plan.compression, plan.formats, plan.kept) == ("jpeg", {"jpeg": 5, "bmp": 1, "png": 1}, 5)
    assert plan.converted == {"bmp": 1, "png": 1}
    assert (
        plan.summary()
        == "Images stored as jpeg: 5 of 7 files kept as they are, 2 converted (bmp: 1, png: 1)."
    )
    with pytest.warns(lc.LakeComputeWarning, match=r"stored as JPEG, which is lossy") as record:
        ds = lc.ingest_classification(root, tmp_path / "out", progressbar=False)
    assert str(record[0].message).startswith(plan.summary())
    assert record[0].filename == __file__  # points at the caller
    assert ds.images.sample_compression == "jpeg"
    blobs = _stored_blobs(ds)
    files = {p.read_bytes() for p in paths}
    assert sum(b in files for b in blobs) == 5
    assert png.read_bytes() not in blobs
    assert bmp.read_bytes() not in blobs


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["a.png", "b.jpg"], "png"),  # a tie: lossless first
        (["a.bmp", "b.bmp", "c.jpg"], "png"),  # bmp is no tensor format: lossless png
        (["a.webp", "b.webp", "c.png"], "webp"),
    ],
)
def test_ingest_classification_auto_ties_and_bmp(tmp_path: Path, names: list[str], expected: str) -> None:
    """Ties between formats go to png, and a folder of mostly BMPs is stored as png."""
    for i, name in enumerate(names):
        fmt = {"png": "PNG", "jpg": "JPEG", "bmp": "BMP", "webp": "WEBP"}[name.rsplit(".", 1)[1]]
        _save(tmp_path / "src" / "a" / name, Image.fromarray(_rgb(50 + i)), fmt)
    assert lc.ingest.plan_classification(tmp_path / "src").compression == expected


@pytest.mark.parametrize("where", ["same", "inside", "contains", "same-file-url", "same-relative"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_ingest_classification_refuses_dest_overlapping_src(
    animals: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, overwrite: bool
) -> None:
    """A destination that is the source, inside it, or contains it is refused, whatever overwrite says."""
    before = sorted((p, p.read_bytes()) for p in animals.rglob("*") if p.is_file())
    dest: str | Path = {
        "same": animals,
        "inside": animals / "dogs" / "out",
        "contains": tmp_path,
        "same-file-url": f"file://{animals}",
        "same-relative": "animals/../animals",
    }[where]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lc.InvalidArgumentError, match=r"the source folder .*Choose a destination outside"):
        lc.ingest_classification(animals, dest, progressbar=False, overwrite=overwrite)
    assert sorted((p, p.read_bytes()) for p in animals.rglob("*") if p.is_file()) == before


def test_ingest_classification_uncompressed(animals: Path, tmp_path: Path) -> None:
    """image_compression=None stores raw arrays with the same pixels."""
    png = lc.ingest_classification(animals, tmp_path / "png", progressbar=False)
    raw = lc.ingest_classification(animals, tmp_path / "raw", image_compression=None, progressbar=False)
    assert raw.images.sample_compression is None
    for a, b in zip(png.images.numpy(aslist=True), raw.images.numpy(aslist=True), strict=True):
        assert np.array_equal(a, b)


def test_ingest_classification_corrupt_file_raises_naming_it(animals: Path, tmp_path: Path) -> None:
    """A file that does not decode raises InvalidSampleError naming it, and nothing is left at dest."""
    bad = animals / "dogs" / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    dest = tmp_path / "out"
    with pytest.raises(lc.InvalidSampleError, match=r"broken\.jpg") as info:
        lc.ingest_classification(animals, dest, progressbar=False, num_workers=2)
    assert info.value.tensor == "images"
    assert "skip_errors=True" in str(info.value)
    assert isinstance(info.value.__cause__, lc.TransformError)
    assert not lc.exists(dest)


def test_ingest_classification_truncated_file_raises(tmp_path: Path) -> None:
    """A PNG cut short (its header reads fine) fails when decoded, naming the file."""
    root = tmp_path / "src"
    good = _save(root / "a" / "good.png", Image.fromarray(_rgb(8)), "PNG")
    (root / "a" / "cut.png").write_bytes(good.read_bytes()[:60])
    with pytest.raises(lc.InvalidSampleError, match=r"cut\.png"):
        lc.ingest_classification(root, tmp_path / "out", progressbar=False)


def test_ingest_classification_skip_errors_lists_skipped_files(animals: Path, tmp_path: Path) -> None:
    """skip_errors=True ingests the readable files and warns with the list of skipped ones."""
    (animals / "cats" / "bad.png").write_bytes(b"garbage")
    with pytest.warns(lc.LakeComputeWarning, match=r"Skipped 1 of 7 images") as record:
        ds = lc.ingest_classification(animals, tmp_path / "out", progressbar=False, skip_errors=True)
    assert "bad.png" in str(record[0].message)
    assert len(ds) == 6
    assert ds.labels.numpy().tolist() == [0, 0, 0, 1, 1, 1]


def test_ingest_classification_existing_dest_needs_overwrite(animals: Path, tmp_path: Path) -> None:
    """A second ingest into the same place raises DatasetExistsError unless overwrite=True."""
    lc.ingest_classification(animals, tmp_path / "out", progressbar=False)
    with pytest.raises(lc.DatasetExistsError):
        lc.ingest_classification(animals, tmp_path / "out", progressbar=False)
    ds = lc.ingest_classification(animals, tmp_path / "out", progressbar=False, overwrite=True)
    assert len(ds) == 6


def _split(root: Path, classes: list[str]) -> Path:
    """A split folder with class folders cat, dog and emu, one image in each of ``classes``."""
    for name in ["cat", "dog", "emu"]:
        (root / name).mkdir(parents=True)
    for seed, name in enumerate(classes):
        _save(root / name / "1.png", Image.fromarray(_rgb(seed)), "PNG")
    return root


def test_ingest_classification_keeps_empty_class_folders_as_classes(tmp_path: Path) -> None:
    """A class folder without images stays a class, so two splits give each class one label; a warning
    names the empty folders, once (the plan says nothing), and a split without empty folders gives none."""
    train = _split(tmp_path / "train", ["cat", "dog", "emu"])
    val = _split(tmp_path / "val", ["cat", "emu"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr = lc.ingest_classification(train, tmp_path / "tr", progressbar=False)
        said_train = [str(w.message) for w in caught if issubclass(w.category, lc.LakeComputeWarning)]
        va = lc.ingest_classification(val, tmp_path / "va", progressbar=False)
    assert tr.labels.info.class_names == va.labels.info.class_names == ["cat", "dog", "emu"]
    assert (tr.labels.numpy().tolist(), va.labels.numpy().tolist()) == ([0, 1, 2], [0, 2])
    assert said_train == []
    assert [str(w.message) for w in caught if issubclass(w.category, lc.LakeComputeWarning)] == [
        f"ingest_classification found no images in 1 class folder(s) of {str(val)!r}: 'dog'. They are kept "
        "as classes without samples, so every class's label is its place among the sorted folder names, "
        "the same in every split."
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the plan, like for skipped files, says nothing
        assert lc.ingest.plan_classification(val).formats == {"png": 2}


@pytest.mark.parametrize("layout", ["missing", "empty", "flat", "empty classes"])
def test_ingest_classification_refuses_folders_without_classes(tmp_path: Path, layout: str) -> None:
    """A missing folder, an empty one, images without class folders, or class folders none of which holds
    an image raise InvalidArgumentError."""
    src = tmp_path / "src"
    if layout != "missing":
        src.mkdir()
    if layout == "flat":
        _save(src / "1.png", Image.fromarray(_rgb(9)), "PNG")
    if layout == "empty classes":
        _split(src, [])
    with pytest.raises(lc.InvalidArgumentError, match="class sub-folders"):
        lc.ingest_classification(src, tmp_path / "out", progressbar=False)


def test_ingest_classification_demo_folder(tmp_path: Path) -> None:
    """The demo's synthetic folder (four formats, varying sizes) ingests with one sample per file."""
    counts = write_image_folder(tmp_path / "src", n=30, size=(16, 16), vary_size=True)
    ds = lc.ingest_classification(
        tmp_path / "src", tmp_path / "out", progressbar=False, image_compression="webp"
    )
    assert ds.labels.info.class_names == sorted(counts)
    assert np.bincount(ds.labels.numpy(), minlength=3).tolist() == [counts[c] for c in sorted(counts)]
    assert ds.images.shape[1:] == (None, None, 3)


def test_read_is_lazy_and_decodes(tmp_path: Path) -> None:
    """lc.read gives format and shape from the header and pixels on .numpy()."""
    pixels = _rgb(10, (5, 7))
    path = _save(tmp_path / "x.webp", Image.fromarray(pixels), "WEBP", lossless=True)
    image = lc.read(path)
    assert isinstance(image, lc.ImageFile)
    assert (image.format, image.shape) == ("webp", (5, 7, 3))
    assert np.array_equal(image.numpy(), pixels)
    assert np.array_equal(np.asarray(image), pixels)


def test_read_appends_file_bytes_to_a_matching_tensor(tmp_path: Path) -> None:
    """Appended to a jpeg tensor, a JPEG file is stored as is; to other tensors it is decoded."""
    path = _save(tmp_path / "cat.jpg", Image.fromarray(_rgb(11, (16, 16))), "JPEG", quality=60)
    ds = lc.empty(tmp_path / "ds")
    ds.create_tensor("jpeg", htype="image", sample_compression="jpeg")
    ds.create_tensor("png", htype="image", sample_compression="png")
    ds.create_tensor("raw", htype="image")
    ds.append({"jpeg": lc.read(path), "png": lc.read(path), "raw": lc.read(path)})
    original = _decoded(path)
    for name in ("jpeg", "png", "raw"):
        assert np.array_equal(ds[name][0].numpy(), original), name


def test_read_refuses_missing_and_broken_files(tmp_path: Path) -> None:
    """A missing file fails at lc.read; a broken one fails when appended, naming the file."""
    with pytest.raises(lc.InvalidArgumentError, match="No image file"):
        lc.read(tmp_path / "nope.png")
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG not really")
    ds = lc.empty(tmp_path / "ds")
    ds.create_tensor("images", htype="image", sample_compression="png")
    with pytest.raises(lc.InvalidSampleError, match=r"bad\.png"):
        ds.images.append(lc.read(bad))
    assert len(ds.images) == 0


def test_from_numpy_makes_one_tensor_per_array(tmp_path: Path) -> None:
    """Arrays become tensors (dtype kept), string arrays text tensors, htypes as asked, in one commit."""
    images = np.zeros((3, 4, 4, 3), np.uint8)
    ds = lc.from_numpy(
        tmp_path / "ds",
        {"images": images, "x": np.arange(3, dtype=np.int16), "caption": np.array(["a", "b", "c"])},
        htypes={"images": "image"},
    )
    assert ds.version == 1
    assert ds.images.htype == "image"
    assert ds.x.dtype == np.int16
    assert ds.caption.htype == "text"
    assert ds.caption[2].text() == "c"
    assert np.array_equal(ds.images.numpy(), images)


def test_from_numpy_refuses_bad_input(tmp_path: Path) -> None:
    """Different lengths and htypes for unknown tensors raise InvalidArgumentError."""
    with pytest.raises(lc.InvalidArgumentError, match="same number of samples"):
        lc.from_numpy(tmp_path / "a", {"x": np.zeros(3), "y": np.zeros(4)})
    with pytest.raises(lc.InvalidArgumentError, match="not in arrays"):
        lc.from_numpy(tmp_path / "b", {"x": np.zeros(3)}, htypes={"z": "image"})


def test_unreadable_file_appended_names_the_tensor_it_was_written_to(tmp_path: Path) -> None:
    """lc.read() of a broken file appended to any tensor: the error names that tensor and gives advice
    that works there (no skip_errors, which append() does not take)."""
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("photos", htype="image", sample_compression="jpeg")
    with pytest.raises(lc.InvalidSampleError, match=r"broken\.jpg.*Fix or remove the file\.$") as info:
        ds.photos.append(lc.read(bad))
    assert info.value.tensor == "photos"
    assert "skip_errors" not in str(info.value)
    assert len(lc.load(str(tmp_path / "ds")).photos) == 0


def linked_split(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A split made of links, as people make train/val folders: class folders holding a link to an image,
    a link to a folder of images, and a plain image; the images themselves live outside the split."""
    store, split = tmp_path / "all", tmp_path / "train"
    pixels = {name: _rgb(seed) for seed, name in enumerate(["a", "b", "c", "d"])}
    for name, px in pixels.items():
        _save(store / ("more" if name in "bc" else "") / f"{name}.png", Image.fromarray(px), "PNG")
    _save(split / "cats" / "own.png", Image.fromarray(_rgb(9)), "PNG")
    (split / "cats" / "a.png").symlink_to(store / "a.png")  # a link to a file
    (split / "cats" / "more").symlink_to(store / "more", target_is_directory=True)  # to a folder
    (split / "dogs").symlink_to(tmp_path / "dogs-elsewhere", target_is_directory=True)  # a class folder
    _save(tmp_path / "dogs-elsewhere" / "d.png", Image.fromarray(pixels["d"]), "PNG")
    pixels["own"] = _rgb(9)
    return split, pixels


def test_ingest_classification_follows_links_as_imagefolder_does(tmp_path: Path) -> None:
    """Links to files, to folders inside a class and to class folders are all read (torchvision's
    ImageFolder and ultralytics follow them); a linked sub-folder was skipped, silently, before."""
    split, pixels = linked_split(tmp_path)
    ds = lc.ingest_classification(split, tmp_path / "out", progressbar=False)
    assert ds.labels.info.class_names == ["cats", "dogs"]
    expected = [("a", 0), ("b", 0), ("c", 0), ("own", 0), ("d", 1)]  # by sorted path: a, more/b, more/c, own
    assert ds.labels.numpy().tolist() == [label for _, label in expected]
    for i, (name, _) in enumerate(expected):
        np.testing.assert_array_equal(ds.images[i].numpy(), pixels[name])


def test_ingest_classification_walks_a_loop_of_links_once(tmp_path: Path) -> None:
    """A link back to a folder the walk is inside (the class folder, the folder given) is not followed: the
    ingest ends, with each image once, where following every link would walk forever."""
    split, pixels = linked_split(tmp_path)
    (split / "cats" / "again").symlink_to(split / "cats", target_is_directory=True)
    (split / "cats" / "top").symlink_to(split, target_is_directory=True)
    (tmp_path / "all" / "more" / "up").symlink_to(tmp_path / "all" / "more", target_is_directory=True)
    ds = lc.ingest_classification(split, tmp_path / "out", progressbar=False)
    assert len(ds.images) == 5
    assert sorted(int(x.sum()) for x in ds.images.numpy(aslist=True)) == sorted(
        int(px.sum()) for px in pixels.values()
    )
