"""Progress bars: one tqdm bar, shown or not, made the same way by every long operation that is not an
eval (copies, compaction, vacuum, exports); evals and ingests show theirs through the engine."""

from __future__ import annotations

from typing import Any

from lakecompute.parsing import parse_flag

__all__ = ["progress_bar"]


def progress_bar(
    total: int, desc: str, *, unit: str = "sample", enabled: bool = True, initial: int = 0
) -> Any:
    """A tqdm bar of ``total`` steps labelled ``desc`` (``"export_coco"``), or, with ``enabled`` False, one
    that shows nothing (tqdm's ``disable``: ``update`` and ``close`` still work).

    Raises:
        InvalidTypeError: ``enabled`` is not True or False (it is the caller's ``progressbar``).

    Example:
        >>> with progress_bar(3, "demo", enabled=False) as bar:
        ...     bar.update(3)  # counted on a shown bar; this one draws nothing
        >>> bar.disable
        True
    """
    from tqdm.auto import tqdm

    show = parse_flag("progressbar", enabled)
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, disable=not show)
