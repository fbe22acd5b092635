"""Names read from untrusted files stay inside the folder given; files outside a dataset are written whole."""

from __future__ import annotations

import json
import os

import pytest

from lakecompute.errors import InvalidArgumentError, StorageError
from lakecompute.localfiles import (
    LISTING,
    Folder,
    FolderExport,
    Watch,
    atomic_file,
    atomic_path,
    confine,
    inside,
    write_atomic,
)


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


def _export(root, files, **options):
    """One FolderExport of ``files`` (name -> bytes) into ``root``, index ``index.json``."""
    with FolderExport(str(root), **options) as out:
        for name, data in files.items():
            out.write(name, data, what=f"entry {name!r}")
        out.commit(str(root / "index.json"), b"{}")
        return out


def _files(root):
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")
    )


def test_folder_export_lists_each_file_with_its_digest(tmp_path):
    """The listing names the scope, what was recorded about it, and every file with its size and hash."""
    _export(tmp_path, {"a/x.bin": b"12345"}, scope="train", about={"names": ["cat"]})
    doc = json.loads((tmp_path / LISTING).read_text())
    assert doc["format"] == "lakecompute-export"
    (digest,) = doc["scopes"]["train"]["files"]["a/x.bin"]
    assert digest.startswith("5:")
    assert len(digest) == 2 + 32
    assert doc["scopes"]["train"]["about"] == {"names": ["cat"]}


def test_folder_export_replaces_only_the_scopes_it_names(tmp_path):
    """An export of scope 'a' removes only what the last export of 'a' wrote; 'b' stays, and is what
    `earlier` reports; replaces='all' removes both."""
    _export(tmp_path, {"a/1": b"1", "a/2": b"2"}, scope="a")
    _export(tmp_path, {"b/1": b"b"}, scope="b", about={"k": 1})
    out = _export(tmp_path, {"a/2": b"2"}, scope="a")
    assert _files(tmp_path) == ["a/2", "b/1", "index.json"]
    assert out.earlier == {"b": {"k": 1}}
    _export(tmp_path, {"c": b"c"}, replaces="all")
    assert _files(tmp_path) == ["c", "index.json"]
    assert not (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists()


def test_folder_export_watch_refuses_a_link_to_a_folder(tmp_path):
    """A symbolic link to a folder inside the watched folder (a reader would follow it) is refused, named
    with a trailing slash, and nothing changes."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "root"
    _export(root, {"images/a.png": b"a"})
    (root / "images" / "more").symlink_to(elsewhere)
    watch = Watch("images", frozenset({".png"}), "a reader reads every image there")
    with pytest.raises(InvalidArgumentError, match=r"'images/more/'.*move these away"):
        _export(root, {"images/b.png": b"b"}, watch=watch)
    assert _files(root) == ["images/a.png", "index.json"]


def test_write_atomic_removes_a_killed_writers_temporary_file(tmp_path):
    """A temporary file a killed process left beside the target is removed by the next write of that
    target; one of a live process, or of another target, is kept."""
    import subprocess
    import sys

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(gone.stdout)
    left = tmp_path / f".a.json.{dead}.abc.partial"
    live = tmp_path / f".a.json.{os.getpid()}.def.partial"
    other = tmp_path / f".b.json.{dead}.ghi.partial"
    for p in (left, live, other):
        p.write_bytes(b"half")
    write_atomic(str(tmp_path / "a.json"), b"whole")
    assert sorted(os.listdir(tmp_path)) == sorted(["a.json", live.name, other.name])


def test_atomic_file_and_atomic_path_write_in_pieces_whole_or_not_at_all(tmp_path):
    """The file written in pieces (through a file object, or by name) appears whole at the end; an
    exception in the block leaves the previous file and no temporary file."""
    target = tmp_path / "t.bin"
    target.write_bytes(b"previous")
    with atomic_file(str(target)) as f:
        f.write(b"one ")
        assert target.read_bytes() == b"previous"
        f.write(b"two")
    assert target.read_bytes() == b"one two"
    with atomic_path(str(target)) as name:
        assert os.path.dirname(name) == str(tmp_path)
        assert os.path.basename(name).startswith(".t.bin.")
        with open(name, "wb") as g:
            g.write(b"by name")
        assert target.read_bytes() == b"one two"
    assert target.read_bytes() == b"by name"
    for writer in (atomic_file, atomic_path):
        with pytest.raises(RuntimeError), writer(str(target)):
            raise RuntimeError("the writer failed")
        assert target.read_bytes() == b"by name"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t.bin"]


def _open_paths() -> set[str]:
    """What this process's descriptors name (deleted files end with " (deleted)")."""
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
    return names


def test_a_large_file_replaced_is_closed_after_the_call_and_a_link_is_replaced_not_followed(tmp_path):
    """A large file replaced (at least 64 MiB: held open across the rename, its blocks freed when it
    closes, on a thread after the write returns) leaves the new bytes in place at once and no descriptor
    of it open for long. A link at the path is replaced itself; what it points at is neither held nor
    changed."""
    from tests.helpers import wait_until

    target = tmp_path / "big.bin"
    with open(target, "wb") as f:
        f.truncate(65 << 20)  # 65 MiB (sparse): large enough to be held
    write_atomic(str(target), b"n" * 10)
    assert target.read_bytes() == b"n" * 10
    gone = f"{target} (deleted)"
    wait_until(lambda: gone not in _open_paths(), 10, "the replaced file's descriptor closed")
    other = tmp_path / "other.bin"
    with open(other, "wb") as f:
        f.truncate(65 << 20)
    link = tmp_path / "link.bin"
    link.symlink_to(other)
    write_atomic(str(link), b"l")
    assert not link.is_symlink()
    assert link.read_bytes() == b"l"
    assert other.stat().st_size == 65 << 20
    assert f"{other}" not in _open_paths()  # the link's target was never opened
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.bin", "link.bin", "other.bin"]
