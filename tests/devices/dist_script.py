"""Run under torchrun with the gloo backend: every rank calls the same eval (see test_distributed.py).

Usage: dist_script.py MODE OUT N [--workers W] [--interval K] [--sleep S] [--kill-at I --marker PATH]

MODE ``column`` adds a column in place to a dataset of N rows that rank 0 creates; MODE ``list`` writes
a list of N numbers into OUT; MODE ``mismatch`` is ``list`` with rank 1 given one input more, MODE
``samelength`` with rank 1 given N other numbers (a list of the same length, another content); MODE
``badoption`` first calls an eval whose options rank 1 alone gets wrong (``num_workers=-1``), printing
what each rank raised, then runs ``list``. Rank 1
SIGKILLs itself on input I the first time (no marker file yet); each input takes S seconds (so that
both ranks get tasks). Each rank prints its result as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

import numpy as np
import torch.distributed as dist

import lakecompute as lc


@lc.compute
def double(x: Any, sample_out: Any, kill_at: int, marker: str, sleep: float) -> None:
    """Write 2x and the rank that computed it; rank 1 dies on input ``kill_at`` the first time."""
    time.sleep(sleep)
    value = int(x.x.numpy()) if hasattr(x, "x") else int(x)
    rank = int(os.environ["RANK"])
    if rank == 1 and value == kill_at and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    sample_out.append({"y": np.int64(2 * value), "rank": np.int64(rank)})


@lc.compute
def double_batch(batch: Any, sample_out: Any) -> None:
    """Batched: write 2x and the rank that computed it, for every input of the batch."""
    values = np.asarray(batch.x.numpy() if hasattr(batch, "x") else batch, dtype=np.int64)
    sample_out.extend({"y": 2 * values, "rank": np.full(len(values), int(os.environ["RANK"]), np.int64)})


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["column", "list", "mismatch", "samelength", "badoption"])
    parser.add_argument("out")
    parser.add_argument("n", type=int)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--interval", type=int, default=0)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--marker", default="")
    parser.add_argument("--sleep", type=float, default=0.02)
    parser.add_argument("--batch", type=int, default=0)
    return parser.parse_args()


def _create(args: argparse.Namespace) -> None:
    """The output dataset (with the input column in mode column), made once, by rank 0."""
    ds = lc.empty(args.out)
    if args.mode == "column":
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.arange(args.n))
    ds.create_tensor("y", dtype="int64")
    ds.create_tensor("rank", dtype="int64")


def main() -> None:
    args = _arguments()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0 and not lc.exists(args.out):
        _create(args)
    dist.barrier()  # the dataset exists before any rank opens it
    ds = lc.load(args.out)
    fn = double_batch() if args.batch else double(kill_at=args.kill_at, marker=args.marker, sleep=args.sleep)
    options: dict[str, Any] = {"num_workers": args.workers, "progressbar": False}
    if args.batch:
        options["batch_size"] = args.batch
    if args.interval:
        options["checkpoint_interval"] = args.interval
    if args.mode == "badoption":
        try:
            fn.eval(list(range(args.n)), ds, **{**options, "num_workers": -1 if rank == 1 else 0})
        except lc.LakeComputeError as exc:
            _emit({"rank": rank, "refused": type(exc).__name__, "message": str(exc)})
    try:
        if args.mode == "column":
            result = fn.eval(ds, skip_ok=True, **options)
        else:
            n = args.n + 1 if args.mode == "mismatch" and rank == 1 else args.n
            shift = 1000 if args.mode == "samelength" and rank == 1 else 0
            result = fn.eval([i + shift for i in range(n)], ds, **options)
    except lc.LakeComputeError as exc:
        _emit({"rank": rank, "error": type(exc).__name__, "message": str(exc)})
        dist.destroy_process_group()
        return
    _emit({"rank": rank, "inputs": result.inputs, "version": result.version,
           "resumed_from": result.resumed_from, "outputs": result.outputs,
           "seen": len(ds.y), "handle_version": ds.version})  # fmt: skip
    dist.barrier()
    dist.destroy_process_group()


def _emit(line: dict[str, object]) -> None:
    """One JSON line on stdout in one write (atomic on a pipe: under 4 KiB): the two ranks share the pipe,
    and two ranks failing at once once printed one line holding both (print() may write a line and its
    newline apart)."""
    sys.stdout.flush()
    os.write(1, (json.dumps(line) + "\n").encode())


if __name__ == "__main__":
    main()
