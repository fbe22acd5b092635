"""The selecting subcommands: ``filter`` (rows by an expression, shown or saved), ``count`` (a table of a
tensor's values), and the class histograms ``info`` prints under its summary."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import lakecompute as lc

__all__ = ["class_histograms", "run_count", "run_filter", "selected"]

#: Row indices ``filter`` prints before it says how many more there are.
_SHOWN = 20
#: The width of a histogram's longest bar, in characters.
_BAR = 30


def _open(args: argparse.Namespace) -> lc.Dataset:
    import lakecompute as lc
    from lakecompute.cli._commands import version_arg

    return lc.load(args.path, read_only=True, version=version_arg(args.version))


def selected(data: Any, where: str | None, objects: str | None) -> Any:
    """``data`` with the rows ``where`` keeps, holding only the objects ``objects`` keeps (each optional)."""
    if where:
        data = data.filter(where)
    if objects:
        data = data.filter_labels(objects)
    return data


def run_filter(args: argparse.Namespace) -> int:
    """``lakecompute filter PATH EXPR [--objects] [--save DEST]``: the rows (and objects) kept."""
    import numpy as np

    ds = _open(args)
    view = ds.filter_labels(args.expr) if args.objects else ds.filter(args.expr)
    rows = np.asarray(view.positions).tolist()
    what = "keep objects in" if args.objects else "match"
    print(f"{len(rows)} of {len(ds)} rows {what} {args.expr!r} (version {ds.version}).")
    if rows:
        more = f", ... ({len(rows) - _SHOWN} more)" if len(rows) > _SHOWN else ""
        print("rows: " + ", ".join(str(r) for r in rows[:_SHOWN]) + more)
    if args.save:
        saved = view.save(args.save, overwrite=args.overwrite, progressbar=not args.no_progress)
        how = " | ".join(view.selected_by)
        print(f"Saved {len(saved)} rows to {args.save} ({how}, from version {ds.version}).")
    return 0


def _table(counts: dict[Any, int], total_label: str) -> list[str]:
    """A table of values, counts, shares and bars, most frequent first."""
    total = sum(counts.values())
    keys = [str(k) for k in counts]
    width = max([len("value"), *map(len, keys)])
    top = max(counts.values(), default=0)
    lines = [f"{'value':<{width}}  {'count':>8}  {'share':>6}", f"{'-' * width}  {'-' * 8}  {'-' * 6}"]
    for key, count in zip(keys, counts.values(), strict=True):
        share = f"{100 * count / total:5.1f}%" if total else "    -"
        bar = "#" * (round(_BAR * count / top) if top else 0)
        lines.append(f"{key:<{width}}  {count:>8}  {share:>6}  {bar}".rstrip())
    lines.append(f"{total_label}: {total}")
    return lines


def run_count(args: argparse.Namespace) -> int:
    """``lakecompute count PATH TENSOR``: how often each value occurs (every object of per-object values)."""
    ds = _open(args)
    data = selected(ds, args.where, None)
    counts = data.count_values(args.tensor)
    for line in _table(counts, "total"):
        print(line)
    return 0


def class_histograms(ds: Any) -> list[str]:
    """The counts of every class_label tensor of ``ds`` (every object of per-object labels), as text."""
    from lakecompute.specs import htype_declaration

    lines: list[str] = []
    for name, tensor in ds.tensors.items():
        if not htype_declaration(tensor.htype).labels or not len(tensor):
            continue
        lines.append("")
        lines.append(f"{name} (class_label):")
        lines.extend("  " + line for line in _table(ds.count_values(name), "total"))
    return lines
