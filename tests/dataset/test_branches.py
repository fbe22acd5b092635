"""Branches, tags and restore: where writes land, what each name opens, and what stays untouched."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import open_backend
from tests.reliability.reliability_helpers import REPO_ROOT, double, script_env

SCRIPT = REPO_ROOT / "tests" / "reliability" / "versions_script.py"


def numbers(path: str | Path, n: int = 10) -> lc.Dataset:
    """A dataset with tensor ``x`` = 0..n-1 (int64) and ``y`` = 100 + 0..n-1, committed in one extend."""
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("y", dtype="int64")
    ds.extend({"x": np.arange(n), "y": 100 + np.arange(n)})
    return ds


def with_pending(ds: lc.Dataset, action: Any, tensor: str = "x", value: Any = 0) -> None:
    """Run ``action()`` inside a ``with ds:`` block that has appended ``value`` to ``tensor`` first."""
    with ds:
        ds[tensor].append(value)
        action()


def test_checkout_create_puts_writes_on_the_branch_only(tmp_path: Path) -> None:
    """Writes after checkout(create=True) land on the new branch; main keeps its version and values."""
    ds = numbers(tmp_path / "ds")
    main_version = ds.version
    ds.checkout("experiment", create=True)
    assert ds.branch == "experiment"
    ds.x[3] = -3
    ds.append({"x": 10, "y": 110})
    main = lc.load(str(tmp_path / "ds"))
    assert main.branch == "main"
    assert main.version == main_version
    np.testing.assert_array_equal(main.x.numpy(), np.arange(10))
    branch = lc.load(str(tmp_path / "ds"), branch="experiment")
    assert branch.x.numpy().tolist() == [0, 1, 2, -3, 4, 5, 6, 7, 8, 9, 10]
    assert branch.version == ds.version
    assert ds.branches == ["experiment", "main"]


def test_version_numbers_stay_unique_across_branches(tmp_path: Path) -> None:
    """Commits on two branches interleaved get distinct numbers, and version=N opens exactly that commit."""
    path = str(tmp_path / "ds")
    main = numbers(path)
    exp = lc.load(path)
    exp.checkout("exp", create=True)
    seen: dict[int, list[int]] = {}
    for i in range(4):
        main.x.append(1000 + i)
        seen[main.version] = main.x.numpy().tolist()
        exp.x.append(2000 + i)
        seen[exp.version] = exp.x.numpy().tolist()
    assert len(seen) == 8
    for version, values in seen.items():
        assert lc.load(path, version=version).x.numpy().tolist() == values
    numbers_in_log = [e["version"] for e in main.log(all_branches=True)]
    assert len(numbers_in_log) == len(set(numbers_in_log))


def test_checkout_switches_to_a_branch_head(tmp_path: Path) -> None:
    """checkout(name) moves the handle to that branch's newest version; unknown names are refused."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    ds.x.append(99)
    ds.checkout("main")
    assert (ds.branch, len(ds.x)) == ("main", 10)
    ds.checkout("exp")
    assert ds.x.numpy()[-1] == 99
    with pytest.raises(
        lc.RefNotFoundError, match=r"has no branch 'nope' \(it has \['exp', 'main'\]\)"
    ) as info:
        ds.checkout("nope")
    assert info.value.known == ["exp", "main"]
    assert isinstance(info.value, KeyError)
    with pytest.raises(lc.RefNotFoundError, match="has no branch 'nope'"):
        lc.load(path, branch="nope")


def test_checkout_refuses_pending_changes(tmp_path: Path) -> None:
    """Inside a `with` block with writes, switching or creating a branch is refused; nothing moves."""
    ds = numbers(tmp_path / "ds")
    with pytest.raises(lc.InvalidArgumentError, match="uncommitted changes"):
        with_pending(ds, lambda: ds.checkout("exp", create=True))
    assert ds.branches == ["main"]
    assert ds.branch == "main"


@pytest.mark.parametrize("name", ["12", "a/b", "..x", "-x", ".hidden", "x..y", "", "a" * 129, "dot."])
def test_invalid_branch_and_tag_names_are_refused(tmp_path: Path, name: str) -> None:
    """Names with slashes, leading dots or dashes, only digits, or over 128 characters are refused."""
    ds = numbers(tmp_path / "ds")
    with pytest.raises(lc.InvalidArgumentError, match="Invalid branch name"):
        ds.checkout(name, create=True)
    with pytest.raises(lc.InvalidArgumentError, match="Invalid tag name"):
        ds.tag(name)
    with pytest.raises(lc.InvalidTypeError, match="Expected a branch name as str"):
        ds.checkout(3, create=True)  # type: ignore[arg-type]


