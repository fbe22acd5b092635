"""A Lightning DDP run (2 CPU ranks on gloo) over ``ds.pytorch()``, for tests/loaders/test_ecosystem.py.

``python tests/loaders/lightning_run.py DATASET OUT PHASE WHERE``: Lightning starts the second rank by
running this script again. Each rank writes ``OUT/PHASE-rank<r>.json``: the (epoch, idx) of every batch
it trained on. PHASE ``full`` trains 2 epochs; ``stop`` stops after STOP steps with a checkpoint there
(``OUT/stop.ckpt``); ``resume`` trains 2 epochs from that checkpoint. WHERE: ``module`` builds the loader
in ``train_dataloader()``, ``before`` builds it before ``fit()`` (before the process group exists).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

import lakecompute as lc

STOP = 2
BATCH = 3


def loader(path: str) -> Any:
    return lc.load(path, read_only=True).pytorch(BATCH, tensors="idx", shuffle=True, seed=11)


class Recorder(pl.LightningModule):
    def __init__(self, path: str, out: Path, phase: str, build_here: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.path, self.out, self.phase, self.build_here = path, out, phase, build_here
        self.seen: list[tuple[int, list[int]]] = []

    def train_dataloader(self) -> Any:
        return loader(self.path) if self.build_here else None

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, batch["idx"].tolist()))
        out: torch.Tensor = self.layer(batch["idx"].float().unsqueeze(1)).mean()
        return out

    def on_train_end(self) -> None:
        rank = self.trainer.global_rank
        (self.out / f"{self.phase}-rank{rank}.json").write_text(json.dumps(self.seen))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


class StopWithCheckpoint(pl.Callback):
    """Saves a mid-epoch checkpoint after STOP steps (every rank takes part, rank 0 writes)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == STOP:
            trainer.save_checkpoint(self.path)


def main(path: str, out: Path, phase: str, where: str) -> None:
    built = loader(path) if where == "before" else None
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=2,
        max_steps=STOP if phase == "stop" else -1,
        callbacks=[StopWithCheckpoint(out / "stop.ckpt")] if phase == "stop" else [],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Recorder(path, out, phase, where == "module")
    ckpt = str(out / "stop.ckpt") if phase == "resume" else None
    trainer.fit(model, train_dataloaders=built, ckpt_path=ckpt)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4])
