"""The ``lakecompute`` command: every subcommand's output and exit code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.cli import main
from lakecompute.demo import write_image_folder
from lakecompute.testing.data import CLASS_NAMES, make_shapes_dataset
from tests.helpers import run_cli

SUBCOMMANDS = [
    "info", "log", "restore", "diff", "ingest-classification", "ingest-coco", "ingest-yolo", "compact",
    "vacuum", "filter", "count", "show", "demo"
]  # fmt: skip


def _sorted_shapes(path: str, per_class: int = 5) -> str:
    """A dataset whose samples are stored class by class, as ingest stores them (15 samples, 16x16)."""
    from lakecompute.testing.data import make_images

    images, labels = make_images(3 * per_class * 2, (16, 16), seed=1)
    order = np.argsort(labels, kind="stable")
    keep = np.concatenate([order[labels[order] == c][:per_class] for c in range(3)])
    ds = lc.empty(path, overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=CLASS_NAMES)
        ds.extend({"images": images[keep], "labels": labels[keep]})
    return path


@pytest.fixture
def shapes(tmp_path: Path) -> str:
    """A small committed image dataset (12 samples, png)."""
    path = str(tmp_path / "shapes")
    make_shapes_dataset(path, n=12, size=(16, 16))
    return path


@pytest.mark.parametrize("command", [None, *SUBCOMMANDS])
def test_cli_help(capsys: pytest.CaptureFixture[str], command: str | None) -> None:
    """``--help`` works for the command and every subcommand, exiting 0 with a usage line."""
    argv = ["--help"] if command is None else [command, "--help"]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: lakecompute")
    if command is None:
        for name in SUBCOMMANDS:
            assert name in out


# Bad arguments for every subcommand: (argv, exit code, a piece of the one line on stderr).
# {ds} is a small dataset, {missing} a path without one, {file} an existing plain file, {tmp} a folder,
# {src} a folder of class sub-folders of images.
USER_ERRORS = [
    ([], 2, "required: COMMAND"),
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
    (["info"], 2, "required: path"),
    (["info", "{missing}"], 1, "No lakecompute dataset at"),
    (["info", "{ds}", "--version", "9"], 1, "has no version 9: its versions are 0-"),
    (["info", "{ds}", "--version", "x"], 1, "has no branch or tag 'x' (it has ['main'])"),
    (["info", "{ds}", "--branch", "nope"], 1, "has no branch 'nope' (it has ['main'])"),
    (["log"], 2, "required: path"),
    (["log", "{missing}"], 1, "No lakecompute dataset at"),
    (["log", "{ds}", "--oneline"], 2, "unrecognized arguments: --oneline"),
    (["log", "{ds}", "--branch", "a/b"], 1, "Invalid branch name 'a/b'"),
    (["restore", "{ds}"], 2, "required: version"),
    (["restore", "{missing}", "1"], 1, "No lakecompute dataset at"),
    (["restore", "{ds}", "99"], 1, "It has no version 99"),
    (["restore", "{ds}", "v9"], 1, "has no branch or tag 'v9'"),
    (["diff", "{ds}", "0"], 2, "required: b"),
    (["diff", "{ds}", "0", "nope"], 1, "has no branch or tag 'nope'"),
    (["diff", "{ds}", "0", "99"], 1, "It has no version 99"),
    (["ingest-classification", "{missing}", "{tmp}/out"], 1, "Expected a folder of class sub-folders"),
    (["ingest-classification", "{src}", "{ds}"], 1, "Pass --overwrite to replace it."),
    (["ingest-classification", "{tmp}", "{tmp}/o", "--image-compression", "gif"], 2, "invalid choice: 'gif'"),
    (["ingest-classification", "{tmp}", "{tmp}/o", "--num-workers", "-1"], 2, "expected an integer >= 0"),
    (["ingest-coco", "{src}", "{missing}", "{tmp}/o"], 1, "No annotations file at"),
    (["ingest-coco", "{src}", "{file}"], 2, "required: dest"),
    (["ingest-yolo", "{missing}", "{tmp}/o"], 1, "No data.yaml in"),
    (["ingest-yolo", "{src}", "{tmp}/o", "--num-workers", "x"], 2, "expected an integer >= 0"),
    (["compact"], 2, "required: path"),
    (["compact", "{missing}"], 1, "No lakecompute dataset at"),
    (["vacuum", "{missing}"], 1, "No lakecompute dataset at"),
    (["vacuum", "{ds}", "--keep-versions", "0"], 2, "--keep-versions: expected an integer >= 1, got '0'"),
    (["vacuum", "{ds}", "--grace-seconds", "soon"], 2, "--grace-seconds: expected a number of seconds"),
    (["filter", "{ds}"], 2, "required: expr"),
    (["filter", "{missing}", "labels == 'circle'"], 1, "No lakecompute dataset at"),
    (["filter", "{ds}", "lables == 'circle'"], 1, "there is no tensor 'lables'. Did you mean 'labels'?"),
    (["filter", "{ds}", "__import__('os').system('x')"], 1, "at position 16: unexpected character '.'"),
    (["filter", "{ds}", "labels > 'circle'"], 1, "class labels compare as names, with ==, != and in"),
    (["filter", "{ds}", "labels == 'cat'"], 1, "'cat' is not a class name of tensor 'labels'"),
    (["filter", "{ds}", "labels == 1", "--objects"], 1, "filter_labels keeps or drops objects"),
    (["filter", "{ds}", "labels == 1", "--save", "{ds}"], 1, "Cannot copy"),
    (["count", "{ds}"], 2, "required: tensor"),
    (["count", "{ds}", "images"], 1, "holds images (image), which expressions do not read"),
    (["count", "{ds}", "labels", "--where", "labels +"], 1, "the expression ends too early"),
    (["show", "{ds}", "--where", "nope == 1"], 1, "there is no tensor 'nope'"),
    (["show", "{missing}"], 1, "No lakecompute dataset at"),
    (["show", "{ds}", "--tensor", "labels"], 1, "Expected an image tensor. Got --tensor 'labels'"),
    (["show", "{ds}", "--tensor", "pixels"], 1, "Tensor 'pixels' does not exist"),
    (["show", "{ds}", "--labels", "nope"], 1, "Got --labels 'nope', which is not in the dataset"),
    (["show", "{ds}", "--labels", "images"], 1, "Got --labels 'images', which is of htype 'image'"),
    (["show", "{ds}", "--indices", "3,99"], 1, "[99] are out of range"),
    (["show", "{ds}", "--indices", "a,b"], 1, "--indices takes comma-separated integers"),
    (["show", "{ds}", "--rows", "0"], 2, "--rows: expected an integer >= 1, got '0'"),
    (["show", "{ds}", "--rows", "99", "--cols", "99"], 1, "at most 1024 images. Got --cols x --rows = 9801"),
    (["show", "{ds}", "-o", "{tmp}/grid.txt"], 1, "-o takes an image file name"),
    (["show", "{ds}", "-o", "{tmp}/no/such/folder/grid.png"], 1, "No such file or directory"),
    (["demo", "--samples", "0"], 2, "--samples: expected an integer >= 1, got '0'"),
    (["demo", "--output-dir", "{file}"], 1, "File exists"),
]  # fmt: skip


def test_cli_user_errors_cover_every_subcommand() -> None:
    """The bad-argument table below has cases for every subcommand."""
    assert {argv[0] for argv, _, _ in USER_ERRORS if argv} >= set(SUBCOMMANDS)


@pytest.mark.parametrize(
    ("argv", "code", "excerpt"), USER_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_cli_user_error_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], code: int, excerpt: str
) -> None:
    """A user's mistake exits non-zero with one line on stderr that says what is wrong, naming flags."""
    places = {"ds": str(tmp_path / "ds"), "missing": str(tmp_path / "missing"), "tmp": str(tmp_path)}
    places["file"], places["src"] = str(tmp_path / "a-file"), str(tmp_path / "src")
    Path(places["file"]).write_text("not a folder")
    write_image_folder(places["src"], n=3, size=(8, 8))
    make_shapes_dataset(places["ds"], n=6, size=(8, 8))
    got, _, err = run_cli(capsys, *(a.format(**places) for a in argv))
    assert got == code, err
    assert err.endswith("\n"), err
    assert err.count("\n") == 1, err
    assert re.match(r"lakecompute( [a-z-]+)?: error: ", err), err
    assert excerpt in err
    assert "Traceback" not in err
    assert not re.search(r"\b[a-z_]+=(True|None)\b|lc\.[a-z]+\(", err), f"a Python hint: {err}"


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``--version`` prints the package version."""
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"lakecompute {lc.__version__}"


def test_cli_info(capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    """``info`` prints the summary table; ``--version`` shows an older version."""
    code, out, _ = run_cli(capsys, "info", shapes)
    assert code == 0
    assert "samples=12" in out
    assert "images  image        uint8   (12, 16, 16, 3)  png" in out
    code, out, _ = run_cli(capsys, "info", shapes, "--version", "0")
    assert code == 0
    assert "version=0, samples=0" in out


def test_cli_info_missing_dataset_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A path without a dataset is an error: exit 1, the message on stderr, no traceback."""
    code, out, err = run_cli(capsys, "info", str(tmp_path / "nothing"))
    assert code == 1
    assert out == ""
    assert err == (
        f"lakecompute: error: No lakecompute dataset at {str(tmp_path / 'nothing')!r}. The path does not "
        "exist. Check the path: a dataset is the folder that holds its zarr.json and versions/.\n"
    )