def test_branch_and_tag_names_are_taken_once(tmp_path: Path) -> None:
    """A branch or tag name cannot be created twice, nor used by a branch and a tag."""
    ds = numbers(tmp_path / "ds")
    ds.checkout("exp", create=True)
    ds.checkout("main")
    with pytest.raises(lc.RefExistsError, match="already has a branch named 'exp'") as info:
        ds.checkout("exp", create=True)
    assert (info.value.name, info.value.kind) == ("exp", "branch")
    ds.tag("v1")
    with pytest.raises(lc.RefExistsError, match="already has a tag named 'v1'"):
        ds.tag("v1")
    with pytest.raises(lc.RefExistsError, match="already has a tag named 'v1'"):
        ds.checkout("v1", create=True)
    with pytest.raises(lc.RefExistsError, match="already has a branch named 'exp'"):
        ds.tag("exp")


def test_branch_from_an_old_version(tmp_path: Path) -> None:
    """A handle opened at an old version starts a writable branch there with checkout(create=True)."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    first = ds.version
    ds.x.append(50)
    old = lc.load(path, version=first)
    assert old.branch is None
    with pytest.raises(lc.ReadOnlyError, match=r"ds\.checkout\(name, create=True\)"):
        old.x.append(1)
    old.checkout("fix", create=True)
    old.x.append(7)
    assert lc.load(path, branch="fix").x.numpy().tolist() == [*range(10), 7]
    assert lc.load(path).x.numpy().tolist() == [*range(10), 50]


def test_delete_branch(tmp_path: Path) -> None:
    """delete_branch removes the name (not main, not the current branch); its versions stay readable."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    ds.x.append(1)
    exp_version = ds.version
    with pytest.raises(lc.InvalidArgumentError, match="this handle is on it"):
        ds.delete_branch("exp")
    ds.checkout("main")
    with pytest.raises(lc.InvalidArgumentError, match=r"'main' branch .* cannot be deleted"):
        ds.delete_branch("main")
    ds.delete_branch("exp")
    assert ds.branches == ["main"]
    with pytest.raises(lc.RefNotFoundError, match="has no branch 'exp'"):
        ds.delete_branch("exp")
    with pytest.raises(lc.RefNotFoundError):
        lc.load(path, branch="exp")
    assert len(lc.load(path, version=exp_version).x) == 11  # until a vacuum collects it
    with pytest.raises(lc.ReadOnlyError, match="opened read-only"):
        lc.load(path, read_only=True).delete_branch("x")


def test_a_branch_deleted_while_a_writer_is_on_it(tmp_path: Path) -> None:
    """A writer whose branch was deleted (and made again under its name) cannot commit onto the new one."""
    path = str(tmp_path / "ds")
    writer = numbers(path)
    writer.checkout("exp", create=True)
    other = lc.load(path)
    other.delete_branch("exp")
    other.x.append(77)
    other.checkout("exp", create=True)
    with pytest.raises(lc.RefNotFoundError, match="deleted while this write committed"):
        writer.x.append(1)
    assert lc.load(path, branch="exp").x.numpy().tolist() == [*range(10), 77]


def test_tags_name_versions(tmp_path: Path) -> None:
    """A tag opens its version read-only, never moves, and is listed by ds.tags."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    assert ds.tag("v1.0") == ds.version
    tagged = ds.version
    ds.x.append(10)
    assert ds.tag("first", version=2) == 2
    old = lc.load(path, version="v1.0")
    assert (old.version, old.branch, old.read_only) == (tagged, None, True)
    np.testing.assert_array_equal(old.x.numpy(), np.arange(10))
    assert ds.tags == {"first": 2, "v1.0": tagged}
    with pytest.raises(lc.DatasetNotFoundError, match="It has no version 99"):
        ds.tag("later", version=99)
    ds.delete_tag("first")
    assert ds.tags == {"v1.0": tagged}
    with pytest.raises(lc.RefNotFoundError, match="has no tag 'first'"):
        ds.delete_tag("first")
    with pytest.raises(lc.RefNotFoundError, match="has no branch or tag 'v2'"):
        lc.load(path, version="v2")
    with pytest.raises(lc.InvalidArgumentError, match="either version="):
        lc.load(path, version="v1.0", branch="main")


def test_restore_undoes_a_bad_in_place_eval(tmp_path: Path) -> None:
    """restore(N) after an in-place eval commits a version equal to N, copying no data."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    before = ds.version
    double().eval(ds, progressbar=False, skip_ok=True)
    np.testing.assert_array_equal(ds.x.numpy(), 2 * np.arange(10))
    segments = sorted(os.listdir(tmp_path / "ds" / "segments"))
    bad = ds.version
    new = ds.restore(before)
    assert new == ds.version > bad
    np.testing.assert_array_equal(ds.x.numpy(), np.arange(10))
    np.testing.assert_array_equal(ds.y.numpy(), 100 + np.arange(10))
    assert sorted(os.listdir(tmp_path / "ds" / "segments")) == segments  # metadata only
    np.testing.assert_array_equal(lc.load(path, version=bad).x.numpy(), 2 * np.arange(10))
    entry = ds.log()[-1]
    assert entry["origin"] == {"op": "restore", "version": before}
    assert entry["parents"] == [bad]
    again = lc.load(path)
    assert again.version == new
    np.testing.assert_array_equal(again.x.numpy(), np.arange(10))


