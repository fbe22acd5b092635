"""An Accelerate run over ``accelerator.prepare(ds.pytorch())``, for tests/loaders/test_accelerate.py (one
process, or two under ``torchrun``).

``python tests/loaders/accelerate_run.py DATASET OUT PHASE DISPATCH WORKERS``: each process writes
``OUT/PHASE-rank<r>.json``, the (epoch, idx) of every batch it trained on, and every process that reads
appends the idx of every batch it reads to ``OUT/PHASE-reads.txt`` (a spy transform). PHASE ``full``
trains 2 epochs; ``stop`` saves the state (``accelerator.save_state``) after STOP batches of epoch 0 and
stops; ``resume`` loads it and trains to the end of epoch 1; ``oneworld`` shards the loader by hand for one
process (``rank=0, world_size=1``) and writes what each process raised instead of its batches. DISPATCH is
``default`` (Accelerate's defaults: it dispatches an iterable loader's batches from rank 0), ``stale``
(the same, with process 1's loader state saved last, which the resumed loader refuses) or ``off``
(``dispatch_batches=False``: every rank iterates and keeps its own); WORKERS the loader's ``num_workers``.

The loader goes through ``accelerator.prepare()``, in Accelerate's stateful mode, which is how
``save_state`` / ``load_state`` checkpoint a prepared loader.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, DataLoaderConfiguration

import lakecompute as lc

STOP = 2


class ReadSpy:
    """A transform logging the idx of every batch it sees (read), in whichever process reads it."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        with open(self.log, "a") as f:
            f.write(" ".join(str(int(i)) for i in batch["idx"]) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return batch


def save(accelerator: Any, loader: Any, state_dir: Path, dispatch: str) -> None:
    """``save_state``, then process 0's loader state written over the one every process wrote (dispatching,
    only process 0 reads, and Accelerate writes every process's state to one file: see docs/training.md).
    With ``dispatch == "stale"``, process 1's is written last instead (the mistake the loader refuses)."""
    accelerator.save_state(str(state_dir))
    accelerator.wait_for_everyone()
    writer = 1 if dispatch == "stale" else 0
    if accelerator.process_index == writer:
        torch.save(loader.state_dict(), str(state_dir / "dl_state_dict.bin"))
    accelerator.wait_for_everyone()


def train(path: str, out: Path, phase: str, dispatch: str, workers: int) -> None:
    config = DataLoaderConfiguration(
        use_stateful_dataloader=True, dispatch_batches=False if dispatch == "off" else None
    )
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    spy = ReadSpy(str(out / f"{phase}-reads.txt"))
    sharding = {"rank": 0, "world_size": 1} if phase == "oneworld" else {}
    loader: Any = lc.load(path, read_only=True).pytorch(
        3, tensors="idx", shuffle=True, seed=5, num_workers=workers, transform=spy, **sharding
    )
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    state_dir = out / "state"
    seen: list[tuple[int, list[int]]] = []
    if phase == "oneworld":  # each process says what it raised, then meets the other (or hangs)
        outcome: Any = seen
        try:
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            run(accelerator, model, optimizer, loader, phase, dispatch, state_dir, seen)
        except lc.LakeComputeError as exc:
            outcome = {"error": type(exc).__name__, "message": str(exc)}
        (out / f"{phase}-rank{accelerator.process_index}.json").write_text(json.dumps(outcome))
    else:
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        if phase == "resume":
            accelerator.load_state(str(state_dir))
        run(accelerator, model, optimizer, loader, phase, dispatch, state_dir, seen)
        (out / f"{phase}-rank{accelerator.process_index}.json").write_text(json.dumps(seen))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    # Leave without the interpreter's finalization: gloo's worker threads can abort the process there
    # (torch's known "terminate called without an active exception" at exit), after everything is written.
    # That skips the DataLoader's own shutdown of its workers, so they are ended here: a worker started
    # just before (torchdata starts them when Accelerate asks the prepared loader for its state, and
    # ``oneworld`` refuses right after) may never see this process go, since torch's watchdog takes its
    # parent's pid when the worker's loop begins, by then init's. Seen: such an orphan held the test's
    # pipes open until the test's 120 s timeout (CI, and 1 run in 5 here).
    for child in multiprocessing.active_children():
        child.terminate()
        child.join(10)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(
    accelerator: Any,
    model: Any,
    optimizer: Any,
    loader: Any,
    phase: str,
    dispatch: str,
    state_dir: Path,
    seen: list[tuple[int, list[int]]],
) -> None:
    """Two epochs (or until the stop), each batch recorded in ``seen``."""
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            seen.append((epoch, batch["idx"].tolist()))
            loss = model(batch["idx"].float().unsqueeze(1)).mean()
            accelerator.backward(loss)
            optimizer.step()
            if phase == "stop" and len(seen) == STOP:
                save(accelerator, loader, state_dir, dispatch)
                break
        if phase == "stop":
            break


if __name__ == "__main__":
    train(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
