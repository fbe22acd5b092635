"""Image files in class folders are read or named: TIFF, PPM and PGM are read (torchvision's ImageFolder's
endings); GIF, HEIC, camera raw and other image endings an ingest does not read are skipped with a warning
that counts them and names the first few, never silently."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc


def _rgb(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (6, 7, 3), dtype=np.uint8)


def _folder(root: Path) -> Path:
    (root / "cats").mkdir(parents=True)
    (root / "dogs" / "deep").mkdir(parents=True)
    Image.fromarray(_rgb(0)).save(root / "cats" / "a.tif")
    Image.fromarray(_rgb(1)).save(root / "cats" / "b.TIFF", compression="tiff_lzw")
    Image.fromarray(_rgb(2)).save(root / "dogs" / "c.ppm")
    Image.fromarray(_rgb(3)).save(root / "dogs" / "d.png")
    Image.fromarray(_rgb(4)).save(root / "dogs" / "e.gif")
    (root / "dogs" / "deep" / "f.heic").write_bytes(b"\x00\x00\x00\x18ftypheic")
    (root / "dogs" / "notes.txt").write_text("not an image, and not said")
    return root


def test_tiff_and_ppm_are_read_and_other_images_are_named_in_a_warning(tmp_path: Path) -> None:
    root = _folder(tmp_path / "src")
    with pytest.warns(lc.LakeComputeWarning) as caught:
        ds = lc.ingest_classification(root, tmp_path / "ds", progressbar=False)
    said = [str(w.message) for w in caught if "skipped" in str(w.message)]
    assert len(said) == 1
    assert re.search(
        r"skipped 2 image file\(s\) in .* that it does not read \((\.gif: 1, \.heic: 1|\.heic: 1, \.gif: 1)",
        said[0],
    )
    assert "e.gif" in said[0]
    assert "f.heic" in said[0]
    assert "notes.txt" not in said[0]
    assert ".tif" in said[0]  # what it does read
    assert len(ds) == 4
    for i, seed in enumerate([0, 1, 2, 3]):  # a.tif, b.TIFF, c.ppm, d.png, in sorted order
        np.testing.assert_array_equal(ds.images[i].numpy(), _rgb(seed))
    assert ds.labels.numpy().reshape(-1).tolist() == [0, 0, 1, 1]


def test_the_plan_says_nothing_and_counts_what_is_read(tmp_path: Path) -> None:
    root = _folder(tmp_path / "src")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = lc.ingest.plan_classification(root)
    assert plan.formats == {"tiff": 2, "png": 1, "ppm": 1}
    assert plan.compression == "png"  # the most common is one no tensor stores: lossless


def test_many_skipped_files_are_counted_and_a_few_named(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    Image.fromarray(_rgb(0)).save(root / "a" / "keep.png")
    for i in range(8):
        Image.fromarray(_rgb(i)).save(root / "a" / f"anim{i}.gif")
    with pytest.warns(
        lc.LakeComputeWarning, match=r"skipped 8 image file\(s\).*\(\.gif: 8\).*anim4\.gif', \.\.\."
    ):
        lc.ingest_classification(root, tmp_path / "ds", progressbar=False)


def test_a_tiff_of_several_pages_is_refused_not_cut_to_its_first(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    pages = [Image.fromarray(_rgb(i)) for i in range(3)]
    pages[0].save(root / "a" / "stack.tif", save_all=True, append_images=pages[1:])
    with pytest.raises(lc.InvalidSampleError, match=r"stack\.tif.*a TIFF of 3 pages.*split it"):
        lc.ingest_classification(root, tmp_path / "ds", progressbar=False)
    with pytest.raises(lc.InvalidSampleError, match=r"3 pages"):
        lc.read(root / "a" / "stack.tif").numpy()


def test_a_16_bit_tiff_is_refused_naming_its_depth(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    Image.fromarray(np.full((4, 5), 3000, np.uint16)).save(root / "a" / "scan.tif")
    with pytest.raises(lc.InvalidSampleError, match=r"scan\.tif.*a TIFF of 16 bits per channel"):
        lc.ingest_classification(root, tmp_path / "ds", progressbar=False)
    ds = lc.ingest_classification(root, tmp_path / "ds", progressbar=False, convert_depth=True)
    assert ds.images[0].numpy().tolist() == [[3000 >> 8] * 5] * 4


def test_ingest_yolo_names_the_images_it_skips(tmp_path: Path) -> None:
    root = tmp_path / "yolo"
    (root / "images" / "train").mkdir(parents=True)
    (root / "labels" / "train").mkdir(parents=True)
    Image.fromarray(_rgb(0)).save(root / "images" / "train" / "a.jpg")
    Image.fromarray(_rgb(1)).save(root / "images" / "train" / "b.gif")
    (root / "labels" / "train" / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/train\nnames:\n  0: cat\n")
    with pytest.warns(lc.LakeComputeWarning, match=r"ingest_yolo skipped 1 image file\(s\).*b\.gif"):
        ds = lc.ingest_yolo(root, tmp_path / "ds", progressbar=False)
    assert len(ds) == 1


def test_the_cli_takes_convert_depth_and_exif_transpose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--convert-depth`` and ``--exif-transpose`` reach every ingest from the command line."""
    from tests.helpers import run_cli

    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    Image.fromarray(np.full((4, 5), 3000, np.uint16)).save(root / "a" / "scan.png")
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(_rgb(0)).save(root / "a" / "turned.png", exif=exif)
    code, _, err = run_cli(capsys, "ingest-classification", str(root), str(tmp_path / "no"), "--no-progress")
    assert code == 1
    assert "16 bits per channel" in err
    args = ["ingest-classification", str(root), str(tmp_path / "ds"), "--no-progress"]
    code, _, _ = run_cli(capsys, *args, "--convert-depth", "--exif-transpose")
    assert code == 0
    ds = lc.load(tmp_path / "ds")
    assert ds.images[0].numpy()[0, 0].tolist() == [3000 >> 8] * 3
    assert ds.images[1].numpy().shape == (7, 6, 3)
