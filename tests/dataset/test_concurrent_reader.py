"""Readers that reopen a dataset while another process commits always see whole versions."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import lakecompute as lc
from tests.dataset.test_crash import check_counter_prefix, counter_row, create_counter_dataset

_FORK = multiprocessing.get_context("fork")
BLOCK = 4
COMMITS = 30


def _committer(path: str) -> None:
    ds = lc.load(path)
    for c in range(COMMITS):
        with ds:
            for j in range(BLOCK):
                ds.append(counter_row(c * BLOCK + j))
                if j == 2:
                    _ = ds.t[-1].text()  # part of the block reaches storage before the commit
        time.sleep(0.01)


def test_reader_reopening_sees_whole_versions(tmp_path: Any) -> None:
    """A reader that loads (or reloads) in a loop while another process commits sees only whole commits."""
    path = str(tmp_path / "concurrent")
    create_counter_dataset(path)
    writer = _FORK.Process(target=_committer, args=(path,))
    writer.start()
    seen: list[int] = []
    versions: list[int] = []
    held = lc.load(path)
    try:
        while writer.is_alive():
            if len(seen) % 2:
                held.reload()
                ds = held
            else:
                ds = lc.load(path)
            versions.append(ds.version)
            seen.append(check_counter_prefix(ds, BLOCK))
    finally:
        writer.join(60)
    assert writer.exitcode == 0
    assert versions == sorted(versions), "a reader went back to an older version"
    assert check_counter_prefix(lc.load(path), BLOCK) == COMMITS * BLOCK
    assert len(set(seen)) >= 3, f"the reader saw too few versions to test anything: {sorted(set(seen))}"
