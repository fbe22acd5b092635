"""The options every ingest takes (`ingest_classification`, `ingest_coco`, `ingest_yolo`): typed once
(`IngestKwargs`), checked once (`IngestOptions.parse`, with `lakecompute.parsing`'s rules)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict

from lakecompute.ingest._files import ReadOptions
from lakecompute.ingest._plan import check_compression
from lakecompute.parsing import parse_count, parse_flag, parse_keywords

__all__ = ["IngestKwargs", "IngestOptions"]

# Below this many files, starting worker processes costs more than it saves.
_PARALLEL_FROM: Final = 100


class IngestKwargs(TypedDict, total=False):
    """The keyword options every ingest takes (`lakecompute.ingest_classification`,
    `lakecompute.ingest_coco`, `lakecompute.ingest_yolo`), each optional."""

    num_workers: int | None
    """Worker processes; None (the default) picks one per CPU (at most 8), or none for fewer than 100
    files."""
    scheduler: str
    """``"processed"`` (the default), ``"threaded"`` or ``"serial"``."""
    skip_errors: bool
    """Skip the images whose file cannot be read, or (COCO, YOLO) one of whose annotations breaks a rule,
    with a `lakecompute.LakeComputeWarning` listing each and its reason, instead of raising (default False).
    Problems with the annotations file as a whole are raised either way."""
    overwrite: bool
    """Replace a dataset already at ``dest`` (default False)."""
    storage_options: dict[str, Any] | None
    """Passed to the object store for ``s3://`` paths."""
    checkpoint_interval: int
    """Commit every this many files (default 0: once, at the end). A failed or killed ingest then keeps
    what it committed, and the same call with ``resume=True`` continues it."""
    resume: bool
    """Continue the unfinished ingest at ``dest`` (made by the same call with ``checkpoint_interval``)
    after its last checkpoint; start anew if there is none (default False)."""
    convert_depth: bool
    """Store images of 16 bits per channel (16-bit PNGs of any mode) at 8 bits, keeping each value's high
    byte, instead of refusing them, naming their depth (default False)."""
    exif_transpose: bool
    """Turn each image upright as its EXIF orientation says, as viewers, browsers and OpenCV show it
    (default False: the pixels as stored, as Pillow and torchvision's ``ImageFolder`` read them). A turned
    file is encoded again in the stored format (a JPEG loses a little). Annotations (COCO, YOLO) are taken
    as they are: use it when they were drawn on the upright image (``docs/ingest.md``)."""


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """How an ingest stores its images and runs its eval, checked (see `IngestKwargs` for each meaning).

    Attributes:
        image_compression: ``"auto"`` (the files' most common format), a sample compression, or None.
        progressbar: show a progress bar.
        num_workers: worker processes; None picks by the number of files (`workers_for`).
        scheduler: the eval's scheduler.
        skip_errors: skip files that cannot be read (with a warning listing them) instead of raising.
        overwrite: replace a dataset already at the destination.
        storage_options: passed to the object store for ``s3://`` destinations.
        checkpoint_interval: commit every this many files (0: once, at the end).
        resume: continue the unfinished ingest at the destination instead of starting anew.
        convert_depth: store images of 16 bits per channel at 8 bits instead of refusing them.
        exif_transpose: turn images upright as their EXIF orientation says.
    """

    image_compression: str | None = "auto"
    progressbar: bool = True
    num_workers: int | None = None
    scheduler: str = "processed"
    skip_errors: bool = False
    overwrite: bool = False
    storage_options: dict[str, Any] | None = field(default=None, hash=False)
    checkpoint_interval: int = 0
    resume: bool = False
    convert_depth: bool = False
    exif_transpose: bool = False

    @property
    def reading(self) -> ReadOptions:
        """How the image files are read (`ReadOptions`)."""
        return ReadOptions(self.convert_depth, self.exif_transpose)

    @classmethod
    def parse(
        cls,
        call: str,
        options: Mapping[str, Any],
        image_compression: Literal["auto", "png", "jpeg", "webp"] | None = "auto",
        progressbar: bool = True,
    ) -> IngestOptions:
        """Check the options of the ingest ``call`` (``"ingest_coco"``): `IngestKwargs` and the two each
        ingest names itself.

        Raises:
            InvalidTypeError: an option of the wrong type, or one the ingest does not take.
            InvalidArgumentError: a count out of range, or an unknown compression.
        """
        parse_keywords(call, options, IngestKwargs.__optional_keys__)
        checked: dict[str, Any] = dict(options)
        for name in ("skip_errors", "overwrite", "resume", "convert_depth", "exif_transpose"):
            if name in options:
                checked[name] = parse_flag(name, options[name])
        checked["num_workers"] = parse_count("num_workers", options.get("num_workers"), optional=True)
        checked["checkpoint_interval"] = parse_count(
            "checkpoint_interval", options.get("checkpoint_interval", 0), hint="Use 0 for no checkpoints."
        )
        return cls(check_compression(image_compression), parse_flag("progressbar", progressbar), **checked)

    def workers_for(self, n_items: int) -> int:
        """The worker count for ``n_items`` files."""
        if self.num_workers is not None:
            return self.num_workers
        return 0 if n_items < _PARALLEL_FROM else min(8, os.cpu_count() or 1)
