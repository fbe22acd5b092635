"""The options of ``eval``, checked once and carried whole from the call down to every worker."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.schedulers import Ray

__all__ = ["EvalOptions", "draw_seed"]


@dataclass(frozen=True, slots=True)
class EvalOptions:
    """Everything ``eval`` was asked to do besides its data (see `Pipeline.eval` for each meaning).

    Attributes:
        num_workers: 0 runs in the calling process; otherwise how many workers run tasks.
        scheduler: the scheduler's registered name, or a `lakecompute.schedulers.Ray` with settings.
        progressbar: show a progress bar.
        skip_ok: tensors of ``data_out`` that the functions never write are allowed.
        check_lengths: every written tensor gets the same number of items per input.
        pad_data_in: dataset input: shorter tensors are padded to the longest.
        ignore_errors: failing samples are skipped and reported instead of raising.
        checkpoint_interval: commit every this many inputs (0: only at the end).
        batch_size: the functions see batches of this many inputs (None: single samples).
        seed: the seed of the ``rng`` generators (None: drawn per eval, or taken from the run resumed).
        rerun: write again even when an identical eval already completed into ``data_out``.
    """

    num_workers: int = 0
    scheduler: str | Ray = "processed"
    progressbar: bool = True
    skip_ok: bool = False
    check_lengths: bool = True
    pad_data_in: bool = False
    ignore_errors: bool = False
    checkpoint_interval: int = 0
    batch_size: int | None = None
    seed: int | None = None
    rerun: bool = False

    @classmethod
    def parse(cls, **options: Any) -> EvalOptions:
        """Check ``eval``'s keyword arguments.

        Raises:
            InvalidArgumentError: a value out of range (a negative count, say).
            InvalidTypeError: a value of the wrong type.
        """
        for name in ("progressbar", "skip_ok", "check_lengths", "pad_data_in", "ignore_errors", "rerun"):
            if not isinstance(options.get(name, False), bool):
                raise InvalidTypeError(f"{name} must be True or False. Got {options[name]!r}.")
        if not isinstance(options.get("scheduler", "processed"), str | Ray):
            raise InvalidTypeError(
                "scheduler must be a name such as 'processed', or lc.schedulers.Ray(...). "
                f"Got {options['scheduler']!r}."
            )
        _count(options, "num_workers", "num_workers must be an int >= 0")
        _count(options, "checkpoint_interval", "checkpoint_interval must be an int >= 0 (0: no checkpoints)")
        if options.get("batch_size") is not None:
            _count(options, "batch_size", "batch_size must be None or an int >= 1", least=1)
        if options.get("seed") is not None:
            _count(options, "seed", "seed must be None or an int >= 0")
        return cls(**options)

    def identity(self) -> dict[str, Any]:
        """The options that change what an eval writes (part of its fingerprint).

        The scheduler, the worker count, the progress bar and the checkpoint interval do not: a rerun
        with other values is the same eval, which is what lets it resume with more workers.
        """
        return {
            "skip_ok": self.skip_ok,
            "check_lengths": self.check_lengths,
            "pad_data_in": self.pad_data_in,
            "ignore_errors": self.ignore_errors,
            "batch_size": self.batch_size,
            "seed": self.seed,
        }


def _count(options: dict[str, Any], name: str, expected: str, least: int = 0) -> None:
    value = options.get(name, least)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise InvalidArgumentError(f"{expected}. Got {value!r}.")


def draw_seed() -> int:
    """A fresh seed for an eval given none (63 bits: it fits every JSON reader and numpy)."""
    return secrets.randbits(63)