def test_cli_info_missing_version(capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    """``info --version N`` for a version that is not there says so and lists the versions there are."""
    lc.load(shapes).vacuum(keep_versions=1, progressbar=False)  # only the latest version is left
    latest = lc.load(shapes).version
    code, out, err = run_cli(capsys, "info", shapes, "--version", "0")
    assert (code, out) == (1, "")
    assert err == (
        f"lakecompute: error: The dataset at {shapes!r} has no version 0: its versions are {latest}. "
        f"'lakecompute log {shapes}' lists them.\n"
    )


def test_cli_log(capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    """``log`` lists every committed version with its message and sample counts."""
    code, out, _ = run_cli(capsys, "log", shapes)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["version", "time", "message", "samples"]
    assert len(lines) == 1 + len(lc.load(shapes).log())
    assert "images=12, labels=12" in lines[-1]


def test_cli_ingest_classification(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``ingest-classification`` builds images + labels from class folders and reports what it did."""
    counts = write_image_folder(tmp_path / "src", n=20, size=(16, 16))
    dest = str(tmp_path / "out")
    code, out, _ = run_cli(capsys, "ingest-classification", str(tmp_path / "src"), dest, "--no-progress")
    assert code == 0
    assert f"Ingested 20 images of 3 classes ({', '.join(CLASS_NAMES)}) into {dest}." in out
    assert "Images stored as png: 5 of 20 files kept as they are, 15 converted (" in out
    ds = lc.load(dest)
    assert np.bincount(ds.labels.numpy()).tolist() == [counts[c] for c in CLASS_NAMES]
    # A second run refuses to replace the dataset unless asked.
    code, _, err = run_cli(capsys, "ingest-classification", str(tmp_path / "src"), dest, "--no-progress")
    assert code == 1
    assert "overwrite" in err
    code, _, _ = run_cli(
        capsys, "ingest-classification", str(tmp_path / "src"), dest, "--overwrite", "--no-progress",
        "--image-compression", "none", "--num-workers", "0",
    )  # fmt: skip
    assert code == 0
    assert lc.load(dest).images.sample_compression is None


def test_cli_ingest_classification_corrupt_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A corrupt file fails the ingest with exit 1 naming it; ``--skip-errors`` skips and lists it."""
    write_image_folder(tmp_path / "src", n=6, size=(16, 16))
    (tmp_path / "src" / "circle" / "broken.png").write_bytes(b"not a png")
    args = ["ingest-classification", str(tmp_path / "src"), str(tmp_path / "out"), "--no-progress"]
    code, _, err = run_cli(capsys, *args)
    assert code == 1
    assert "broken.png" in err
    code, out, err = run_cli(capsys, *args, "--skip-errors")
    assert code == 0
    assert "Ingested 6 images" in out
    assert "lakecompute: warning: Skipped 1 of 7 images" in err
    assert "broken.png" in err


def test_cli_ingest_coco(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``ingest-coco`` reads a COCO folder and JSON into a dataset and says how many annotations."""
    from tests.vision.conftest import write_coco

    images, annotations = write_coco(tmp_path / "coco")
    dest = str(tmp_path / "out")
    code, out, err = run_cli(capsys, "ingest-coco", str(images), str(annotations), dest, "--no-progress")
    assert code == 0, err
    assert f"Ingested 4 images with 5 annotations into {dest}." in out
    ds = lc.load(dest)
    assert ds.image_id.numpy().tolist() == [10, 11, 12, 13]
    assert "masks" in ds.tensors
    code, _, _ = run_cli(
        capsys,
        "ingest-coco",
        str(images),
        str(annotations),
        dest,
        "--overwrite",
        "--no-masks",
        "--no-progress",
    )
    assert code == 0
    assert "masks" not in lc.load(dest).tensors


def test_cli_ingest_coco_resume(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``--checkpoint-interval`` keeps a failed ingest's progress; ``--resume`` finishes it."""
    from tests.vision.conftest import write_coco

    images, annotations = write_coco(tmp_path / "coco")
    (images / "c.jpg").rename(tmp_path / "c.jpg")
    args = ["ingest-coco", str(images), str(annotations), str(tmp_path / "out"), "--no-progress"]
    code, _, err = run_cli(capsys, *args, "--checkpoint-interval", "1")
    assert code == 1
    assert "c.jpg" in err
    assert len(lc.load(str(tmp_path / "out"))) == 2
    (tmp_path / "c.jpg").rename(images / "c.jpg")
    code, out, err = run_cli(capsys, *args, "--checkpoint-interval", "1", "--resume")
    assert code == 0, err
    assert "Ingested 4 images with 5 annotations" in out


def test_cli_ingest_yolo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``ingest-yolo`` reads a YOLO folder (one split with --split) and says how many objects."""
    from tests.vision.conftest import write_yolo

    src = write_yolo(tmp_path / "yolo")
    dest = str(tmp_path / "out")
    code, out, err = run_cli(capsys, "ingest-yolo", str(src), dest, "--no-progress", "--split", "train")
    assert code == 0, err
    assert f"Ingested 3 images with 3 objects into {dest}." in out
    assert lc.load(dest).labels.info.class_names == ["car", "person", "dog"]


def test_cli_show_draws_targets(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``show`` draws a COCO dataset's boxes, masks and keypoints; ``--no-targets`` leaves them out."""
    from tests.vision.conftest import write_coco

    images, annotations = write_coco(tmp_path / "coco")
    dest = str(tmp_path / "ds")
    lc.ingest_coco(images, annotations, dest, progressbar=False)
    drawn, bare = tmp_path / "drawn.png", tmp_path / "bare.png"
    assert run_cli(capsys, "show", dest, "-o", str(drawn))[0] == 0
    assert run_cli(capsys, "show", dest, "-o", str(bare), "--no-targets")[0] == 0
    a, b = np.asarray(Image.open(drawn)), np.asarray(Image.open(bare))
    assert a.shape == b.shape
    assert not np.array_equal(a, b)


def test_cli_compact(capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    """``compact`` commits a new version with the same content."""
    before = lc.load(shapes)
    before.extend({"images": before.images.numpy()[:3], "labels": [0, 1, 2]})  # a second fragment
    images = before.images.numpy()
    code, out, _ = run_cli(capsys, "compact", shapes)
    assert code == 0
    after = lc.load(shapes)
    assert out.strip() == f"Compacted {shapes}: version {after.version}."
    assert after.version == before.version + 1
    assert np.array_equal(after.images.numpy(), images)


def test_cli_show(capsys: pytest.CaptureFixture[str], shapes: str, tmp_path: Path) -> None:
    """``show`` writes a contact sheet PNG of rows x cols cells (or the chosen indices)."""
    grid = tmp_path / "grid.png"
    code, out, _ = run_cli(
        capsys, "show", shapes, "--tensor", "images", "--rows", "2", "--cols", "3", "-o", str(grid)
    )
    assert code == 0
    assert out.strip() == f"Wrote {grid} (288x220)."
    with Image.open(grid) as image:
        assert image.size == (288, 220)
    code, _, _ = run_cli(capsys, "show", shapes, "--indices", "0,5,11", "--cols", "3", "-o", str(grid))
    assert code == 0
    with Image.open(grid) as image:
        assert image.size == (288, 110)


def test_cli_show_errors(capsys: pytest.CaptureFixture[str], shapes: str, tmp_path: Path) -> None:
    """An unknown tensor or an index out of range exits 1 with a message."""
    code, _, err = run_cli(capsys, "show", shapes, "--tensor", "pixels", "-o", str(tmp_path / "g.png"))
    assert code == 1
    assert "'pixels' does not exist" in err
    code, _, err = run_cli(capsys, "show", shapes, "--indices", "3,99", "-o", str(tmp_path / "g.png"))
    assert code == 1
    assert "[99]" in err
    code, _, err = run_cli(capsys, "show", shapes, "--indices", "a,b", "-o", str(tmp_path / "g.png"))
    assert code == 1
    assert "comma-separated integers" in err


def test_cli_show_spreads_over_classes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Without ``--indices``, ``show`` takes an equal share of every class, spread within it, every time."""
    from lakecompute.viz import contact_sheet

    ds = lc.load(_sorted_shapes(str(tmp_path / "sorted")))  # 0-4 circles, 5-9 squares, 10-14 triangles
    for attempt in range(2):
        grid = tmp_path / f"grid{attempt}.png"
        code, _, _ = run_cli(capsys, "show", ds.path, "--rows", "1", "--cols", "6", "-o", str(grid))
        assert code == 0
        with Image.open(grid) as image:
            shown = np.asarray(image.convert("RGB"))
        expected = contact_sheet(ds, indices=[1, 3, 6, 8, 11, 13], cols=6)  # two of each class
        assert np.array_equal(shown, np.asarray(expected))


def test_cli_show_labels_none_spreads_over_samples(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--labels none`` captions with indices only and spreads evenly over all samples."""
    from lakecompute.viz import contact_sheet

    ds = lc.load(_sorted_shapes(str(tmp_path / "sorted")))
    grid = tmp_path / "grid.png"
    code, _, _ = run_cli(
        capsys, "show", ds.path, "--labels", "none", "--cols", "3", "--rows", "1", "-o", str(grid)
    )
    assert code == 0
    with Image.open(grid) as image:
        expected = contact_sheet(ds, indices=[2, 7, 12], cols=3, label_tensor=None)
        assert np.array_equal(np.asarray(image.convert("RGB")), np.asarray(expected))


def test_cli_vacuum(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``vacuum`` prints what it removed; the latest version reads the same and older ones are gone."""
    path = str(tmp_path / "vac")
    script = (
        "import numpy as np, lakecompute as lc\n"
        f"ds = lc.empty({path!r})\n"
        "ds.create_tensor('x', dtype='int64')\n"
        "for i in range(3):\n"
        "    ds.x.extend(np.arange(100) + i)\n"
        "ds.compact()\n"
    )
    # Written by a process that has ended: vacuum never removes data of a writer still running.
    subprocess.run([sys.executable, "-c", script], check=True)
    values = lc.load(path).x.numpy()
    versions = len(lc.load(path).log())
    code, out, _ = run_cli(capsys, "vacuum", path)  # the default grace period keeps today's data
    assert (code, out) == (0, f"Vacuumed {path}: nothing to remove.\n")
    code, out, _ = run_cli(capsys, "vacuum", path, "--grace-seconds", "0", "--keep-versions", "1")
    assert code == 0
    assert re.fullmatch(
        rf"Vacuumed {re.escape(path)}: removed {versions - 1} versions, 1 segment and 0 chunks; "
        r"[0-9.]+ kB freed\.\n",
        out,
    ), out
    assert np.array_equal(lc.load(path).x.numpy(), values)
    assert [entry["version"] for entry in lc.load(path).log()] == [versions - 1]


@pytest.mark.parametrize(
    "argv",
    [["log", "{ds}"], ["demo", "--samples", "6", "--num-workers", "0", "--no-progress"]],
    ids=["log", "demo"],
)
def test_cli_closed_pipe_is_quiet(shapes: str, tmp_path: Path, argv: list[str]) -> None:
    """When the reader of the output is gone (``| head``), the command stops with 141 and prints nothing."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # no reader at all: the first write fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "lakecompute", *(a.format(ds=shapes) for a in argv)],
            stdout=write_end, stderr=subprocess.PIPE, cwd=tmp_path, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode == 141


def test_cli_hints_name_flags() -> None:
    """Hints in library messages come out naming the command's flags instead of Python arguments."""
    from lakecompute.cli import shell_message

    assert shell_message(str(lc.DatasetExistsError("x"))) == (
        "A dataset already exists at 'x'. Pass --overwrite to replace it."
    )
    assert shell_message("Fix or remove the file, or pass skip_errors=True to skip unreadable files.") == (
        "Fix or remove the file, or pass --skip-errors to skip unreadable files."
    )
    assert shell_message("Expected keep_versions >= 1. Got 0.") == "Expected --keep-versions >= 1. Got 0."


def test_cli_demo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``demo`` ingests, runs flip -> resize on workers, writes two contact sheets, and says where."""
    out_dir = tmp_path / "demo"
    code, out, _ = run_cli(
        capsys, "demo", "--output-dir", str(out_dir), "--samples", "40", "--num-workers", "2", "--no-progress"
    )
    assert code == 0
    for name in ("before.png", "after.png"):
        assert str(out_dir / name) in out
        with Image.open(out_dir / name) as image:
            assert image.format == "PNG"
    src, flipped = lc.load(out_dir / "shapes"), lc.load(out_dir / "shapes-flipped-64")
    assert len(src) == len(flipped) == 40
    assert flipped.images.shape == (40, 64, 64, 3)
    expected = np.asarray(
        Image.fromarray(np.flip(src.images[7].numpy(), axis=0)).resize((64, 64), Image.BILINEAR)
    )
    assert np.array_equal(flipped.images[7].numpy(), expected)
    assert "lakecompute info" in out


def test_cli_demo_replaces_only_its_own_image_folder(tmp_path: Path) -> None:
    """A second demo into the same folder replaces the image folder the first wrote; a folder holding a file
    the demo did not write is refused and kept whole."""
    from lakecompute.demo import run_demo

    out_dir = tmp_path / "demo"
    run_demo(str(out_dir), n=6, num_workers=0, progressbar=False)
    run_demo(str(out_dir), n=6, num_workers=0, progressbar=False)  # its own folder: replaced
    mine = out_dir / "shapes-files" / "circle" / "notes.txt"
    mine.write_text("keep me")
    with pytest.raises(lc.InvalidArgumentError, match=r"circle/notes\.txt"):
        run_demo(str(out_dir), n=6, num_workers=0, progressbar=False)
    assert mine.read_text() == "keep me"


def test_cli_runs_as_a_module(shapes: str) -> None:
    """``python -m lakecompute`` runs the same command line in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-m", "lakecompute", "info", shapes], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "samples=12" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "lakecompute", "log", shapes + "-missing"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "No lakecompute dataset" in proc.stderr
