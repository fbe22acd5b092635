"""overwrite=True and lc.delete replace or remove a lakecompute dataset and nothing else: a mistyped path
that names a folder (or mem:// / s3:// prefix) of someone's own files is refused, files untouched, on
every way in (lc.empty, lc.like, lc.dataset, lc.delete, every ingest, the command line)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.demo import write_image_folder
from lakecompute.storage import TEMP_PREFIX, open_backend

REFUSED = (
    r"holds something other than a lakecompute dataset \({}\)\. .*never other files\. Delete them yourself"
)


def _own_files(folder: Path) -> dict[str, bytes]:
    """A folder of someone's own files: one at the top, one in a sub-folder; returns what they hold."""
    (folder / "notes").mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"keep me")
    (folder / "notes" / "b.md").write_bytes(b"# mine")
    return _contents(folder)


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _small_dataset(path: str) -> lc.Dataset:
    ds = lc.empty(path, overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(3))
    return ds


@pytest.mark.parametrize("overwrite", [True, False])
def test_empty_refuses_a_folder_of_other_files(tmp_path: Path, overwrite: bool) -> None:
    """lc.empty into a folder of other files is refused with overwrite=True too, naming what it found and
    what to do, and every file stays as it was."""
    folder = tmp_path / "mine"
    before = _own_files(folder)
    with pytest.raises(lc.InvalidArgumentError, match=REFUSED.format("'a.txt', 'notes'")) as info:
        lc.empty(str(folder), overwrite=overwrite)
    assert str(folder) in str(info.value)
    assert "choose an empty or new folder" in str(info.value)
    assert _contents(folder) == before
    assert not lc.exists(str(folder))


def test_like_and_dataset_refuse_a_folder_of_other_files(tmp_path: Path) -> None:
    """lc.like(overwrite=True) and lc.dataset go through the same refusal; the files stay."""
    folder = tmp_path / "mine"
    before = _own_files(folder)
    source = _small_dataset(str(tmp_path / "src"))
    with pytest.raises(lc.InvalidArgumentError, match=REFUSED.format("'a.txt', 'notes'")):
        lc.like(str(folder), source, overwrite=True)
    with pytest.raises(lc.InvalidArgumentError, match=REFUSED.format("'a.txt', 'notes'")):
        lc.dataset(str(folder))
    assert _contents(folder) == before


@pytest.mark.parametrize("missing_ok", [True, False])
def test_delete_refuses_a_folder_of_other_files(tmp_path: Path, missing_ok: bool) -> None:
    """lc.delete refuses a folder of other files, missing_ok or not (it is not missing: it is someone's),
    naming what it found; the files stay."""
    folder = tmp_path / "mine"
    before = _own_files(folder)
    pattern = r"other than a lakecompute dataset \('a.txt', 'notes'\), left as it is\. .*Delete them yourself"
    with pytest.raises(lc.DatasetNotFoundError, match=pattern):
        lc.delete(str(folder), missing_ok=missing_ok)
    assert _contents(folder) == before


def test_a_file_is_refused_as_a_location(tmp_path: Path) -> None:
    """A path naming a file is refused as such by lc.empty (overwrite=True too) and lc.delete; it stays."""
    path = tmp_path / "report.pdf"
    path.write_bytes(b"%PDF")
    with pytest.raises(lc.InvalidArgumentError, match=r"\(a file, not a folder\)"):
        lc.empty(str(path), overwrite=True)
    with pytest.raises(lc.DatasetNotFoundError, match=r"\(a file, not a folder\)"):
        lc.delete(str(path), missing_ok=True)
    assert path.read_bytes() == b"%PDF"


def test_a_plain_zarr_group_is_not_ours_to_replace(tmp_path: Path) -> None:
    """A zarr group that is not a lakecompute dataset (someone else's zarr.json) is refused by overwrite."""
    import zarr

    group = zarr.create_group(str(tmp_path / "plain"))
    group.create_array("a", shape=(3,), dtype="int8")[:] = [1, 2, 3]
    with pytest.raises(lc.InvalidArgumentError, match=REFUSED.format("'a', 'zarr.json'")):
        lc.empty(str(tmp_path / "plain"), overwrite=True)
    assert zarr.open_group(str(tmp_path / "plain"), mode="r")["a"][:].tolist() == [1, 2, 3]


def test_many_names_are_summarised(tmp_path: Path) -> None:
    """The refusal names the first five entries and counts the rest."""
    for i in range(8):
        (tmp_path / f"f{i}.txt").write_text("x")
    with pytest.raises(lc.InvalidArgumentError, match=REFUSED.format("'f0.txt', .*'f4.txt' and 3 more")):
        lc.empty(str(tmp_path), overwrite=True)