def test_restore_forgets_later_evals(tmp_path: Path) -> None:
    """After restoring to before an eval, running that eval again writes again (it is not 'already done')."""
    path = str(tmp_path / "out")
    out = lc.empty(path)
    out.create_tensor("x", dtype="int64")
    before = out.version
    double().eval(list(range(5)), out, progressbar=False)
    out.restore(before)
    assert len(out.x) == 0
    result = double().eval(list(range(5)), out, progressbar=False)
    assert result.outputs == {"x": 5}
    assert out.x.numpy().tolist() == [0, 2, 4, 6, 8]


def test_restore_by_tag_and_its_refusals(tmp_path: Path) -> None:
    """restore takes a tag; a pinned handle, pending changes and unknown versions are refused."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.tag("good")
    ds.x[0] = 42
    ds.restore("good")
    assert ds.x.numpy()[0] == 0
    with pytest.raises(lc.ReadOnlyError):
        lc.load(path, version=1).restore(0)
    with pytest.raises(lc.DatasetNotFoundError, match="It has no version 99"):
        ds.restore(99)
    with pytest.raises(lc.InvalidArgumentError, match="uncommitted changes"):
        with_pending(ds, lambda: ds.restore(1))


def test_reload_follows_the_branch(tmp_path: Path) -> None:
    """reload() moves a handle to the newest version of its own branch, not of main."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    other = lc.load(path, branch="exp")
    other.x.append(5)
    lc.load(path).x.append(6)
    ds.reload()
    assert (ds.branch, ds.version, ds.x.numpy()[-1]) == ("exp", other.version, 5)


def test_a_pickled_handle_stays_on_its_branch(tmp_path: Path) -> None:
    """A handle pickled on a branch reopens on that branch, and its writes land there."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    copy = pickle.loads(pickle.dumps(ds))
    assert (copy.branch, copy.version) == ("exp", ds.version)
    copy.x.append(3)
    assert lc.load(path, branch="exp").x.numpy()[-1] == 3
    assert len(lc.load(path).x) == 10


def _strip_history(path: Path) -> None:
    """Make a dataset look written before branches: manifests without branch fields, no refs."""
    for manifest in (path / "versions").glob("*.json"):
        body = json.loads(manifest.read_text())
        for key in ("branch", "line", "reach", "origin", "parents"):
            body.pop(key, None)
        for tensor in body["tensors"].values():
            tensor.pop("id", None)
        manifest.write_text(json.dumps(body, separators=(",", ":")))
    for folder in sorted((path / "refs").rglob("*"), reverse=True):
        folder.unlink() if folder.is_file() else folder.rmdir()
    (path / "refs").rmdir()


def test_a_dataset_written_before_branches_reads_as_main(tmp_path: Path) -> None:
    """Without refs, main is the newest version and each version's parent the one before; the first
    commit writes main's ref there, and branching and merging work from that history."""
    path = tmp_path / "old"
    ds = numbers(path)
    ds.x.append(10)
    _strip_history(path)
    old = lc.load(str(path))
    assert (old.branch, old.branches, old.version) == ("main", ["main"], 3)
    assert [e["parents"] for e in old.log()] == [[], [0], [1], [2]]
    old.checkout("exp", create=True)
    main_ref = json.loads((path / "refs" / "branches" / "main.json").read_text())
    assert main_ref["start"] == 3
    old.y[0] = -1
    main = lc.load(str(path))
    main.x.append(11)
    assert main.merge("exp") == main.version
    assert main.x.numpy().tolist() == [*range(11), 11]
    assert main.y.numpy()[0] == -1
    assert main.log()[-1]["parents"] == [main.version - 1, old.version]


