"""What each ``lakecompute`` subcommand does, given its parsed arguments (the table of verbs that parses
them is `lakecompute.cli._verbs`). Each returns the exit code; errors are raised and reported by
`lakecompute.cli.main`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, Literal

__all__ = [
    "graph_lines",
    "run_compact",
    "run_demo",
    "run_diff",
    "run_info",
    "run_ingest_classification",
    "run_ingest_coco",
    "run_ingest_yolo",
    "run_log",
    "run_restore",
    "run_show",
    "run_vacuum",
    "run_view",
    "version_arg",
]


def run_info(args: argparse.Namespace) -> int:
    import lakecompute as lc

    version = version_arg(args.version)
    try:
        ds = lc.load(args.path, read_only=True, version=version, branch=args.branch)
    except lc.DatasetNotFoundError:
        if version is None or not lc.exists(args.path):
            raise
        versions = [entry["version"] for entry in lc.load(args.path, read_only=True).log(all_branches=True)]
        raise lc.InvalidArgumentError(
            f"The dataset at {args.path!r} has no version {version}: its versions are "
            f"{_spans(versions)}. 'lakecompute log {args.path}' lists them."
        ) from None
    print(ds.summary_table())
    from lakecompute.cli._select import class_histograms  # after the table: it reads the label columns

    for line in class_histograms(ds):
        print(line)
    return 0


def version_arg(text: str | None) -> int | str | None:
    """A version given on the command line: a number, or a tag or branch name."""
    from lakecompute.versioned import is_version_number

    if text is None:
        return None
    return int(text) if is_version_number(text) else text


def _spans(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def run_log(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path, read_only=True, branch=args.branch)
    entries = ds.log(all_branches=args.graph, evals=args.evals)
    if args.graph:
        for line in graph_lines(entries):
            print(line)
        return 0
    print(f"{'version':>7}  {'time':19}  {'message':<40}  samples")
    for entry in entries:
        counts = ", ".join(f"{k}={v}" for k, v in entry["samples"].items()) or "no tensors"
        refs = _refs_text(entry)
        message = entry["message"] + _folded_text(entry)
        print(f"{entry['version']:>7}  {_when(entry['time'])}  {message:<40}  {counts}{refs}")
    return 0


def _folded_text(entry: dict[str, Any]) -> str:
    """``" (+3 checkpoints: 4-6)"``: the checkpoint versions folded into an eval's entry (``--evals``)."""
    folded = entry.get("eval", {}).get("checkpoints", [])
    if not folded:
        return ""
    return f" (+{len(folded)} checkpoint{'s' if len(folded) > 1 else ''}: {_spans(folded)})"


