"""Exports keep the stored bytes: an image stored in its name's format is written byte for byte, one stored in
another format is written as its stored bytes under the stored format's ending (listed, warned once), and
nothing is encoded again unless ``image_format=`` asks for it (a lossy encoding warned about). pycocotools
reads what export_coco writes; the export's progress bar counts the images."""

from __future__ import annotations

import json
import re
import warnings
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.compression import decode_image, encode_image

pycocotools_coco = pytest.importorskip("pycocotools.coco")


def _pixels(seed: int, size: tuple[int, int] = (24, 32)) -> np.ndarray:
    """A photo-like picture: a gradient with noise (JPEG's kind of content)."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(20, 220, size[1])[None, :, None] + np.linspace(0, 30, size[0])[:, None, None]
    return np.clip(ramp + rng.integers(-12, 12, (*size, 3)), 0, 255).astype(np.uint8)


def _mixed(root: Path, jpegs: int, pngs: int) -> tuple[Path, Path]:
    """A COCO folder of ``jpegs`` JPEG files and ``pngs`` PNG files, one box each."""
    images = root / "images"
    images.mkdir(parents=True)
    names = [f"j{i}.jpg" for i in range(jpegs)] + [f"p{i}.png" for i in range(pngs)]
    for i, name in enumerate(names):
        Image.fromarray(_pixels(i)).save(images / name, quality=88)
    doc = {
        "images": [{"id": i + 1, "file_name": n, "height": 24, "width": 32} for i, n in enumerate(names)],
        "annotations": [
            {
                "id": i + 1,
                "image_id": i + 1,
                "category_id": 1,
                "bbox": [2, 3, 10, 8],
                "area": 80,
                "iscrowd": 0,
            }
            for i in range(len(names))
        ],
        "categories": [{"id": 1, "name": "thing"}],
    }
    annotations = root / "instances.json"
    annotations.write_text(json.dumps(doc))
    return images, annotations


def _export(ds: Any, out: Path, **options: Any) -> tuple[dict[str, Any], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        coco = ds.export_coco(out / "instances.json", out / "images", progressbar=False, **options)
    return coco, [str(w.message) for w in caught if issubclass(w.category, lc.LakeComputeWarning)]


def _decoded(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_a_jpeg_stored_folder_exports_every_jpeg_as_its_original_bytes(tmp_path: Path) -> None:
    """Mostly JPEG: the JPEGs are kept at ingest and written back byte for byte; the PNGs, stored as JPEG
    at ingest (warned then), are written as those stored JPEG bytes under .jpg names, listed, not encoded
    a second time (the tree before encoded them again as PNG under their own names)."""
    images, annotations = _mixed(tmp_path / "src", jpegs=3, pngs=2)
    with pytest.warns(lc.LakeComputeWarning, match="stored as JPEG, which is lossy"):
        ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    out = tmp_path / "out"
    coco, said = _export(ds, out)
    for i in range(3):
        assert (out / "images" / f"j{i}.jpg").read_bytes() == (images / f"j{i}.jpg").read_bytes()
    for i in range(2):
        assert not (out / "images" / f"p{i}.png").exists()
        assert (out / "images" / f"p{i}.jpg").read_bytes() == ds.images[3 + i].tobytes()
    assert [im["file_name"] for im in coco["images"]] == ["j0.jpg", "j1.jpg", "j2.jpg", "p0.jpg", "p1.jpg"]
    assert len(said) == 1
    assert re.search(r"wrote 2 image file\(s\).*'p0.png' -> 'p0.jpg', 'p1.png' -> 'p1.jpg'", said[0])
    loaded = pycocotools_coco.COCO(str(out / "instances.json"))
    for entry in loaded.dataset["images"]:
        assert (out / "images" / entry["file_name"]).is_file()


def test_a_png_stored_folder_exports_jpegs_as_exact_pngs(tmp_path: Path) -> None:
    """Mostly PNG (the issue's case): the JPEG files were decoded and stored as PNG at ingest; the export
    writes those PNG bytes as .png files, whose pixels are exactly the source JPEGs' (the tree before wrote
    second-generation JPEGs under .jpg, up to several grey levels off)."""
    images, annotations = _mixed(tmp_path / "src", jpegs=2, pngs=3)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    assert ds.images.sample_compression == "png"
    out = tmp_path / "out"
    coco, said = _export(ds, out)
    for i in range(2):
        assert not (out / "images" / f"j{i}.jpg").exists()
        np.testing.assert_array_equal(_decoded(out / "images" / f"j{i}.png"), _decoded(images / f"j{i}.jpg"))
    for i in range(3):
        assert (out / "images" / f"p{i}.png").read_bytes() == (images / f"p{i}.png").read_bytes()
    assert coco["images"][0]["file_name"] == "j0.png"
    assert re.search(r"'j0.jpg' -> 'j0.png', 'j1.jpg' -> 'j1.png'", said[0])


def test_image_format_encodes_only_what_is_not_in_it_and_warns_when_lossy(tmp_path: Path) -> None:
    """image_format='jpeg': JPEGs stored as JPEG are still their stored bytes; PNG-stored images are
    encoded (quality 90), counted and warned about as lossy; file names keep their .jpg ending."""
    images, annotations = _mixed(tmp_path / "src", jpegs=2, pngs=3)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    out = tmp_path / "out"
    coco, said = _export(ds, out, image_format="jpeg")
    assert [im["file_name"] for im in coco["images"]] == ["j0.jpg", "j1.jpg", "p0.jpg", "p1.jpg", "p2.jpg"]
    written = _decoded(out / "images" / "j0.jpg")
    np.testing.assert_array_equal(written, decode_image(encode_image(_decoded(images / "j0.jpg"), "jpeg")))
    assert any(re.search(r"encoded 5 image\(s\) as JPEG.*lossy", s) for s in said)
    assert any("'p0.png' -> 'p0.jpg'" in s for s in said)


def test_image_format_png_of_a_jpeg_tensor_is_lossless_and_silent_about_loss(tmp_path: Path) -> None:
    images, annotations = _mixed(tmp_path / "src", jpegs=3, pngs=0)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    out = tmp_path / "out"
    _, said = _export(ds, out, image_format="png")
    np.testing.assert_array_equal(_decoded(out / "images" / "j1.png"), _decoded(images / "j1.jpg"))
    assert not any("lossy" in s for s in said)


def test_arrays_are_written_losslessly_in_their_names_format_or_as_png(tmp_path: Path) -> None:
    """An image tensor stored as arrays has no file: a .webp or .bmp name gets its format, losslessly (not
    Pillow's lossy WebP default); a .jpg name gets a PNG, renamed, since JPEG would lose detail."""
    ds = lc.empty(tmp_path / "arrays")
    with ds:
        ds.create_tensor("images", htype="image")
        ds.create_tensor("file_name", htype="text")
        ds.create_tensor("boxes", htype="bbox", format="xywh")
        ds.create_tensor("categories", htype="class_label", class_names=["a"])
    for i, name in enumerate(["a.webp", "b.bmp", "c.jpg"]):
        ds.append({"images": _pixels(i), "file_name": name, "boxes": [[1, 1, 2, 2]], "categories": [0]})
    out = tmp_path / "out"
    coco, said = _export(ds, out)
    assert [im["file_name"] for im in coco["images"]] == ["a.webp", "b.bmp", "c.png"]
    for i, name in enumerate(["a.webp", "b.bmp", "c.png"]):
        np.testing.assert_array_equal(_decoded(out / "images" / name), _pixels(i))
    assert "'c.jpg' -> 'c.png'" in said[0]


def test_export_yolo_lists_what_it_wrote_under_another_name(tmp_path: Path) -> None:
    """YoloExport.renamed lists each image written under another ending; its label file keeps the stem."""
    images, annotations = _mixed(tmp_path / "src", jpegs=2, pngs=3)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="wrote 2 image file"):
        result = ds.export_yolo(tmp_path / "yolo", progressbar=False)
    assert result.renamed == (("j0.jpg", "j0.png"), ("j1.jpg", "j1.png"))
    assert result.reencoded == 0
    assert (tmp_path / "yolo" / "images" / "j0.png").read_bytes() == ds.images[0].tobytes()
    assert (tmp_path / "yolo" / "labels" / "j0.txt").is_file()
    assert not (tmp_path / "yolo" / "images" / "j0.jpg").exists()


