"""The ``lakecompute`` command: look at datasets and their history, ingest image folders, restore, compact,
vacuum, and run the demo.

A user's mistake never ends in a traceback: it prints one line, ``lakecompute: error: ...``, on stderr.
Exit codes: 0 on success, 1 when lakecompute reports an error (a missing dataset, a file it cannot write,
...), 2 for a usage error (an unknown command or a bad option), 130 on Ctrl-C, 141 when the reader of
the output went away (``lakecompute log DS | head -1``: the rest is dropped quietly, like any Unix tool).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal, NoReturn

__all__ = ["build_parser", "main", "shell_message"]

_EPILOG = """examples:
  lakecompute demo
  lakecompute ingest-classification ./animals ./animals-lc
  lakecompute info ./animals-lc
  lakecompute show ./animals-lc --tensor images --rows 2 --cols 6 -o grid.png
  lakecompute log ./animals-lc --graph
  lakecompute diff ./animals-lc main experiment
  lakecompute restore ./animals-lc 3
  lakecompute vacuum ./animals-lc --keep-versions 3

Run 'lakecompute COMMAND --help' for a command's options."""


def _info(args: argparse.Namespace) -> int:
    import lakecompute as lc

    version = _version_arg(args.version)
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
    return 0


def _version_arg(text: str | None) -> int | str | None:
    """A version given on the command line: a number, or a tag or branch name."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text


def _spans(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _log(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path, read_only=True, branch=args.branch)
    entries = ds.log(all_branches=args.graph)
    if args.graph:
        for line in graph_lines(entries):
            print(line)
        return 0
    print(f"{'version':>7}  {'time':19}  {'message':<40}  samples")
    for entry in entries:
        counts = ", ".join(f"{k}={v}" for k, v in entry["samples"].items()) or "no tensors"
        refs = _refs_text(entry)
        print(f"{entry['version']:>7}  {_when(entry['time'])}  {entry['message']:<40}  {counts}{refs}")
    return 0


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


def _restore(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path, branch=args.branch)
    old = _version_arg(args.version)
    new = ds.restore(old)  # type: ignore[arg-type]  # a number or a name, never None here
    print(f"Restored {args.path} on branch {ds.branch!r} to the content of {old!r}: version {new}.")
    return 0


def _diff(args: argparse.Namespace) -> int:
    import json

    import lakecompute as lc

    ds = lc.load(args.path, read_only=True)
    result = ds.diff(_version_arg(args.a), _version_arg(args.b))
    print(json.dumps(result.to_dict(), indent=2) if args.json else str(result))
    return 0


def _ingest_options(p: argparse.ArgumentParser) -> None:
    """The options every ingest command takes."""
    p.add_argument(
        "--image-compression",
        choices=["auto", "png", "jpeg", "webp", "none"],
        default="auto",
        help="how images are stored (default: auto: the most common format, its files kept as they are)",
    )
    p.add_argument(
        "--num-workers",
        type=_non_negative,
        default=None,
        help="worker processes (default: one per CPU, at most 8; none for under 100 files)",
    )
    p.add_argument(
        "--skip-errors", action="store_true", help="skip unreadable files and list them, instead of failing"
    )
    p.add_argument("--overwrite", action="store_true", help="replace a dataset already at DEST")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--checkpoint-interval",
        type=_non_negative,
        default=0,
        help="commit every N images, so that a failed or killed ingest can be resumed (default: 0, none)",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue the checkpointed, unfinished ingest at DEST"
    )


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
            **extra,
        )
    for w in caught:
        print(f"lakecompute: warning: {w.message}", file=sys.stderr)
    return ds


def _ingest_coco(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = _run_ingest(args, lc.ingest_coco, args.images, args.annotations, args.dest, masks=not args.no_masks)
    objects = sum(len(b) for b in ds.boxes.numpy(aslist=True))
    print(f"Ingested {len(ds)} images with {objects} annotations into {args.dest}.")
    print(ds.summary_table())
    return 0


def _ingest_yolo(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = _run_ingest(args, lc.ingest_yolo, args.src, args.dest, split=args.split)
    objects = sum(len(b) for b in ds.boxes.numpy(aslist=True))
    print(f"Ingested {len(ds)} images with {objects} objects into {args.dest}.")
    print(ds.summary_table())
    return 0


def _ingest(args: argparse.Namespace) -> int:
    import lakecompute as lc

    compression = None if args.image_compression == "none" else args.image_compression
    plan = lc.ingest.plan_classification(args.src, compression)
    ds = _run_ingest(args, lc.ingest_classification, args.src, args.dest)
    names = ds.labels.info.class_names
    print(f"Ingested {len(ds)} images of {len(names)} classes ({', '.join(names)}) into {args.dest}.")
    print(plan.summary())
    print(ds.summary_table())
    return 0


def _compact(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path)
    version = ds.compact()
    print(f"Compacted {args.path}: version {version}.")
    return 0


def _folder_bytes(path: str) -> int | None:
    """Bytes of the files under a local folder; None for other locations (s3://, mem://)."""
    if not os.path.isdir(path):
        return None
    return sum(
        os.path.getsize(os.path.join(root, name)) for root, _dirs, files in os.walk(path) for name in files
    )


def _vacuum(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path)
    before = _folder_bytes(args.path)
    removed = ds.vacuum(grace_seconds=args.grace_seconds, keep_versions=args.keep_versions)
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


def _show(args: argparse.Namespace) -> int:
    import lakecompute as lc
    from lakecompute.viz import contact_sheet

    _check_image_file_name(args.output)
    ds = lc.load(args.path, read_only=True)
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


def _demo(args: argparse.Namespace) -> int:
    from lakecompute.demo import run_demo

    run_demo(args.output_dir, n=args.samples, num_workers=args.num_workers, progressbar=not args.no_progress)
    return 0


def _integer(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
    return value


def _positive(text: str) -> int:
    return _integer(text, 1)


def _non_negative(text: str) -> int:
    return _integer(text, 0)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line: what is wrong, then where to read the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}. Run '{self.prog} --help' for the usage.\n")


def _add_detection_commands(sub: Any) -> None:
    """The ``ingest-coco`` and ``ingest-yolo`` subcommands."""
    p = sub.add_parser(
        "ingest-coco",
        help="turn a COCO images folder and annotations JSON into a dataset",
        description="Read IMAGES/<file_name> and the COCO JSON ANNOTATIONS (boxes, categories, polygons, "
        "RLE, keypoints, ids) into a dataset at DEST, one sample per image; files are decoded and masks "
        "rasterised in parallel. See docs/detection.md.",
    )
    p.add_argument("images", help="the folder the images' file_name are relative to")
    p.add_argument("annotations", help="the COCO annotations JSON")
    p.add_argument("dest", help="where to create the dataset")
    p.add_argument(
        "--no-masks", action="store_true", help="do not rasterise masks (polygons and RLE are kept)"
    )
    _ingest_options(p)
    p.set_defaults(func=_ingest_coco)

    p = sub.add_parser(
        "ingest-yolo",
        help="turn a YOLO folder (data.yaml, images/, labels/) into a dataset",
        description="Read SRC/images/**, SRC/labels/** and SRC/data.yaml into a dataset at DEST with "
        "'images', 'file_name', 'boxes' (cxcywh, normalized), 'labels' (and 'polygons' for segmentation "
        "labels, 'keypoints' for poses: data.yaml with kpt_shape). See docs/detection.md.",
    )
    p.add_argument("src", help="the YOLO dataset folder")
    p.add_argument("dest", help="where to create the dataset")
    p.add_argument(
        "--split",
        default=None,
        help="one split to read: data.yaml's train/val/test, else images/SPLIT (default: all)",
    )
    _ingest_options(p)
    p.set_defaults(func=_ingest_yolo)


def _add_version_commands(sub: Any) -> None:
    """``restore`` and ``diff`` (``log`` and ``info`` take ``--branch`` too)."""
    p = sub.add_parser(
        "restore",
        help="undo: commit a new version equal to an older one",
        description="Commit, on the branch (default: main), a new version whose content equals VERSION "
        "(a number or a tag). Nothing is copied and the versions in between stay readable.",
    )
    p.add_argument("path", help="the dataset")
    p.add_argument("version", help="the version to restore: a number (see 'log') or a tag")
    p.add_argument("--branch", default=None, help="the branch to restore on (default: main)")
    p.set_defaults(func=_restore)

    p = sub.add_parser(
        "diff",
        help="what changed between two versions, branches or tags",
        description="Print, per tensor, the rows appended, replaced and removed from A to B (versions, "
        "branches or tags), tensors created, deleted and renamed, and info changes; read from the "
        "versions' manifests, no sample is read.",
    )
    p.add_argument("path", help="the dataset")
    p.add_argument("a", help="the older side: a version number, branch or tag")
    p.add_argument("b", help="the newer side: a version number, branch or tag")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.set_defaults(func=_diff)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lakecompute`` command."""
    from lakecompute import __version__

    parser = _Parser(
        prog="lakecompute",
        description="Parallel, safe and fast dataset transforms into zarr v3-backed datasets.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lakecompute {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser(
        "info",
        help="print a dataset's summary table",
        description="Print a dataset's tensors: htype, dtype, shape, compression and length.",
    )
    p.add_argument("path", help="the dataset (a folder, or s3://...)")
    p.add_argument(
        "--version", default=None, help="show an older committed version, by number or tag (see 'log')"
    )
    p.add_argument("--branch", default=None, help="show the newest version of this branch (default: main)")
    p.set_defaults(func=_info)

    p = sub.add_parser(
        "log",
        help="list a dataset's committed versions",
        description="List the committed versions of a branch (default: main), oldest first: number, time, "
        "message, samples per tensor, and the branches and tags at each. With --graph, every branch's "
        "history, newest first, a lane per branch, with each version's parents.",
    )
    p.add_argument("path", help="the dataset")
    p.add_argument("--branch", default=None, help="the branch whose history to list (default: main)")
    p.add_argument("--graph", action="store_true", help="every branch, as a graph of lanes and parents")
    p.set_defaults(func=_log)

    _add_version_commands(sub)

    p = sub.add_parser(
        "ingest-classification",
        help="turn a folder of class sub-folders of images into a dataset",
        description="Read SRC/<class>/**/*.{jpg,jpeg,png,webp,bmp} into a dataset at DEST with tensors "
        "'images' and 'labels' (class names from the sub-folder names, sorted); files are decoded in "
        "parallel.",
    )
    p.add_argument("src", help="the folder of class sub-folders")
    p.add_argument("dest", help="where to create the dataset")
    _ingest_options(p)
    p.set_defaults(func=_ingest)

    _add_detection_commands(sub)

    p = sub.add_parser(
        "compact",
        help="rewrite a dataset's storage for fast reading (content unchanged)",
        description="Rewrite every tensor into one contiguous run and commit it as a new version.",
    )
    p.add_argument("path", help="the dataset")
    p.set_defaults(func=_compact)

    p = sub.add_parser(
        "vacuum",
        help="delete stored data that no kept version needs",
        description="Delete what aborted writes left behind and, with --keep-versions, all but the newest "
        "versions and their data. Data younger than --grace-seconds and data a live writer's lease covers "
        "(on any machine) are left alone. Prints what was removed.",
    )
    p.add_argument("path", help="the dataset")
    p.add_argument(
        "--grace-seconds",
        type=_seconds,
        default=3600.0,
        help="leave data younger than this alone: a writer may still commit it (default: 3600)",
    )
    p.add_argument(
        "--keep-versions",
        type=_positive,
        default=None,
        help="keep only the N newest versions of each branch; older ones can no longer be loaded "
        "(default: keep all)",
    )
    p.set_defaults(func=_vacuum)

    p = sub.add_parser(
        "show",
        help="write a contact sheet of image samples with their labels",
        description="Write a PNG grid of image samples captioned with their index and class name. "
        "Without --indices the samples are spread over the dataset, an equal share for every class "
        "(the same ones every time).",
    )
    p.add_argument("path", help="the dataset")
    p.add_argument("--tensor", default="images", help="the image tensor (default: images)")
    p.add_argument(
        "--labels",
        default="auto",
        help="the class_label tensor for captions and for choosing samples per class, or 'none' "
        "(default: 'labels', or the dataset's first class_label tensor, if any)",
    )
    p.add_argument(
        "--rows", type=_positive, default=None, help="rows of the grid (default: 4, or what --indices needs)"
    )
    p.add_argument("--cols", type=_positive, default=8, help="columns of the grid (default: 8)")
    p.add_argument(
        "--indices", default="", help="comma-separated sample indices (default: rows*cols spread out)"
    )
    p.add_argument("-o", "--output", default="grid.png", help="the PNG file to write (default: grid.png)")
    p.add_argument(
        "--no-targets", action="store_true", help="do not draw boxes, masks and keypoints over the images"
    )
    p.set_defaults(func=_show)

    p = sub.add_parser(
        "demo",
        help="the guided tour: ingest, flip -> resize on workers, contact sheets",
        description="Write synthetic image files, ingest them, run flip_vertical -> resize(64, 64) on "
        "worker processes, and write before/after contact sheets.",
    )
    p.add_argument("--output-dir", default="demo-output", help="where everything goes (default: demo-output)")
    p.add_argument("--samples", type=_positive, default=600, help="how many images (default: 600)")
    p.add_argument("--num-workers", type=_non_negative, default=2, help="worker processes (default: 2)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=_demo)
    return parser


# Library messages name Python arguments; on the command line the same hint names the flag.
_SHELL_HINTS = [
    (
        r"Pass overwrite=True to replace it, or use lc\.load\(\) to open it\.",
        "Pass --overwrite to replace it.",
    ),
    (r"\boverwrite=True\b", "--overwrite"),
    (r"\bskip_errors=True\b", "--skip-errors"),
    (r"\bnum_workers=(\d+)", r"--num-workers \1"),
    (r"\bkeep_versions\b", "--keep-versions"),
    (r"\bgrace_seconds\b", "--grace-seconds"),
    (r"\blabel_tensor=None\b", "--labels none"),
    (r"\blabel_tensor=", "--labels "),
    (r"\btensor=", "--tensor "),
    (r"Got cols \* rows = (\d+); ask for fewer rows or cols\.", r"Got --cols x --rows = \1; ask for fewer."),
    (
        r" Create one with lc\.empty\(path\) or lc\.dataset\(path\)\.",
        " Check the path: a dataset is the folder that holds its zarr.json and versions/.",
    ),
    (r"reload the dataset with lc\.load\(\) and run the write again\.", "run the command again."),
    (
        r"Create it with ds\.checkout\('[^']*', create=True\)\.|ds\.branches and ds\.tags list them; "
        r"ds\.log\(\) lists the versions\.",
        "'lakecompute log PATH --graph' shows the branches, tags and versions.",
    ),
]


def shell_message(message: str) -> str:
    """``message`` with the Python argument names of its hints turned into the command's flags."""
    for pattern, replacement in _SHELL_HINTS:
        message = re.sub(pattern, replacement, message)
    return message


def _os_message(exc: OSError) -> str:
    """``No such file or directory: 'x/grid.png'`` rather than ``[Errno 2] ...``."""
    what = exc.strerror or str(exc)
    return f"{what}: {exc.filename!r}" if exc.filename else what


def _quiet_stdout() -> None:
    """After the reader of stdout went away: point stdout at /dev/null, so that the interpreter's
    final flush does not fail again with a second BrokenPipeError message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # io.UnsupportedOperation is a ValueError: stdout is no file here
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    from lakecompute.errors import LakeComputeError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe is noticed inside this try
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away
    except LakeComputeError as exc:
        print(f"lakecompute: error: {shell_message(str(exc))}", file=sys.stderr)
        return 1
    except OSError as exc:  # a file or folder named on the command line cannot be read or written
        print(f"lakecompute: error: {_os_message(exc)}.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lakecompute: interrupted; nothing uncommitted was kept.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
