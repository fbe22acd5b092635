"""The options of ``eval``: typed once (`EvalKwargs`), checked once (`EvalOptions.parse`), and carried
whole from the call down to every worker."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, TypedDict

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
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
    decode_on_device: bool
    """Decode the input's JPEG images on each worker's GPU (nvJPEG, one batched call per block read) in
    worker processes placed on one (``devices=``, or Ray tasks with ``num_gpus``): they arrive as torch
    uint8 tensors on ``lc.worker_device()``, shaped as ``numpy()`` shapes them. Other images, and workers
    that cannot (no nvJPEG, a decode the device refuses), decode on the CPU. Default False."""


_FLAGS = (
    "progressbar",
    "skip_ok",
    "check_lengths",
    "pad_data_in",
    "ignore_errors",
    "rerun",
    "decode_on_device",
)


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
        decode_on_device: JPEG images of the input are decoded on each worker's GPU.
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
    decode_on_device: bool = False

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
        parsed = cls(**checked)
        parsed.check_decode_on_device()
        return parsed

    def check_decode_on_device(self) -> None:
        """Refuse ``decode_on_device=True`` where no worker is given a GPU to decode on.

        Raises:
            InvalidArgumentError: neither ``devices=`` nor a Ray scheduler with ``num_gpus``.
        """
        if not self.decode_on_device or self.devices is not None:
            return
        if isinstance(self.scheduler, Ray) and self.scheduler.num_gpus:
            return
        raise InvalidArgumentError(
            "decode_on_device=True decodes JPEG images on the GPU each worker is placed on, but no worker "
            "is placed on one (devices=None). Pass devices='cuda' (or GPU indices) with num_workers >= 1, "
            "or lc.schedulers.Ray(num_gpus=...); or leave decode_on_device False to decode on the CPU."
        )

    def identity(self) -> dict[str, Any]:
        """The options that change what an eval writes (part of its fingerprint).

        The scheduler, the worker count, the devices, the progress bar and the checkpoint interval do
        not: a rerun with other values is the same eval, which is what lets it resume with more workers.
        ``decode_on_device`` does, when set: nvJPEG's pixels differ from the CPU decoder's by a level or
        two, so a run that resumes with the other decoder would mix them (left out when False, so that
        every eval recorded before the option keeps its fingerprint).
        """
        out: dict[str, Any] = {
            "skip_ok": self.skip_ok,
            "check_lengths": self.check_lengths,
            "pad_data_in": self.pad_data_in,
            "ignore_errors": self.ignore_errors,
            "batch_size": self.batch_size,
            "seed": self.seed,
        }
        if self.decode_on_device:
            out["decode_on_device"] = True
        return out


def draw_seed() -> int:
    """A fresh seed for an eval given none (63 bits: it fits every JSON reader and numpy)."""
    return secrets.randbits(63)
