"""EXIF orientation: pixels are read as stored (as Pillow and torchvision's ImageFolder read them) unless
``exif_transpose=True`` asks for them upright (as viewers, browsers and OpenCV show them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

import lakecompute as lc
from lakecompute.compression import decode_image, encode_image


def _photo(height: int = 12, width: int = 20, seed: int = 0) -> np.ndarray:
    """A picture whose every turn differs: a gradient plus noise, wider than high."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 200, width)[None, :, None] + np.linspace(0, 50, height)[:, None, None]
    return (ramp + rng.integers(0, 5, (height, width, 3))).astype(np.uint8)


def _save(path: Path, pixels: np.ndarray, orientation: int, fmt: str = "PNG") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    exif = Image.Exif()
    exif[0x0112] = orientation
    options = {"quality": 92} if fmt == "JPEG" else {}
    Image.fromarray(pixels).save(path, format=fmt, exif=exif, **options)
    return path


def _upright(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))


def _as_stored(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_read_turns_as_pillows_exif_transpose_only_when_asked(tmp_path: Path, orientation: int) -> None:
    """Each of the eight orientations: with exif_transpose=True, lc.read gives exactly what Pillow's
    ImageOps.exif_transpose gives (shape from the header agreeing); without, the pixels as stored."""
    path = _save(tmp_path / "photo.png", _photo(), orientation)
    upright = lc.read(path, exif_transpose=True)
    np.testing.assert_array_equal(upright.numpy(), _upright(path))
    assert upright.shape == _upright(path).shape
    np.testing.assert_array_equal(lc.read(path).numpy(), _as_stored(path))
    assert lc.read(path).shape == (12, 20, 3)


def test_a_turned_file_is_not_kept_as_its_bytes(tmp_path: Path) -> None:
    """Appended to a png tensor, a PNG turned by exif_transpose is stored upright (its bytes, which hold the
    stored orientation, are not kept); one not turned keeps its bytes."""
    turned = _save(tmp_path / "turned.png", _photo(), 6)
    plain = _save(tmp_path / "plain.png", _photo(seed=1), 1)
    ds = lc.empty(tmp_path / "ds")
    ds.create_tensor("images", htype="image", sample_compression="png")
    ds.images.extend([lc.read(turned, exif_transpose=True), lc.read(plain, exif_transpose=True)])
    np.testing.assert_array_equal(ds.images[0].numpy(), _upright(turned))
    assert ds.images[0].numpy().shape == (20, 12, 3)
    assert ds.images[1].tobytes() == plain.read_bytes()


def _folder(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "phone"
    portrait = _save(root / "people" / "portrait.jpg", _photo(seed=2), 6, "JPEG")
    landscape = _save(root / "people" / "landscape.jpg", _photo(seed=3), 1, "JPEG")
    return root, portrait, landscape


def test_ingest_classification_stores_pixels_as_stored_by_default(tmp_path: Path) -> None:
    """The default, as documented (and as torchvision's ImageFolder): a portrait phone photo is stored on its
    side, its bytes kept as they are."""
    root, portrait, _ = _folder(tmp_path)
    ds = lc.ingest_classification(root, tmp_path / "ds", progressbar=False)
    names = sorted(p.name for p in (root / "people").iterdir())
    assert names == ["landscape.jpg", "portrait.jpg"]
    assert ds.images[1].numpy().shape == (12, 20, 3)
    assert ds.images[1].tobytes() == portrait.read_bytes()


def test_ingest_classification_exif_transpose_stores_photos_upright(tmp_path: Path) -> None:
    """exif_transpose=True: the portrait photo is stored upright (decoded, turned, encoded again as the
    stored JPEG); the photo with nothing to turn keeps its bytes."""
    root, portrait, landscape = _folder(tmp_path)
    ds = lc.ingest_classification(root, tmp_path / "ds", progressbar=False, exif_transpose=True)
    assert ds.images.sample_compression == "jpeg"
    assert ds.images[0].tobytes() == landscape.read_bytes()
    upright = _upright(portrait)
    assert upright.shape == (20, 12, 3)
    np.testing.assert_array_equal(ds.images[1].numpy(), decode_image(encode_image(upright, "jpeg")))


def _coco(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A COCO file whose image entry and box were made on the upright photo (as an annotation tool in a
    browser shows it): 20 high, 12 wide."""
    images = tmp_path / "coco"
    photo = _save(images / "portrait.png", _photo(seed=4), 6)
    doc = {
        "images": [{"id": 1, "file_name": "portrait.png", "height": 20, "width": 12}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 8, 15], "area": 120, "iscrowd": 0}
        ],
        "categories": [{"id": 1, "name": "person"}],
    }
    annotations = tmp_path / "instances.json"
    annotations.write_text(json.dumps(doc))
    return images, annotations, photo


def test_ingest_coco_says_when_the_declared_size_is_the_file_turned(tmp_path: Path) -> None:
    """Annotations drawn on the upright photo do not fit the stored one: refused, pointing at exif_transpose;
    with it, the image is stored upright and the box is as the file says."""
    images, annotations, photo = _coco(tmp_path)
    with pytest.raises(
        lc.InvalidSampleError, match=r"declares 20 x 12.*the file is 12 x 20.*exif_transpose=True"
    ):
        lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False, exif_transpose=True)
    np.testing.assert_array_equal(ds.images[0].numpy(), _upright(photo))
    assert ds.boxes[0].numpy().tolist() == [[1, 2, 8, 15]]


def test_ingest_yolo_exif_transpose_stores_photos_upright(tmp_path: Path) -> None:
    """ultralytics reads images upright (OpenCV applies the orientation), so YOLO labels are drawn on the
    upright image: exif_transpose=True stores it so, the normalized boxes as they are."""
    root = tmp_path / "yolo"
    photo = _save(root / "images" / "train" / "portrait.png", _photo(seed=5), 8)
    (root / "labels" / "train").mkdir(parents=True)
    (root / "labels" / "train" / "portrait.txt").write_text("0 0.5 0.5 0.25 0.5\n")
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/train\nnames:\n  0: person\n")
    ds = lc.ingest_yolo(root, tmp_path / "ds", progressbar=False, exif_transpose=True)
    np.testing.assert_array_equal(ds.images[0].numpy(), _upright(photo))
    assert ds.images[0].numpy().shape == (20, 12, 3)
    assert ds.boxes[0].numpy().tolist() == [[0.5, 0.5, 0.25, 0.5]]


def test_a_damaged_orientation_reads_as_stored(tmp_path: Path) -> None:
    """An orientation that is not 1..8 (a damaged or hostile tag) turns nothing, and raises nothing."""
    path = _save(tmp_path / "odd.png", _photo(), 99)
    np.testing.assert_array_equal(lc.read(path, exif_transpose=True).numpy(), _as_stored(path))
