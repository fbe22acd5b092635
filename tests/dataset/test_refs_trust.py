"""Refs are verified, never trusted (issue 39): a branch's head hint from another line is ignored, a ref
naming a version that is not there is damage, and version names are ASCII digits or names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.helpers import run_cli


def _branched(path: Path) -> lc.Dataset:
    """main: x = 0..4 then 5 and 6 appended (two versions newer than the fork); exp: x[0] = -1."""
    ds = lc.empty(str(path))
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(5))
    ds.checkout("exp", create=True)
    ds.x[0] = -1
    main = lc.load(str(path))
    main.x.append(5)
    main.x.append(6)
    return ds


def _line(path: Path, branch: str) -> str:
    line: str = json.loads((path / "refs" / "branches" / f"{branch}.json").read_text())["line"]
    return line


def test_a_head_hint_from_another_line_is_ignored(tmp_path: Path) -> None:
    """exp's HEAD hint rewritten to main's newer head: exp still reads its own rows, and commits on it."""
    path = tmp_path / "ds"
    exp = _branched(path)
    main_head = lc.load(str(path)).version
    assert main_head > exp.version
    hint = path / "refs" / "lines" / _line(path, "exp") / "HEAD"
    hint.write_bytes(f"{main_head:010d} {main_head:010d}".encode())
    loaded = lc.load(str(path), branch="exp")
    assert loaded.version == exp.version
    assert loaded.x.numpy().tolist() == [-1, 1, 2, 3, 4]
    loaded.x.append(7)
    assert lc.load(str(path), branch="exp").x.numpy().tolist() == [-1, 1, 2, 3, 4, 7]
    assert lc.load(str(path)).x.numpy().tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert lc.load(str(path), version="exp").log()[-1]["parents"] == [exp.version]


def test_a_head_hint_naming_an_unfinished_commit_of_the_line_is_ignored(tmp_path: Path) -> None:
    """A hint naming a manifest of the line whose commit never moved the branch is not the head either."""
    path = tmp_path / "ds"
    exp = _branched(path)
    body = json.loads((path / "versions" / f"{exp.version:010d}.json").read_text())
    body["version"] = 60
    body["reach"] = {**body["reach"], body["line"]: 60}
    (path / "versions" / "0000000060.json").write_text(json.dumps(body))
    (path / "refs" / "lines" / _line(path, "exp") / "HEAD").write_bytes(b"0000000060 0000000060")
    assert lc.load(str(path), branch="exp").version == exp.version


def test_a_move_to_another_lines_version_is_corrupt(tmp_path: Path) -> None:
    """A move file of exp's line naming main's head is damage, not exp's head."""
    path = tmp_path / "ds"
    exp = _branched(path)
    main_head = lc.load(str(path)).version
    line = path / "refs" / "lines" / _line(path, "exp")
    (line / "HEAD").unlink()
    (line / f"{exp.version:010d}.json").write_bytes(f"{main_head:010d}".encode())
    with pytest.raises(lc.DatasetCorruptError, match=r"which is not on the branch") as info:
        lc.load(str(path), branch="exp")
    assert info.value.file == f"refs/lines/{_line(path, 'exp')}/{exp.version:010d}.json"


def test_a_tag_naming_a_missing_version_is_corrupt(tmp_path: Path) -> None:
    """A tag whose version is not stored is damage (DatasetCorruptError naming the tag), never
    'no dataset here, create one with lc.empty'."""
    path = tmp_path / "ds"
    ds = _branched(path)
    (path / "refs" / "tags").mkdir(parents=True, exist_ok=True)
    (path / "refs" / "tags" / "gone.json").write_text(json.dumps({"version": 99, "created": 0.0}))
    for call in (
        lambda: lc.load(str(path), version="gone"),
        lambda: ds.diff("gone"),
        lambda: lc.load(str(path)).restore("gone"),
        lambda: lc.load(str(path)).merge("gone"),
        lambda: ds.tag("again", version="gone"),
    ):
        with pytest.raises(lc.DatasetCorruptError) as info:
            call()
        assert not isinstance(info.value, lc.DatasetNotFoundError)
        assert info.value.file == "refs/tags/gone.json"
        assert "names version 99, which is not stored" in str(info.value)
        assert "lc.empty" not in str(info.value)


def test_a_branch_starting_at_a_missing_version_is_corrupt(tmp_path: Path) -> None:
    """A branch ref (no moves yet) whose start version is not stored is damage too."""
    path = tmp_path / "ds"
    _branched(path)
    ref = {"line": "ab" * 16, "start": 77, "created": 0.0, "from": "main"}
    (path / "refs" / "branches" / "ghost.json").write_text(json.dumps(ref))
    with pytest.raises(lc.DatasetCorruptError, match=r"names version 77, which is not stored") as info:
        lc.load(str(path), branch="ghost")
    assert info.value.file == "refs/branches/ghost.json"
    with pytest.raises(lc.DatasetCorruptError):
        lc.load(str(path), version="ghost")


# Superscripts, a parenthesized digit, an Arabic-Indic and a fullwidth digit: digits to str.isdigit.
@pytest.mark.parametrize("name", ["²", "¹²", "⑴", "\u0663", "\uff11"])
def test_unicode_digits_are_not_version_numbers(tmp_path: Path, name: str) -> None:
    """Version names are ASCII digits or branch/tag names: anything else is InvalidArgumentError from every
    verb that takes one (never a raw ValueError)."""
    path = tmp_path / "ds"
    ds = _branched(path)
    main = lc.load(str(path))
    calls = {
        "load": lambda: lc.load(str(path), version=name),
        "load branch": lambda: lc.load(str(path), branch=name),
        "restore": lambda: main.restore(name),
        "diff a": lambda: main.diff(name),
        "diff b": lambda: main.diff(0, name),
        "merge": lambda: main.merge(name),
        "tag version": lambda: main.tag("t", version=name),
        "tag name": lambda: main.tag(name),
        "checkout": lambda: ds.checkout(name),
        "checkout create": lambda: ds.checkout(name, create=True),
    }
    for what, call in calls.items():
        with pytest.raises(lc.InvalidArgumentError) as info:
            call()
        assert name in str(info.value), what
        assert "ASCII" in str(info.value), (what, str(info.value))
    assert lc.load(str(path)).version == main.version  # nothing was committed


@pytest.mark.parametrize(
    "argv",
    [
        ["info", "{path}", "--version", "²"],
        ["restore", "{path}", "¹²"],
        ["diff", "{path}", "⑴", "main"],
        ["log", "{path}", "--branch", "²"],
    ],
)
def test_unicode_digits_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """The command line says what is wrong, with no traceback."""
    path = tmp_path / "ds"
    _branched(path)
    code, _out, err = run_cli(capsys, *[a.format(path=path) for a in argv])
    assert code == 1
    assert "Traceback" not in err
    assert "ASCII" in err


def test_checkout_of_a_version_number_points_to_load(tmp_path: Path) -> None:
    """ds.checkout(2) (Deep Lake's habit) says how to open version 2: lc.load(path, version=2)."""
    path = tmp_path / "ds"
    ds = _branched(path)
    for number in (2, "2"):
        with pytest.raises((lc.InvalidTypeError, lc.InvalidArgumentError)) as info:
            ds.checkout(number)  # type: ignore[arg-type]
        assert "lc.load(path, version=2)" in str(info.value)
    with pytest.raises(lc.InvalidTypeError, match=r"lc\.load\(path, version=2\)"):
        ds.checkout(2)  # type: ignore[arg-type]
    assert ds.branch == "exp"
