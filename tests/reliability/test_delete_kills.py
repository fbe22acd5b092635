"""Fault injection for removal: ``lc.delete(path)`` and ``lc.empty(path, overwrite=True)`` SIGKILLed after
each of their filesystem steps leave the old dataset whole, no dataset, or the new empty one."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import LocalBackend

_FORK = multiprocessing.get_context("fork")
# The steps counted: each one removes or publishes a file, so a kill after any of them is a distinct state.
STEPS = ("unlink", "remove", "rmdir", "replace", "link")


def _make(path: Path) -> dict[str, Any]:
    """A dataset of three commits over two segments; returns what it holds."""
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("img", htype="image", sample_compression="png")
    for i in range(3):
        ds.extend(
            {"x": np.arange(4) + 10 * i, "img": [np.full((3, 4), 10 * i + j, np.uint8) for j in range(4)]}
        )
    return {"x": ds.x.numpy().tolist(), "img": ds.img.numpy().tolist(), "version": ds.version}


def _die_after(n: int, op: Callable[[], Any]) -> None:
    """In a forked child: run ``op`` with every counted step SIGKILLing the process once it is the n-th."""
    count = [0]

    def counted(fn: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            count[0] += 1
            if count[0] >= n:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return step

    for name in STEPS:
        setattr(os, name, counted(getattr(os, name)))
    op()
    os._exit(0)


def _delete(path: str) -> None:
    lc.delete(path)


def _overwrite(path: str) -> None:
    lc.empty(path, overwrite=True)


def _run_killed(path: str, op: Callable[[str], None], n: int) -> int:
    proc = _FORK.Process(target=_die_after, args=(n, lambda: op(path)))
    proc.start()
    proc.join(60)
    assert proc.exitcode is not None, "the killed operation hung"
    return proc.exitcode


def _check(path: str, before: dict[str, Any], new_empty_ok: bool) -> str:
    """The state after a kill: the old dataset whole, no dataset, or (overwrite) the new empty one."""
    if lc.exists(path):
        ds = lc.load(path)
        if not ds.tensors:
            assert new_empty_ok, "delete left an empty dataset behind"
            assert ds.version == 0
            return "new"
        assert ds.version == before["version"]
        assert ds.x.numpy().tolist() == before["x"]
        assert ds.img.numpy().tolist() == before["img"]
        return "old"
    with pytest.raises(lc.DatasetNotFoundError):
        lc.load(path)
    # What is left is cleared by the next empty() even without overwrite=True, and by delete().
    fresh = lc.empty(path)
    assert (fresh.version, list(fresh.tensors)) == (0, [])
    lc.delete(path)
    assert not os.path.exists(path)
    return "none"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("op", "new_empty_ok"), [(_delete, False), (_overwrite, True)], ids=["delete", "overwrite"]
)
def test_removal_killed_after_each_step_leaves_old_none_or_new(
    tmp_path: Path, op: Callable[[str], None], new_empty_ok: bool
) -> None:
    """A kill after every filesystem step of delete/overwrite never leaves a dataset that opens and fails."""
    template = tmp_path / "template"
    before = _make(template)
    outcomes: list[str] = []
    for n in range(1, 500):
        path = str(tmp_path / f"kill-{n}")
        shutil.copytree(template, path)
        code = _run_killed(path, op, n)
        if code == 0:
            break  # the operation finished in fewer than n steps: every step has had its kill
        assert code == -signal.SIGKILL, f"step {n}: exit code {code}"
        outcomes.append(_check(path, before, new_empty_ok))
    else:
        pytest.fail("the operation never finished")
    assert len(outcomes) >= 10, outcomes
    # The first step already makes the old dataset no dataset: nothing in between ever opens.
    assert outcomes[0] == "none", outcomes
    expected = {"none", "new"} if new_empty_ok else {"none"}
    assert set(outcomes) == expected, outcomes
    finished = str(tmp_path / f"kill-{n}")
    if new_empty_ok:
        assert (lc.load(finished).version, list(lc.load(finished).tensors)) == (0, [])
    else:
        assert not os.path.exists(finished)


def test_removal_order_marker_then_versions_then_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delete() first marks the dataset 'incomplete', then removes versions/, then the data.

    Only delete's own steps are recorded: the process's lease renewer rewrites, every 5 s, the leases of
    the datasets this process wrote in the last minutes (this one's and earlier tests'), and one of its
    rounds can fall inside the delete (seen once: 12 lease writes recorded first)."""
    _make(tmp_path / "ds")
    steps: list[str] = []
    write, delete_tree = LocalBackend.write, LocalBackend.delete_tree
    here = (tmp_path / "ds").resolve()

    def record_write(self: LocalBackend, key: str, data: bytes) -> None:
        if self.root.resolve() == here and not key.startswith("leases/"):
            steps.append(f"write {key} {'incomplete' if b'lakecompute-incomplete' in data else 'other'}")
        write(self, key, data)

    def record_delete_tree(self: LocalBackend, prefix: str) -> None:
        if self.root.resolve() == here:
            steps.append(f"delete {prefix or '<root>'}")
        delete_tree(self, prefix)

    monkeypatch.setattr(LocalBackend, "write", record_write)
    monkeypatch.setattr(LocalBackend, "delete_tree", record_delete_tree)
    lc.delete(str(tmp_path / "ds"))
    assert steps == [
        "write zarr.json incomplete",
        "delete versions",
        "delete leases",  # the writer leases of make_numbers' handle (see vacuum)
        "delete refs",  # the branches (main) and their moves
        "delete segments",
        "delete <root>",
    ]


def test_interrupted_delete_reports_how_to_finish(tmp_path: Path) -> None:
    """Loading what an interrupted delete left says so, and lc.delete finishes it."""
    path = tmp_path / "ds"
    _make(path)
    shutil.rmtree(path / "versions")
    marker = '{"zarr_format": 3, "node_type": "group", "attributes": {"lakecompute-incomplete": {}}}'
    (path / "zarr.json").write_text(marker)
    assert not lc.exists(str(path))
    with pytest.raises(
        lc.DatasetNotFoundError, match=r"was interrupted; lc\.delete\(path\) removes what is left"
    ):
        lc.load(str(path))
    lc.delete(str(path))
    assert not path.exists()
