"""How an ingest stores its images, decided before any file is decoded: the stored format (`plan_images`),
the colour mode (`target_mode`), and where the dataset may go (`refuse_overlap`)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from lakecompute.errors import InvalidArgumentError, warn
from lakecompute.ingest._files import EXTENSION_FORMATS, PathLike

__all__ = [
    "IngestPlan",
    "check_compression",
    "plan_for_ingest",
    "plan_images",
    "refuse_overlap",
    "target_mode",
]

# Which stored format wins a tie between equally common ones, and the one used when the most common
# format is none a tensor stores (bmp): lossless first.
_PREFERENCE: Final = ("png", "jpeg", "webp")


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """What `ingest_classification` does with a folder's files, decided from their names alone.

    Attributes:
        compression: how ``images`` are stored: ``"png"``, ``"jpeg"``, ``"webp"`` or None (arrays).
        formats: files per format (from their name endings), most common first.
        kept: files in the stored format, whose bytes are stored as they are (when their colour mode
            is the tensor's too: a greyscale JPEG among colour ones is converted after all).
        converted: files per other format, decoded and encoded again as ``compression``.
    """

    compression: str | None
    formats: dict[str, int]
    kept: int
    converted: dict[str, int]

    def summary(self) -> str:
        """One line for people: the stored format, and how many files were kept and converted."""
        stored = self.compression or "arrays (uncompressed)"
        total = sum(self.formats.values())
        if not self.converted:
            return f"Images stored as {stored}: all {total} files kept as they are."
        counts = ", ".join(f"{fmt}: {n}" for fmt, n in self.converted.items())
        return (
            f"Images stored as {stored}: {self.kept} of {total} files kept as they are, "
            f"{total - self.kept} converted ({counts})."
        )


def plan_images(paths: Sequence[str], image_compression: str | None) -> IngestPlan:
    """How images at ``paths`` are stored for ``image_compression`` (``"auto"``: their most common
    format), decided from their name endings alone (see `IngestPlan`). A path whose ending names no
    format (a table's image path without one) counts for none; with none counted, ``"auto"`` is png."""
    from lakecompute.compression import parse_sample_compression

    named = (EXTENSION_FORMATS.get(os.path.splitext(p)[1].lower()) for p in paths)
    formats = Counter(f for f in named if f is not None)
    ranked = dict(sorted(formats.items(), key=lambda kv: (-kv[1], kv[0])))
    if image_compression == "auto":
        # The most common format wins; among equals lossless first; png when the most common is one
        # no tensor stores (bmp), which keeps those files exact, or when no name says a format.
        best = max(formats.values(), default=0)
        winners = [f for f in _PREFERENCE if formats.get(f) == best]
        compression: str | None = winners[0] if winners else "png"
    else:
        compression = parse_sample_compression(image_compression)
    kept = formats.get(compression, 0) if compression is not None else 0
    converted = {f: n for f, n in ranked.items() if f != compression}
    return IngestPlan(compression, ranked, kept, converted)


def check_compression(value: object) -> str | None:
    """``"auto"``, or a sample compression checked by `lakecompute.compression.parse_sample_compression`."""
    from lakecompute.compression import parse_sample_compression

    if value == "auto":
        return "auto"
    return parse_sample_compression(value)  # type: ignore[arg-type]  # checked there, with a message


def plan_for_ingest(paths: Sequence[str], image_compression: str | None) -> IngestPlan:
    """`plan_images` for an ingest about to run: with ``"auto"``, a plan that stores files of other formats
    as JPEG (lossy: a PNG's exact pixels change) is said, with a `LakeComputeWarning` giving the plan line
    and how to keep them exact. A format the caller names is not warned about: it was asked for."""
    plan = plan_images(paths, image_compression)
    if image_compression == "auto" and plan.compression == "jpeg" and plan.converted:
        converted = sum(plan.converted.values())
        warn(
            f"{plan.summary()} The {converted} file(s) in other formats are decoded and stored as JPEG, "
            "which is lossy: their pixels change (PNG and BMP files are lossless and lose their exact "
            "values). Pass image_compression='png' (or 'webp') to keep every image exact, or convert "
            "those files to JPEG yourself first."
        )
    return plan


def refuse_overlap(src: str, dest: PathLike, what: str = "source folder") -> None:
    """Refuse a destination that is the source (a folder or file), inside it, or contains it: creating the
    dataset there would delete or mix with the source (``overwrite`` or not). ``what`` names the source."""
    text = os.fspath(dest)
    if "://" in text and not text.startswith("file://"):
        return  # mem:// and s3:// cannot be a local folder
    a = os.path.realpath(src)
    b = os.path.realpath(text.removeprefix("file://"))
    if a == b or b.startswith(a + os.sep) or a.startswith(b + os.sep):
        where = "is" if a == b else "is inside" if b.startswith(a + os.sep) else "contains"
        raise InvalidArgumentError(
            f"The destination {text!r} {where} the {what} {src!r}: creating the dataset there would "
            f"delete or mix with it. Choose a destination outside the {what}."
        )


def target_mode(paths: Sequence[str], convert_depth: bool = False) -> Literal["L", "RGB"]:
    """``L`` when every readable file is greyscale, else ``RGB``: a tensor's samples share one rank (with
    ``convert_depth``, 16-bit greyscale counts as greyscale; without, such files are refused anyway)."""
    from PIL import Image

    grey = {"L", "1", "I;16", "I;16B", "I;16L", "I;16N"} if convert_depth else {"L", "1"}
    for path in paths:
        try:
            with Image.open(path) as image:  # reads the header only
                mode = image.mode
        except Exception:
            continue  # an unreadable file is reported, by name, by the worker that decodes it
        if mode not in grey:
            return "RGB"
    return "L"