def test_what_overwrite_still_replaces(tmp_path: Path) -> None:
    """An empty folder, a dataset, a damaged dataset, one half removed and one half created by a kill
    (the temp file of its first zarr.json only) are all replaced by overwrite=True."""
    empty_folder = tmp_path / "empty"
    empty_folder.mkdir()
    dataset = str(tmp_path / "ds")
    _small_dataset(dataset)
    damaged = str(tmp_path / "damaged")
    _small_dataset(damaged)
    Path(damaged, "zarr.json").write_text("{not json")
    removed = str(tmp_path / "removed")
    _small_dataset(removed)
    marker = {"zarr_format": 3, "node_type": "group", "attributes": {"lakecompute-incomplete": {}}}
    Path(removed, "zarr.json").write_text(json.dumps(marker))
    created = tmp_path / "created"
    created.mkdir()
    (created / f"{TEMP_PREFIX}0123abcd.zarr.json").write_text('{"zarr_format": 3')
    for path in (str(empty_folder), dataset, damaged, removed, str(created)):
        ds = lc.empty(path, overwrite=True)
        assert (ds.version, list(ds.tensors)) == (0, []), path
        assert lc.exists(path)
    left = sorted(os.listdir(created))
    assert {"zarr.json", "versions"} <= set(left)
    assert not [name for name in left if name.startswith(TEMP_PREFIX)]  # the killed create's temp file went


def test_a_create_killed_before_its_marker_is_finished_without_overwrite(tmp_path: Path) -> None:
    """A folder holding only the temp file of a first zarr.json write (a create killed there) is no
    dataset; lc.empty finishes the create without overwrite=True, and lc.delete removes it."""
    created = tmp_path / "created"
    created.mkdir()
    (created / f"{TEMP_PREFIX}0123abcd.zarr.json").write_text("{")
    assert not lc.exists(str(created))
    with pytest.raises(lc.DatasetNotFoundError, match=r"was interrupted"):
        lc.load(str(created))
    assert lc.empty(str(created)).version == 0
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / f"{TEMP_PREFIX}4567.zarr.json").write_text("{")
    lc.delete(str(tmp_path / "again"))
    assert not (tmp_path / "again").exists()


def test_memory_prefix_with_other_objects_is_refused() -> None:
    """A mem:// location holding objects lakecompute did not write is refused by overwrite and delete."""
    url = "mem://overwrite-safety-foreign"
    backend = open_backend(url)
    backend.write("notes.txt", b"keep me")
    try:
        with pytest.raises(lc.InvalidArgumentError, match=REFUSED.format("'notes.txt'")):
            lc.empty(url, overwrite=True)
        with pytest.raises(lc.DatasetNotFoundError, match=r"\('notes.txt'\), left as it is"):
            lc.delete(url, missing_ok=True)
        assert backend.read("notes.txt") == b"keep me"
    finally:
        backend.delete_tree("")


def _ingest_classification(src: Path, dest: Path) -> Any:
    return lc.ingest_classification(src, dest, overwrite=True, progressbar=False)


def _ingest_coco(src: Path, dest: Path) -> Any:
    from tests.vision.conftest import write_coco

    images, annotations = write_coco(src.parent / "coco")
    return lc.ingest_coco(images, annotations, dest, overwrite=True, progressbar=False)


def _ingest_yolo(src: Path, dest: Path) -> Any:
    from tests.vision.conftest import write_yolo

    return lc.ingest_yolo(write_yolo(src.parent / "yolo"), dest, overwrite=True, progressbar=False)


def _from_numpy(src: Path, dest: Path) -> Any:
    return lc.from_numpy(dest, {"x": np.arange(4)}, overwrite=True)


@pytest.mark.parametrize(
    "ingest",
    [_ingest_classification, _ingest_coco, _ingest_yolo, _from_numpy],
    ids=["classification", "coco", "yolo", "from_numpy"],
)
def test_every_ingest_refuses_a_folder_of_other_files(
    tmp_path: Path, ingest: Callable[[Path, Path], Any]
) -> None:
    """Each ingest with overwrite=True into a folder of other files is refused and leaves them."""
    pytest.importorskip("pycocotools")
    pytest.importorskip("yaml")
    src = tmp_path / "src"
    write_image_folder(src, n=6, size=(16, 16))
    dest = tmp_path / "mine"
    before = _own_files(dest)
    with pytest.raises(lc.InvalidArgumentError, match=REFUSED.format("'a.txt', 'notes'")):
        ingest(src, dest)
    assert _contents(dest) == before


def test_cli_overwrite_refuses_a_folder_of_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ingest-classification --overwrite`` into a folder of other files exits 1 naming what it found,
    and the files stay."""
    from lakecompute.cli import main

    write_image_folder(tmp_path / "src", n=6, size=(16, 16))
    dest = tmp_path / "mine"
    before = _own_files(dest)
    code = main(["ingest-classification", str(tmp_path / "src"), str(dest), "--overwrite", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert "('a.txt', 'notes')" in err
    assert "(--overwrite included), never other files. Delete them yourself" in err
    assert _contents(dest) == before