def test_a_sample_without_a_file_name_is_named_in_its_stored_format(tmp_path: Path) -> None:
    """Made-up names take the stored format's ending: a JPEG tensor exports 1.jpg, not a re-encoded 1.png."""
    images, annotations = _mixed(tmp_path / "src", jpegs=1, pngs=0)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    ds.delete_tensor("file_name")
    coco, said = _export(ds, tmp_path / "out")
    assert coco["images"][0]["file_name"] == "1.jpg"
    assert (tmp_path / "out" / "images" / "1.jpg").read_bytes() == (images / "j0.jpg").read_bytes()
    assert said == []


@pytest.mark.parametrize("value", ["gif", "JPG2", 3])
def test_an_unknown_image_format_is_refused(tmp_path: Path, value: Any) -> None:
    images, annotations = _mixed(tmp_path / "src", jpegs=1, pngs=0)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    with pytest.raises(lc.InvalidArgumentError, match=r"image_format must be None .* Got"):
        ds.export_coco(tmp_path / "out.json", tmp_path / "images", image_format=value)
    with pytest.raises(lc.InvalidArgumentError, match=r"image_format must be None"):
        ds.export_yolo(tmp_path / "yolo", image_format=value)


@pytest.mark.parametrize("kind", ["coco", "yolo"])
def test_exports_show_a_progress_bar_of_the_images(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images, annotations = _mixed(tmp_path / "src", jpegs=3, pngs=0)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    capsys.readouterr()
    if kind == "coco":
        ds.export_coco(tmp_path / "out.json", tmp_path / "images")
    else:
        ds.export_yolo(tmp_path / "yolo")
    err = capsys.readouterr().err
    assert f"export_{kind}" in err
    assert "3/3" in err
    if kind == "coco":
        ds.export_coco(tmp_path / "out.json", tmp_path / "images", progressbar=False)
    else:
        ds.export_yolo(tmp_path / "yolo", progressbar=False)
    assert capsys.readouterr().err == ""
    with pytest.raises(lc.InvalidTypeError, match="progressbar"):
        ds.export_coco(tmp_path / "out.json", progressbar="yes")


def test_stored_bytes_are_what_pillow_reads_as_the_stored_pixels(tmp_path: Path) -> None:
    """What is written as stored bytes decodes to exactly what the dataset reads (no silent conversion)."""
    images, annotations = _mixed(tmp_path / "src", jpegs=1, pngs=2)
    ds = lc.ingest_coco(images, annotations, tmp_path / "ds", progressbar=False)
    _export(ds, tmp_path / "out")
    for i, entry in enumerate(json.loads((tmp_path / "out" / "instances.json").read_text())["images"]):
        data = (tmp_path / "out" / "images" / entry["file_name"]).read_bytes()
        np.testing.assert_array_equal(
            np.asarray(Image.open(BytesIO(data)).convert("RGB")), ds.images[i].numpy()
        )
