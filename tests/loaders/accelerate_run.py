"""An Accelerate run over ``ds.pytorch()``, for tests/loaders/test_ecosystem.py (one process, or two
under ``torchrun``).

``python tests/loaders/accelerate_run.py DATASET OUT PHASE``: each process writes
``OUT/PHASE-rank<r>.json``, the (epoch, idx) of every batch it trained on. PHASE ``full`` trains 2
epochs; ``stop`` saves the state (``accelerator.save_state``) after STOP batches of epoch 0 and stops;
``resume`` loads it and trains to the end of epoch 1.

One process: the loader goes through ``accelerator.prepare()`` in Accelerate's stateful mode. Several:
``prepare()`` is refused with a clear error on the first batch (Accelerate would dispatch rank 0's
batches to all), so the loader is iterated directly and registered for checkpointing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator, DataLoaderConfiguration

import lakecompute as lc

STOP = 2


def train(path: str, out: Path, phase: str) -> None:
    loader: Any = lc.load(path, read_only=True).pytorch(3, tensors="idx", shuffle=True, seed=5)
    accelerator = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True)
    )
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    if accelerator.num_processes == 1:
        loader = accelerator.prepare(loader)
    else:
        refused = accelerator.prepare(lc.load(path, read_only=True).pytorch(3, tensors="idx"))
        with pytest.raises(
            lc.InvalidArgumentError, match=r"^accelerator\.prepare\(\) would train 2 processes"
        ):
            next(iter(refused))
        refused.end()  # the refused pass never told Accelerate it ended
        accelerator.register_for_checkpointing(loader)
    state_dir = out / "state"
    if phase == "resume":
        accelerator.load_state(str(state_dir))
    seen: list[tuple[int, list[int]]] = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            seen.append((epoch, batch["idx"].tolist()))
            loss = model(batch["idx"].float().unsqueeze(1)).mean()
            accelerator.backward(loss)
            optimizer.step()
            if phase == "stop" and len(seen) == STOP:
                accelerator.save_state(str(state_dir))
                break
        if phase == "stop":
            break
    (out / f"{phase}-rank{accelerator.process_index}.json").write_text(json.dumps(seen))
    accelerator.end_training()


if __name__ == "__main__":
    train(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
