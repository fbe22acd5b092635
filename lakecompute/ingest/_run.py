"""Running an ingest: create the dataset, make its tensors, fill it with an eval, and clean up or
report what failed."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lakecompute.compute import compute
from lakecompute.datasets import delete, empty, exists, load
from lakecompute.errors import EvalConflictError, InvalidSampleError, LakeComputeWarning, TransformError
from lakecompute.ingest._files import AS_STORED, PathLike, unreadable, with_skip_advice, without_skip_advice
from lakecompute.ingest._options import IngestOptions
from lakecompute.ingest._plan import plan_for_ingest, target_mode

if TYPE_CHECKING:
    from lakecompute.compute import ComputeFunction
    from lakecompute.datasets import Dataset

__all__ = ["run_ingest"]


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
                setup(ds, compression)
        result = function.eval(
            items,
            ds,
            num_workers=options.workers_for(len(items)),
            scheduler=options.scheduler,
            progressbar=options.progressbar,
            ignore_errors=options.skip_errors,
            checkpoint_interval=options.checkpoint_interval,
        )
    except TransformError as err:
        if discard:
            delete(dest, missing_ok=True, storage_options=where)
        cause = err.__cause__ or err
        path = paths[err.index] if err.index is not None else src
        if isinstance(cause, InvalidSampleError):
            # Raised as the caller's error, naming the sample's file once: a reader's message names the
            # input it read (an annotations or label file, the image), the dataset's checks name none.
            source = cause.source or (path if path in cause.detail else "")
            named = "" if source else f"the sample of {path!r}: "
            raise InvalidSampleError(
                cause.tensor, named + with_skip_advice(cause.detail), source=source or path
            ) from err
        raise unreadable(path, cause, "images") from err
    except EvalConflictError as err:
        raise _cannot_resume(err) from err  # only when resuming: nothing to delete
    except BaseException:
        if discard:
            delete(dest, missing_ok=True, storage_options=where)
        raise
    if result.failed:
        reasons = [_reason(paths[f.index], f.message) for f in result.failed]
        shown = "\n  ".join(reasons[:20]) + (
            f"\n  ... and {len(reasons) - 20} more" if len(reasons) > 20 else ""
        )
        warnings.warn(
            f"Skipped {len(reasons)} of {len(items)} images in {src!r} (skip_errors=True), each for the "
            f"reason given:\n  {shown}",
            LakeComputeWarning,
            stacklevel=3,
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


def _cannot_resume(err: EvalConflictError) -> EvalConflictError:
    """The eval's refusal to resume, in an ingest's terms: what the ingest takes to start over (an ingest
    takes no ``rerun=True``)."""
    if err.version != err.checkpoint_version:
        why = (
            f"the dataset was changed since its last checkpoint (version {err.checkpoint_version}, now "
            f"{err.version})"
        )
    else:
        why = "the files, the annotations or the options changed since it began"
    return EvalConflictError(
        err.path, err.done, err.checkpoint_version, err.version, err.label,
        message=(
            f"Cannot resume the ingest into {err.path!r}: it holds the first {err.done} images of an "
            f"unfinished ingest ({err.label}), and {why}, so the rest would not match them. Pass "
            "overwrite=True instead of resume=True to ingest everything anew, or put the files and "
            "annotations back as they were and resume."
        ),
    )  # fmt: skip


def _reason(path: str, message: str) -> str:
    """One line of the skip_errors warning: why the file at ``path`` was skipped, naming it once (a
    reader's message may name it already) and without the advice to pass skip_errors=True (it is on)."""
    reason = without_skip_advice(message)
    return reason if path in reason else f"{path}: {reason}"
