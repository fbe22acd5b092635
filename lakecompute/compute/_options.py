"""The options of ``eval``: typed once (`EvalKwargs`), checked once (`EvalOptions.parse`), and carried
whole from the call down to every worker."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, TypedDict

from lakecompute.errors import InvalidTypeError
from lakecompute.parsing import Devices, DevicesLike, parse_count, parse_devices, parse_flag, parse_keywords
from lakecompute.schedulers import Ray

__all__ = ["EvalKwargs", "EvalOptions", "draw_seed"]


class EvalKwargs(TypedDict, total=False):
    """The keyword options of ``eval`` (`lakecompute.compute.Transform.eval`), each optional."""

    num_workers: int
    """0 (the default) runs in the calling process; otherwise how many workers run tasks."""
    scheduler: str | Ray
    """``"serial"``, ``"threaded"``, ``"processed"`` (the default), ``"ray"``, or
    ``lc.schedulers.Ray(...)`` for Ray with settings (resources, retries, address)."""
    progressbar: bool
    """Show a progress bar (default True)."""
    skip_ok: bool
    """Tensors of ``data_out`` that the functions never write are allowed (left short, or kept as they
    are in place). Default False."""
    check_lengths: bool
    """Every written tensor must get the same number of items per input (default True)."""
    pad_data_in: bool
    """For dataset input, pad shorter tensors to the longest (empty arrays; a scalar tensor with zero,
    text with ``""``, json with None). Default False."""
    ignore_errors: bool
    """Skip failing samples and report them in the result instead of raising (default False)."""
    checkpoint_interval: int
    """Commit every this many input samples; a rerun resumes after the last (default 0: only at the
    end)."""
    batch_size: int | None
    """Give the functions batches of this many samples (default None: single samples)."""
    seed: int | None
    """The seed of the ``rng`` argument a function may take: a ``numpy.random.Generator`` derived from
    (seed, input index, stage), the same for any workers and after a resume. None (the default) draws
    one, reported in the result and the version's log."""
    rerun: bool
    """Write again even if an identical eval already completed into ``data_out`` (otherwise that rerun
    does nothing and warns). Default False."""
    devices: DevicesLike
    """``"cuda"`` (every visible GPU) or GPU indices such as ``[0, 1]``: one device per worker, round robin,
    set before user code imports torch; ``lc.worker_device()`` names it inside the functions. Default
    None (no placement)."""


_FLAGS = ("progressbar", "skip_ok", "check_lengths", "pad_data_in", "ignore_errors", "rerun")


@dataclass(frozen=True, slots=True)
class EvalOptions:
    """Everything ``eval`` was asked to do besides its data, checked (see `EvalKwargs` for each meaning).

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
        seed: the seed of the ``rng`` generators (None: drawn per eval, or taken from the run resumed;
            the plan resolves it before workers see it).
        rerun: write again even when an identical eval already completed into ``data_out``.
        devices: ``"cuda"``, GPU indices, or None: the devices workers are placed on, one each.
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
    devices: Devices = None

    @classmethod
    def parse(cls, options: dict[str, Any]) -> EvalOptions:
        """Check ``eval``'s keyword arguments (`EvalKwargs`) with `lakecompute.parsing`'s rules.

        Raises:
            InvalidArgumentError: a value out of range (a negative count, say).
            InvalidTypeError: a value of the wrong type, or a keyword ``eval`` does not take.
        """
        parse_keywords("eval", options, EvalKwargs.__optional_keys__)
        checked = dict(options)
        for name in _FLAGS:
            if name in options:
                checked[name] = parse_flag(name, options[name])
        if not isinstance(options.get("scheduler", "processed"), str | Ray):
            raise InvalidTypeError(
                "Expected scheduler to be a name such as 'processed', or lc.schedulers.Ray(...). "
                f"Got {options['scheduler']!r}."
            )
        checked["num_workers"] = parse_count("num_workers", options.get("num_workers", 0))
        checked["checkpoint_interval"] = parse_count(
            "checkpoint_interval", options.get("checkpoint_interval", 0), hint="Use 0 for no checkpoints."
        )
        checked["batch_size"] = parse_count("batch_size", options.get("batch_size"), 1, optional=True)
        checked["seed"] = parse_count("seed", options.get("seed"), optional=True)
        checked["devices"] = parse_devices("devices", options.get("devices"))
        return cls(**checked)

    def identity(self) -> dict[str, Any]:
        """The options that change what an eval writes (part of its fingerprint).

        The scheduler, the worker count, the devices, the progress bar and the checkpoint interval do
        not: a rerun with other values is the same eval, which is what lets it resume with more workers.
        """
        return {
            "skip_ok": self.skip_ok,
            "check_lengths": self.check_lengths,
            "pad_data_in": self.pad_data_in,
            "ignore_errors": self.ignore_errors,
            "batch_size": self.batch_size,
            "seed": self.seed,
        }


def draw_seed() -> int:
    """A fresh seed for an eval given none (63 bits: it fits every JSON reader and numpy)."""
    return secrets.randbits(63)