def test_a_handle_opened_before_main_had_a_ref_conflicts_after(tmp_path: Path) -> None:
    """A writer that opened an old-style dataset, then lost the race to a newer commit, gets a conflict."""
    path = tmp_path / "old"
    numbers(path)
    _strip_history(path)
    first = lc.load(str(path))
    second = lc.load(str(path))
    second.x.append(1)
    with pytest.raises(lc.CommitConflictError, match="was changed by another writer"):
        first.x.append(2)
    assert lc.load(str(path)).x.numpy().tolist() == [*range(10), 1]


def test_an_unfinished_commit_is_not_a_version(tmp_path: Path) -> None:
    """A manifest whose commit never moved its branch (killed in between) is neither loadable nor kept by
    vacuum once older than a lease; younger, it is left alone (its writer may be finishing)."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    body = json.loads((tmp_path / "ds" / "versions" / f"{ds.version:010d}.json").read_text())
    body["version"] = 50
    body["reach"] = {**body["reach"], body["line"]: 50}
    orphan = tmp_path / "ds" / "versions" / "0000000050.json"
    orphan.write_text(json.dumps(body))
    with pytest.raises(
        lc.DatasetNotFoundError, match=r"no version 50 \(a commit of that number did not finish"
    ):
        lc.load(path, version=50)
    assert lc.load(path).version == ds.version
    ds.vacuum(grace_seconds=0)
    assert orphan.exists()
    body["time"] = 0.0
    orphan.write_text(json.dumps(body))
    assert ds.vacuum(grace_seconds=0)["versions"] == 1
    assert not orphan.exists()


def _seg_count(path: Path) -> int:
    return len(list((path / "segments").iterdir()))


def test_vacuum_after_delete_branch_keeps_what_others_reach(tmp_path: Path) -> None:
    """Deleting a branch makes its own versions and data collectable; main's and tagged ones stay."""
    path = tmp_path / "ds"
    ds = numbers(path)
    ds.checkout("keep", create=True)
    ds.x.append(5)
    ds.tag("kept-by-tag")
    ds.checkout("main")
    ds.checkout("exp", create=True)
    for i in range(3):
        ds.y.append(i)
    ds.y[0] = -5
    exp_versions = [e["version"] for e in ds.log() if e["branch"] == "exp"]
    ds.checkout("main")
    ds.x.append(20)
    ds.delete_branch("keep")
    ds.delete_branch("exp")
    removed = ds.vacuum(grace_seconds=0)
    assert removed["versions"] == len(exp_versions)
    for v in exp_versions:
        with pytest.raises(lc.DatasetNotFoundError):
            lc.load(str(path), version=v)
    assert lc.load(str(path)).x.numpy().tolist() == [*range(10), 20]
    assert lc.load(str(path), version="kept-by-tag").x.numpy().tolist() == [*range(10), 5]
    ds.delete_tag("kept-by-tag")
    assert ds.vacuum(grace_seconds=0)["versions"] == 1
    assert lc.load(str(path)).y.numpy().tolist() == (100 + np.arange(10)).tolist()
    assert not (path / "refs" / "lines").exists() or len(list((path / "refs" / "lines").iterdir())) == 1


def test_vacuum_keeps_a_deleted_branch_within_its_grace_period(tmp_path: Path) -> None:
    """A deleted branch's versions younger than grace_seconds stay."""
    path = tmp_path / "ds"
    ds = numbers(path)
    ds.checkout("exp", create=True)
    ds.x.append(1)
    version = ds.version
    ds.checkout("main")
    ds.delete_branch("exp")
    assert ds.vacuum(grace_seconds=3600)["versions"] == 0
    assert len(lc.load(str(path), version=version).x) == 11


