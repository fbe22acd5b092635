"""Running an ingest: create the dataset, make its tensors, fill it with an eval, and clean up or
report what failed."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakecompute.compute import Transform, compute
from lakecompute.datasets import delete, empty, exists, load
from lakecompute.errors import EvalConflictError, InvalidSampleError, LakeComputeWarning, TransformError
from lakecompute.ingest._files import AS_STORED, PathLike, unreadable, with_skip_advice, without_skip_advice
from lakecompute.ingest._options import IngestOptions
from lakecompute.ingest._plan import plan_for_ingest, target_mode

if TYPE_CHECKING:
    from lakecompute.compute import ComputeFunction
    from lakecompute.datasets import Dataset

__all__ = ["Skipped", "fill_dataset", "run_ingest"]


def run_ingest(
    dest: PathLike,
    setup: Callable[[Dataset, str | None], None],
    image_fn: Callable[..., None],
    items: Sequence[Any],
    paths: Sequence[str],
    src: str,
    options: IngestOptions,
    **fn_kwargs: Any,
) -> Dataset:
    """Plan how the images at ``paths`` are stored, create the dataset at ``dest``, make its tensors
    (``setup(ds, compression)``, one commit) and fill it with an eval of ``image_fn`` over ``items``
    (``paths[i]`` names the file of ``items[i]`` in errors and warnings).

    Every image ingest stores its images the same way: the compression `plan_for_ingest` chooses for
    the files (or the one the caller asked for) and the pixel mode `target_mode` gives them, read as the
    options say (``reading``, a `ReadOptions`, given only when not the default), bound into ``image_fn``
    with ``fn_kwargs`` as ``compute(image_fn)(mode=..., compression=..., reading=..., **fn_kwargs)``.

    On a failure nothing is left at ``dest`` (with ``checkpoint_interval``: what was checkpointed, for
    ``resume``); a file that cannot be read raises `InvalidSampleError` naming it. With ``skip_errors``
    the files that failed are listed in a `LakeComputeWarning`, each with the reason it failed.
    """
    function, compression = _function(image_fn, paths, options, fn_kwargs)

    def failed(err: TransformError) -> Exception:
        cause = err.__cause__ or err
        path = paths[err.index] if err.index is not None else src
        if isinstance(cause, InvalidSampleError):
            # Raised as the caller's error, naming the sample's file once: a reader's message names the
            # input it read (an annotations or label file, the image), the dataset's checks name none.
            source = cause.source or (path if path in cause.detail else "")
            named = "" if source else f"the sample of {path!r}: "
            return InvalidSampleError(
                cause.tensor, named + with_skip_advice(cause.detail), source=source or path
            )
        return unreadable(path, cause, "images")

    return fill_dataset(
        dest,
        lambda ds: setup(ds, compression),
        function,
        items,
        Skipped("images", lambda i: paths[i], src),
        failed,
        options,
    )


@dataclass(frozen=True)
class Skipped:
    """How an ingest's warning names what ``skip_errors=True`` skipped: ``what`` (``"images"``, ``"rows"``)
    of ``src``, each by ``name_of(index)`` (its file, its row)."""

    what: str
    name_of: Callable[[int], str]
    src: str
    inputs: str = "the files and annotations"
    """What the ingest reads, for the message that refuses to resume after it changed."""


def fill_dataset(
    dest: PathLike,
    setup: Callable[[Dataset], None],
    function: Transform,
    data_in: Any,
    skipped: Skipped,
    failed: Callable[[TransformError], Exception],
    options: IngestOptions,
) -> Dataset:
    """Create the dataset at ``dest`` (or open it to resume), make its tensors (``setup``, one commit)
    and fill it with an eval of ``function`` over ``data_in``: what every ingest shares.

    On a failure nothing is left at ``dest`` (with ``checkpoint_interval``: what was checkpointed, for
    ``resume``), and a sample's failure is raised as ``failed(err)`` says. With ``skip_errors`` what
    failed is listed in a `LakeComputeWarning` (`Skipped`), each with the reason it failed.
    """
    where = options.storage_options
    resuming = options.resume and exists(dest, storage_options=where)
    if resuming:
        ds = load(dest, storage_options=where)
    else:
        ds = empty(dest, overwrite=options.overwrite, storage_options=where)
    # With checkpoints, a failed ingest keeps what it committed, for resume=True to continue.
    discard = not options.checkpoint_interval and not resuming
    try:
        if not resuming:
            with ds:
                setup(ds)
        result = function.eval(
            data_in,
            ds,
            num_workers=options.workers_for(len(data_in)),
            scheduler=options.scheduler,
            progressbar=options.progressbar,
            ignore_errors=options.skip_errors,
            checkpoint_interval=options.checkpoint_interval,
        )
    except TransformError as err:
        if discard:
            delete(dest, missing_ok=True, storage_options=where)
        raise failed(err) from err
    except EvalConflictError as err:
        raise _cannot_resume(err, skipped) from err  # only when resuming: nothing to delete
    except BaseException:
        if discard:
            delete(dest, missing_ok=True, storage_options=where)
        raise
    if result.failed:
        reasons = [_reason(skipped.name_of(f.index), f.message) for f in result.failed]
        shown = "\n  ".join(reasons[:20]) + (
            f"\n  ... and {len(reasons) - 20} more" if len(reasons) > 20 else ""
        )
        warnings.warn(
            f"Skipped {len(reasons)} of {len(data_in)} {skipped.what} in {skipped.src!r} "
            f"(skip_errors=True), each for the reason given:\n  {shown}",
            LakeComputeWarning,
            stacklevel=4,
        )
    return ds


def _function(
    image_fn: Callable[..., None], paths: Sequence[str], options: IngestOptions, fn_kwargs: dict[str, Any]
) -> tuple[ComputeFunction, str | None]:
    """The ingest's compute function, with what it needs bound, and the images' stored compression."""
    compression = plan_for_ingest(paths, options.image_compression).compression
    mode = target_mode(paths, options.convert_depth)
    if options.reading != AS_STORED:
        # Bound only when asked for: an ingest with the default reading keeps the fingerprint it had
        # before the option existed (its checkpoints resume), and image functions need not take it.
        fn_kwargs = {**fn_kwargs, "reading": options.reading}
    return compute(image_fn)(mode=mode, compression=compression, **fn_kwargs), compression


def _cannot_resume(err: EvalConflictError, skipped: Skipped) -> EvalConflictError:
    """The eval's refusal to resume, in an ingest's terms: what the ingest takes to start over (an ingest
    takes no ``rerun=True``)."""
    if err.version != err.checkpoint_version:
        why = (
            f"the dataset was changed since its last checkpoint (version {err.checkpoint_version}, now "
            f"{err.version})"
        )
    else:
        why = f"{skipped.inputs} or the options changed since it began"  # as the eval's record says
    return EvalConflictError(
        err.path, err.done, err.checkpoint_version, err.version, err.label,
        message=(
            f"Cannot resume the ingest into {err.path!r}: it holds the first {err.done} {skipped.what} of an "
            f"unfinished ingest ({err.label}), and {why}, so the rest would not match them. Pass "
            f"overwrite=True instead of resume=True to ingest everything anew, or put {skipped.inputs} back "
            "as they were and resume."
        ),
    )  # fmt: skip


def _reason(path: str, message: str) -> str:
    """One line of the skip_errors warning: why the file at ``path`` was skipped, naming it once (a
    reader's message may name it already) and without the advice to pass skip_errors=True (it is on)."""
    reason = without_skip_advice(message)
    return reason if path in reason else f"{path}: {reason}"
