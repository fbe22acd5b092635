"""The stateful-protocol acceptance cases, run in real processes by tests/loaders/test_stateful.py.

``python -m tests.loaders.stateful_cases save DIR KINDS``: for every case of the comma-separated
``KINDS``, run two whole epochs (the reference), then a fresh loader for ``K`` batches of epoch 0, and
write its ``state_dict()`` (plain JSON) and the reference to ``DIR/saved.json``.

``python -m tests.loaders.stateful_cases resume DIR KINDS``: in a new process, build each loader again, load
the state, run the rest of the epoch and the next whole epoch, and write what it yielded and how many
samples it read (a spy: a transform that logs every batch read, in whichever process reads it) to
``DIR/resumed.json``.

Cases: what (``pytorch``, ``batches``, ``blocks`` and ``blocks-batches`` (token blocks' ``pytorch`` and
``batches``), ``torchdata`` (torchdata's
``StatefulDataLoader`` over ``ds.pytorch().dataset``)) x num_workers 0/2 x shuffle off/on x
(rank, world_size) (0, 1)/(1, 2).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

import lakecompute as lc

KINDS = ("pytorch", "batches", "blocks", "blocks-batches", "torchdata")
K = 3  # batches taken before the state is saved
ROWS = 23  # samples of the row dataset
TOKENS = 97  # values of the token stream (blocks of 4: 24 blocks)


class Spy:
    """A transform that appends one line per batch it sees (the samples just read) to a log file."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        n = len(batch["idx"] if "idx" in batch else batch["x"])
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{n}\n".encode())
        finally:
            os.close(fd)
        return batch


def make_datasets(root: Path) -> None:
    """The row dataset (``idx`` = index, a class label) and the token dataset (values 0 .. TOKENS - 1)."""
    ds = lc.empty(str(root / "rows"), overwrite=True)
    with ds:
        ds.create_tensor("idx", dtype="int64")
        ds.create_tensor("label", htype="class_label")
        ds.idx.extend(np.arange(ROWS))
        ds.label.extend(np.arange(ROWS) % 3)
    tokens = lc.empty(str(root / "tokens"), overwrite=True)
    with tokens:
        tokens.create_tensor("tokens", dtype="int32")
        tokens.tokens.extend([np.arange(0, 40), np.arange(40, TOKENS)])


def cases(kinds: list[str]) -> list[tuple[str, int, bool, int, int]]:
    """Every (kind, num_workers, shuffle, rank, world_size) of the given kinds (8 a kind)."""
    assert set(kinds) <= set(KINDS), kinds
    return [
        (kind, workers, shuffle, rank, world)
        for kind, workers, shuffle, (rank, world) in itertools.product(
            kinds, (0, 2), (False, True), ((0, 1), (1, 2))
        )
    ]


def case_name(case: tuple[str, int, bool, int, int]) -> str:
    kind, workers, shuffle, rank, world = case
    return f"{kind}-w{workers}-{'shuffle' if shuffle else 'ordered'}-r{rank}of{world}"


def build(root: Path, case: tuple[str, int, bool, int, int], log: str) -> Any:
    """The loader of a case, reading through the spy."""
    kind, workers, shuffle, rank, world = case
    options = {"shuffle": shuffle, "seed": 7, "rank": rank, "world_size": world, "num_workers": workers}
    if kind.startswith("blocks"):
        blocks = lc.load(str(root / "tokens"), read_only=True).tokens.blocks(4)
        make = blocks.batches if kind == "blocks-batches" else blocks.pytorch
        return make(3, transform=Spy(log), **options)
    ds = lc.load(str(root / "rows"), read_only=True)
    if kind == "batches":
        return ds.batches(3, transform=Spy(log), **options)
    loader = ds.pytorch(3, transform=Spy(log), **options)
    if kind == "pytorch":
        return loader
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(loader.dataset, batch_size=None, num_workers=workers)


def ids(batch: dict[str, Any]) -> list[int]:
    """What identifies a batch: its samples' ``idx``, or each block's first value."""
    values = batch["idx"] if "idx" in batch else batch["x"][:, 0]
    return [int(v) for v in np.asarray(values)]


def one_pass(loader: Any, kind: str, epoch: int, limit: int | None = None) -> list[list[int]]:
    """A pass (for torchdata, Accelerate's way: ``set_epoch`` on the dataset first), up to ``limit``."""
    if kind == "torchdata":
        loader.dataset.set_epoch(epoch)
    out = []
    for batch in loader:
        out.append(ids(batch))
        if limit is not None and len(out) == limit:
            break
    return out


def save(root: Path, kinds: list[str]) -> None:
    make_datasets(root)
    saved = {}
    for case in cases(kinds):
        kind = case[0]
        reference = build(root, case, os.devnull)
        full = [one_pass(reference, kind, 0), one_pass(reference, kind, 1)]
        loader = build(root, case, os.devnull)
        first = one_pass(loader, kind, 0, limit=K)
        saved[case_name(case)] = {"reference": full, "first": first, "state": loader.state_dict()}
    (root / "saved.json").write_text(json.dumps(saved))


def read_count(log: Path) -> int:
    return sum(int(line) for line in log.read_text().split()) if log.exists() else 0


def resume(root: Path, kinds: list[str]) -> None:
    saved = json.loads((root / "saved.json").read_text())
    resumed = {}
    for case in cases(kinds):
        name = case_name(case)
        log = root / f"{name}.log"
        loader = build(root, case, str(log))
        loader.load_state_dict(saved[name]["state"])
        epoch = saved[name]["state"].get("epoch", 0) if case[0] != "torchdata" else 0
        rest = one_pass(loader, case[0], epoch)
        following = one_pass(loader, case[0], epoch + 1)
        resumed[name] = {"rest": rest, "next": following, "read": read_count(log)}
    (root / "resumed.json").write_text(json.dumps(resumed))


if __name__ == "__main__":
    {"save": save, "resume": resume}[sys.argv[1]](Path(sys.argv[2]), sys.argv[3].split(","))