def _when(seconds: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _refs_text(entry: dict[str, Any]) -> str:
    """``"  [main, tag: v1.0]"``: the branches at a version and its tags."""
    names = list(entry.get("branches", [])) + [f"tag: {t}" for t in entry.get("tags", [])]
    return f"  [{', '.join(names)}]" if names else ""


def graph_lines(entries: list[dict[str, Any]]) -> list[str]:
    """The history of every branch, newest first, one line per version: a lane per branch (``*`` the
    branch the version was committed on, ``|`` the other branches alive at that point, ``+`` a branch
    that started from this version or was merged into it), the version, its parents (two for a merge),
    the branch, time and message, and the refs at it."""
    lanes: list[str] = []
    span: dict[str, tuple[int, int]] = {}  # branch -> (the version it started from, its newest version)
    lane_of = {entry["version"]: entry["branch"] for entry in entries}
    for entry in entries:  # oldest first
        lane = entry["branch"]
        if lane not in lanes:
            lanes.append(lane)
            parents = entry["parents"]
            span[lane] = (parents[0] if parents else entry["version"], entry["version"])
        span[lane] = (span[lane][0], entry["version"])
        for p in entry["parents"][1:]:  # a merge: the merged branch's lane runs up to here
            merged = lane_of.get(p)
            if merged in span:
                span[merged] = (span[merged][0], max(span[merged][1], entry["version"]))
    width = max(1, len(lanes)) * 2
    out = [f"{'graph':<{width}}  {'version':>7}  {'parents':<9}  {'branch':<12}  {'time':19}  message"]
    for entry in reversed(entries):
        v = entry["version"]
        joined = {lane_of.get(p) for p in entry["parents"][1:]}
        marks = []
        for lane in lanes:
            first, last = span[lane]
            if lane == entry["branch"]:
                marks.append("*")
            elif lane in joined or (first == v and lane_of.get(v) != lane):
                marks.append("+")
            elif first < v <= last:
                marks.append("|")
            else:
                marks.append(" ")
        parents = ", ".join(str(p) for p in entry["parents"]) or "-"
        lanes_text = " ".join(marks)
        out.append(
            f"{lanes_text:<{width}}  {v:>7}  {parents:<9}  {entry['branch']:<12}  {_when(entry['time'])}  "
            f"{entry['message']}{_refs_text(entry)}"
        )
    return out


def run_restore(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path, branch=args.branch)
    old = version_arg(args.version)
    new = ds.restore(old)  # type: ignore[arg-type]  # a number or a name, never None here
    print(f"Restored {args.path} on branch {ds.branch!r} to the content of {old!r}: version {new}.")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    import json

    import lakecompute as lc

    ds = lc.load(args.path, read_only=True)
    result = ds.diff(version_arg(args.a), version_arg(args.b))
    print(json.dumps(result.to_dict(), indent=2) if args.json else str(result))
    return 0


def _run_ingest(args: argparse.Namespace, ingest: Callable[..., Any], *paths: str, **extra: Any) -> Any:
    """Run an ingest function with the common options, printing its warnings to stderr."""
    import warnings

    import lakecompute as lc

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", lc.LakeComputeWarning)
        ds = ingest(
            *paths,
            image_compression=None if args.image_compression == "none" else args.image_compression,
            progressbar=not args.no_progress,
            num_workers=args.num_workers,
            skip_errors=args.skip_errors,
            overwrite=args.overwrite,
            checkpoint_interval=args.checkpoint_interval,
            resume=args.resume,
            convert_depth=args.convert_depth,
            exif_transpose=args.exif_transpose,
            **extra,
        )
    for w in caught:
        print(f"lakecompute: warning: {w.message}", file=sys.stderr)
    return ds


def run_ingest_coco(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = _run_ingest(args, lc.ingest_coco, args.images, args.annotations, args.dest, masks=not args.no_masks)
    objects = sum(len(b) for b in ds.boxes.numpy(aslist=True))
    print(f"Ingested {len(ds)} images with {objects} annotations into {args.dest}.")
    print(ds.summary_table())
    return 0


def run_ingest_yolo(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = _run_ingest(args, lc.ingest_yolo, args.src, args.dest, split=args.split)
    objects = sum(len(b) for b in ds.boxes.numpy(aslist=True))
    print(f"Ingested {len(ds)} images with {objects} objects into {args.dest}.")
    print(ds.summary_table())
    return 0


def run_ingest_classification(args: argparse.Namespace) -> int:
    import lakecompute as lc

    compression = None if args.image_compression == "none" else args.image_compression
    plan = lc.ingest.plan_classification(args.src, compression)
    ds = _run_ingest(args, lc.ingest_classification, args.src, args.dest)
    names = ds.labels.info.class_names
    print(f"Ingested {len(ds)} images of {len(names)} classes ({', '.join(names)}) into {args.dest}.")
    print(plan.summary())
    print(ds.summary_table())
    return 0


def run_compact(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path)
    version = ds.compact(progressbar=not args.no_progress)
    print(f"Compacted {args.path}: version {version}.")
    return 0


def _folder_bytes(path: str) -> int | None:
    """Bytes of the files under a local folder; None for other locations (s3://, mem://)."""
    if not os.path.isdir(path):
        return None
    return sum(
        os.path.getsize(os.path.join(root, name)) for root, _dirs, files in os.walk(path) for name in files
    )


def run_vacuum(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path)
    before = _folder_bytes(args.path)
    removed = ds.vacuum(
        grace_seconds=args.grace_seconds, keep_versions=args.keep_versions, progressbar=not args.no_progress
    )
    after = _folder_bytes(args.path)
    if not any(removed.values()):
        print(f"Vacuumed {args.path}: nothing to remove.")
        return 0
    parts = [f"{count} {what if count != 1 else what[:-1]}" for what, count in removed.items()]
    freed = "" if before is None or after is None else f"; {_size(before - after)} freed"
    print(f"Vacuumed {args.path}: removed {', '.join(parts[:-1])} and {parts[-1]}{freed}.")
    return 0


def _size(nbytes: int) -> str:
    """``2048`` as ``"2.0 kB"``."""
    if abs(nbytes) < 1000:
        return f"{nbytes} bytes"
    for unit, scale in (("kB", 1e3), ("MB", 1e6)):
        if abs(nbytes) < 1000 * scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 1e9:.1f} GB"


def run_show(args: argparse.Namespace) -> int:
    import lakecompute as lc
    from lakecompute.cli._select import selected
    from lakecompute.viz import contact_sheet

    _check_image_file_name(args.output)
    ds = selected(lc.load(args.path, read_only=True), args.where, args.objects)
    indices: list[int] | Literal["spread"] = "spread"
    if args.indices:
        try:
            indices = [int(x) for x in args.indices.split(",") if x.strip()]
        except ValueError:
            raise lc.InvalidArgumentError(
                f"--indices takes comma-separated integers such as 0,5,9. Got {args.indices!r}."
            ) from None
    labels = {"auto": "auto", "none": None}.get(args.labels, args.labels)
    sheet = contact_sheet(
        ds,
        tensor=args.tensor,
        label_tensor=labels,
        indices=indices,
        cols=args.cols,
        rows=args.rows,
        targets=not args.no_targets,
    )
    sheet.save(args.output)
    print(f"Wrote {args.output} ({sheet.width}x{sheet.height}).")
    return 0


def run_view(args: argparse.Namespace) -> int:
    import warnings

    from lakecompute.errors import LakeComputeWarning
    from lakecompute.viewer import serve

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LakeComputeWarning)
        viewer = serve(
            args.path,
            version=version_arg(args.version),
            branch=args.branch,
            host=args.host,
            port=args.port,
            open_browser=not args.no_browser,
            expr=args.expr,
            verbose=args.verbose,
        )
    for warning in caught:
        print(f"lakecompute: warning: {warning.message}", file=sys.stderr)
    print(f"Serving {args.path} at {viewer.url} (read-only; Ctrl-C stops it).", flush=True)
    try:
        viewer.wait()
    except KeyboardInterrupt:
        print("Stopped.")
    return 0


def _check_image_file_name(path: str) -> None:
    """Refuse, before any work, an output name whose extension names no image format Pillow writes."""
    from PIL import Image

    from lakecompute.errors import InvalidArgumentError

    ext = os.path.splitext(path)[1].lower()
    if Image.registered_extensions().get(ext) not in Image.SAVE:
        raise InvalidArgumentError(
            f"-o takes an image file name such as grid.png or grid.jpg. Got {path!r}, whose extension "
            f"{ext or '(none)'} names no image format."
        )


def run_demo(args: argparse.Namespace) -> int:
    from lakecompute.demo import run_demo

    run_demo(args.output_dir, n=args.samples, num_workers=args.num_workers, progressbar=not args.no_progress)
    return 0