def test_vacuum_keep_versions_counts_per_branch(tmp_path: Path) -> None:
    """keep_versions=n keeps the n newest versions of each branch (and every branch's head)."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("exp", create=True)
    for i in range(3):
        ds.x.append(i)
    ds.checkout("main")
    for i in range(3):
        ds.y.append(i)
    ds.vacuum(grace_seconds=0, keep_versions=2)
    kept = sorted(int(p.name[:-5]) for p in (tmp_path / "ds" / "versions").glob("*.json"))
    main_log = [e["version"] for e in lc.load(path).log()]
    exp_log = [e["version"] for e in lc.load(path, branch="exp").log()]
    assert main_log[-2:] == main_log
    assert exp_log[-2:] == exp_log
    assert sorted(main_log + exp_log) == kept
    assert lc.load(path, branch="exp").x.numpy().tolist() == [*range(10), 0, 1, 2]


def _start(path: str, *args: str, **env: str) -> Any:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), path, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=script_env(**env),
    )


def _finish(proc: Any) -> str:
    """The last line a started script printed (after its START line, read already)."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return str(out.splitlines()[-1])


def test_writers_on_two_branches_both_commit(tmp_path: Path) -> None:
    """Two processes appending on two branches at the same moment both commit every write."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    ds.checkout("a", create=True)
    ds.checkout("b", create=True)
    go = tmp_path / "go"
    procs = [_start(path, "append", b, str(v), "5", LC_TEST_GO=str(go)) for b, v in (("a", 1), ("b", 2))]
    for proc in procs:
        assert proc.stdout.readline().strip() == "START"
    go.touch()
    assert [_finish(p).split()[0] for p in procs] == ["DONE", "DONE"]
    assert lc.load(path, branch="a").x.numpy().tolist() == [*range(10), *[1] * 5]
    assert lc.load(path, branch="b").x.numpy().tolist() == [*range(10), *[2] * 5]
    assert len(lc.load(path).x) == 10
    numbers_seen = [e["version"] for e in ds.log(all_branches=True)]
    assert len(numbers_seen) == len(set(numbers_seen)) == 3 + 10


def test_two_writers_on_one_branch_one_wins(tmp_path: Path) -> None:
    """Two processes committing on one branch from the same version: exactly one gets CommitConflictError."""
    path = str(tmp_path / "ds")
    numbers(path).checkout("a", create=True)
    start = lc.load(path, branch="a").version
    go = tmp_path / "go"
    procs = [_start(path, "append", "a", str(v), "1", LC_TEST_GO=str(go)) for v in (1, 2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "START"
    go.touch()
    outcomes = sorted(_finish(p).split()[0] for p in procs)
    assert outcomes == ["CONFLICT", "DONE"]
    after = lc.load(path, branch="a")
    assert len(after.x) == 11
    assert after.log()[-1]["parents"] == [start]
    assert open_backend(path).read(f"versions/{after.version + 1:010d}.json") is None  # the loser's is gone


def test_compact_works_on_the_branch_it_is_on(tmp_path: Path) -> None:
    """compact() on a branch rewrites that branch's storage only; main keeps its version and fragments."""
    path = str(tmp_path / "ds")
    ds = numbers(path)
    for i in range(3):
        ds.x.append(i)
    main_version = ds.version
    ds.checkout("tidy", create=True)
    ds.compact()
    assert ds.version != main_version
    assert ds.x.numpy().tolist() == [*range(10), 0, 1, 2]
    assert lc.load(path).version == main_version
    assert ds.diff("main").tensors["x"].replaced == ((0, 13),)


def test_an_eval_into_a_branch_resumes_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An eval with checkpoints into a dataset on a branch that fails keeps its checkpoints on that branch;
    rerun on the branch, it resumes there, and main never sees its outputs."""
    from tests.reliability.reliability_helpers import FAIL_AT

    path = str(tmp_path / "out")
    out = lc.empty(path)
    out.create_tensor("x", dtype="int64")
    out.checkout("run", create=True)
    monkeypatch.setenv(FAIL_AT, "7")
    with pytest.raises(lc.TransformError):
        double().eval(list(range(20)), out, checkpoint_interval=5, progressbar=False)
    assert len(lc.load(path, branch="run").x) == 5
    monkeypatch.delenv(FAIL_AT)
    again = lc.load(path, branch="run")
    result = double().eval(list(range(20)), again, checkpoint_interval=5, progressbar=False)
    assert result.resumed_from == 5
    assert again.x.numpy().tolist() == [2 * i for i in range(20)]
    assert len(lc.load(path).x) == 0


def test_repr_and_notebook_view_name_the_branch(tmp_path: Path) -> None:
    """A handle on a branch other than main says so in its repr and its notebook view."""
    ds = numbers(tmp_path / "ds")
    assert "branch" not in repr(ds)
    ds.checkout("exp", create=True)
    assert f"version={ds.version}, branch='exp'," in repr(ds)
    assert "branch=&#x27;exp&#x27;" in ds._repr_html_()
