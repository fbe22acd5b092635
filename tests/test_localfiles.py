"""Names read from untrusted files stay inside the folder given; files outside a dataset are written whole."""

from __future__ import annotations

import os

import pytest

from lakecompute.errors import InvalidArgumentError, StorageError
from lakecompute.localfiles import Folder, confine, inside, write_atomic


def test_confine_resolves_inside(tmp_path):
    """A relative name inside the folder resolves to its real path."""
    (tmp_path / "a").mkdir()
    assert confine(str(tmp_path), "a/../a/b.png", what="x") == os.path.realpath(tmp_path / "a" / "b.png")


@pytest.mark.parametrize("name", ["../secret.png", "a/../../b.png", "/etc/passwd", "", "a\x00b", 3, None])
def test_confine_refuses_escapes_and_non_names(tmp_path, name):
    """Parent references, absolute paths, empty names, NUL bytes and non-strings are refused by entry."""
    with pytest.raises(InvalidArgumentError, match="file_name of image 7"):
        confine(str(tmp_path), name, what="file_name of image 7")


def test_confine_follows_symlinks(tmp_path):
    """A symbolic link inside the folder that points outside it is refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "link")
    with pytest.raises(InvalidArgumentError, match="resolves outside"):
        confine(str(root), "link/x.png", what="entry")
    assert inside(str(tmp_path), str(root / "link" / "x.png"))


@pytest.mark.parametrize("target", ["inside", "outside"])
@pytest.mark.parametrize("where", ["last", "middle"])
def test_folder_resolves_links_anywhere_in_the_name(tmp_path, target, where):
    """A folder resolved once confines each name like `confine`: a link as the name's last component or
    in its middle is followed, kept when it stays inside and refused when it leads out."""
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    dest = root / "real" if target == "inside" else tmp_path / "outside"
    if where == "last":
        os.symlink(dest / "x.png", root / "link.png")
        name = "link.png"
    else:
        os.symlink(dest, root / "link")
        name = "link/x.png"
    folder = Folder.of(str(root))
    if target == "outside":
        with pytest.raises(InvalidArgumentError, match="resolves outside"):
            folder.confine(name, what="entry")
        return
    assert folder.confine(name, what="entry") == os.path.realpath(root / "real" / "x.png")


def test_folder_plain_names_match_realpath(tmp_path):
    """Names without links or parent references resolve to what realpath gives, through a folder that is
    itself reached by a link."""
    (tmp_path / "real" / "a").mkdir(parents=True)
    os.symlink(tmp_path / "real", tmp_path / "alias")
    folder = Folder.of(str(tmp_path / "alias"))
    for name in ["a/b.png", "./a//b.png", "c.png", "a/./c/d.png"]:
        assert folder.confine(name, what="x") == os.path.realpath(tmp_path / "alias" / name)


def test_write_atomic_replaces_whole(tmp_path):
    """A write replaces the file's content and leaves no temporary file."""
    path = tmp_path / "a.json"
    path.write_bytes(b"old")
    write_atomic(str(path), b"new")
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["a.json"]


def test_write_atomic_failure_keeps_previous(tmp_path):
    """A write that cannot happen is a StorageError naming the path, and nothing is left behind."""
    with pytest.raises(StorageError, match="missing"):
        write_atomic(str(tmp_path / "missing" / "a.json"), b"x")
    assert os.listdir(tmp_path) == []
