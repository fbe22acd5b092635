"""The ``lakecompute`` command's subcommands as a table: one row per verb, its help and its arguments.

`build_parser` makes argparse's parser from `VERBS`; what each verb does is in
`lakecompute.cli._commands`. A new subcommand is a new row (and its function there).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from lakecompute.cli._cache import run_cache
from lakecompute.cli._commands import (
    run_compact,
    run_demo,
    run_diff,
    run_info,
    run_ingest_classification,
    run_ingest_coco,
    run_ingest_yolo,
    run_log,
    run_restore,
    run_show,
    run_vacuum,
    run_view,
)
from lakecompute.cli._select import run_count, run_filter

__all__ = ["INGEST_OPTIONS", "VERBS", "Arg", "Verb", "build_parser"]

_EPILOG = """examples:
  lakecompute demo
  lakecompute ingest-classification ./animals ./animals-lc
  lakecompute info ./animals-lc
  lakecompute filter ./animals-lc "labels == 'cat'" --save ./cats
  lakecompute count ./coco-lc categories
  lakecompute show ./animals-lc --tensor images --rows 2 --cols 6 -o grid.png
  lakecompute view ./animals-lc
  lakecompute log ./animals-lc --graph
  lakecompute diff ./animals-lc main experiment
  lakecompute restore ./animals-lc 3
  lakecompute vacuum ./animals-lc --keep-versions 3
  lakecompute cache info

Run 'lakecompute COMMAND --help' for a command's options."""


# -- values of options ------------------------------------------------------------------------------
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


def _port(text: str) -> int:
    value = _integer(text, 0)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


# -- the table --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a verb, as argparse's ``add_argument`` takes it."""

    names: tuple[str, ...]
    """A positional's name (``("path",)``) or an option's flags (``("-o", "--output")``)."""
    text: str
    """Its help text."""
    flag: bool = False
    """An option without a value (``store_true``)."""
    parse: Callable[[str], Any] | None = None
    """What turns the text into the value (argparse's ``type``); None: the text itself."""
    default: Any = None
    """An option's value when it is not given."""
    choices: tuple[str, ...] | None = None
    """The values it accepts, when they are a closed set."""

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add this argument to ``parser``."""
        if self.flag:
            parser.add_argument(*self.names, action="store_true", help=self.text)
            return
        settings: dict[str, Any] = {"help": self.text}
        if self.names[0].startswith("-"):
            settings["default"] = self.default
        if self.parse is not None:
            settings["type"] = self.parse
        if self.choices is not None:
            settings["choices"] = list(self.choices)
        parser.add_argument(*self.names, **settings)


@dataclass(frozen=True, slots=True)
class Verb:
    """One subcommand: its name, help, what it does, and its arguments."""

    name: str
    """The subcommand (``"ingest-coco"``)."""
    summary: str
    """Its line in ``lakecompute --help``."""
    description: str
    """What ``lakecompute NAME --help`` says it does."""
    run: Callable[[argparse.Namespace], int]
    """The function that does it (`lakecompute.cli._commands`), returning the exit code."""
    args: tuple[Arg, ...]
    """Its arguments, in the order the usage lists them."""


def _path(text: str = "the dataset") -> Arg:
    return Arg(("path",), text)


def _branch(text: str) -> Arg:
    return Arg(("--branch",), text)


_DEST = Arg(("dest",), "where to create the dataset")

#: The options every ingest command takes.
INGEST_OPTIONS: tuple[Arg, ...] = (
    Arg(
        ("--image-compression",),
        "how images are stored (default: auto: the most common format, its files kept as they are)",
        default="auto",
        choices=("auto", "png", "jpeg", "webp", "none"),
    ),
    Arg(
        ("--num-workers",),
        "worker processes (default: one per CPU, at most 8; none for under 100 files)",
        parse=_non_negative,
    ),
    Arg(("--skip-errors",), "skip unreadable files and list them, instead of failing", flag=True),
    Arg(("--overwrite",), "replace a dataset already at DEST", flag=True),
    Arg(("--no-progress",), "hide the progress bar", flag=True),
    Arg(
        ("--checkpoint-interval",),
        "commit every N images, so that a failed or killed ingest can be resumed (default: 0, none)",
        parse=_non_negative,
        default=0,
    ),
    Arg(("--resume",), "continue the checkpointed, unfinished ingest at DEST", flag=True),
    Arg(
        ("--convert-depth",),
        "store images of 16 bits per channel at 8 bits (each value's high byte) instead of refusing them",
        flag=True,
    ),
    Arg(("--exif-transpose",), "turn images upright as their EXIF orientation says", flag=True),
)

_VERSION_VERBS = (
    Verb(
        "info",
        "print a dataset's summary table",
        "Print a dataset's tensors: htype, dtype, shape, compression and length.",
        run_info,
        (
            _path("the dataset (a folder, or s3://...)"),
            Arg(("--version",), "show an older committed version, by number or tag (see 'log')"),
            _branch("show the newest version of this branch (default: main)"),
        ),
    ),
    Verb(
        "log",
        "list a dataset's committed versions",
        "List the committed versions of a branch (default: main), oldest first: number, time, message, "
        "samples per tensor, and the branches and tags at each. With --graph, every branch's history, "
        "newest first, a lane per branch, with each version's parents. With --evals, the versions an eval "
        "committed at its checkpoints fold into the line of the version that finished it.",
        run_log,
        (
            _path(),
            _branch("the branch whose history to list (default: main)"),
            Arg(("--graph",), "every branch, as a graph of lanes and parents", flag=True),
            Arg(("--evals",), "one line per eval: its checkpoint versions folded into it", flag=True),
        ),
    ),
    Verb(
        "restore",
        "undo: commit a new version equal to an older one",
        "Commit, on the branch (default: main), a new version whose content equals VERSION (a number or "
        "a tag). Nothing is copied and the versions in between stay readable.",
        run_restore,
        (
            _path(),
            Arg(("version",), "the version to restore: a number (see 'log') or a tag"),
            _branch("the branch to restore on (default: main)"),
        ),
    ),
    Verb(
        "diff",
        "what changed between two versions, branches or tags",
        "Print, per tensor, the rows appended, replaced and removed from A to B (versions, branches or "
        "tags), tensors created, deleted and renamed, and info changes; read from the versions' "
        "manifests, no sample is read.",
        run_diff,
        (
            _path(),
            Arg(("a",), "the older side: a version number, branch or tag"),
            Arg(("b",), "the newer side: a version number, branch or tag"),
            Arg(("--json",), "print the diff as JSON", flag=True),
        ),
    ),
)

_INGEST_VERBS = (
    Verb(
        "ingest-classification",
        "turn a folder of class sub-folders of images into a dataset",
        "Read SRC/<class>/**/*.{jpg,jpeg,png,webp,bmp,tif,tiff,ppm,pgm} into a dataset at DEST with "
        "tensors 'images' and 'labels' (class names from the sub-folder names, sorted); files are decoded "
        "in parallel.",
        run_ingest_classification,
        (Arg(("src",), "the folder of class sub-folders"), _DEST, *INGEST_OPTIONS),
    ),
    Verb(
        "ingest-coco",
        "turn a COCO images folder and annotations JSON into a dataset",
        "Read IMAGES/<file_name> and the COCO JSON ANNOTATIONS (boxes, categories, polygons, RLE, "
        "keypoints, ids) into a dataset at DEST, one sample per image; files are decoded and masks "
        "rasterised in parallel. See docs/detection.md.",
        run_ingest_coco,
        (
            Arg(("images",), "the folder the images' file_name are relative to"),
            Arg(("annotations",), "the COCO annotations JSON"),
            _DEST,
            Arg(("--no-masks",), "do not rasterise masks (polygons and RLE are kept)", flag=True),
            *INGEST_OPTIONS,
        ),
    ),
    Verb(
        "ingest-yolo",
        "turn a YOLO folder (data.yaml, images/, labels/) into a dataset",
        "Read SRC/images/**, SRC/labels/** and SRC/data.yaml into a dataset at DEST with 'images', "
        "'file_name', 'boxes' (cxcywh, normalized), 'labels' (and 'polygons' for segmentation labels, "
        "'keypoints' for poses: data.yaml with kpt_shape). See docs/detection.md.",
        run_ingest_yolo,
        (
            Arg(("src",), "the YOLO dataset folder"),
            _DEST,
            Arg(
                ("--split",),
                "one split to read: data.yaml's train/val/test, else images/SPLIT (default: all)",
            ),
            *INGEST_OPTIONS,
        ),
    ),
)

_STORAGE_VERBS = (
    Verb(
        "compact",
        "rewrite a dataset's storage for fast reading (content unchanged)",
        "Rewrite every tensor into one contiguous run and commit it as a new version.",
        run_compact,
        (_path(), Arg(("--no-progress",), "hide the progress bar", flag=True)),
    ),
    Verb(
        "vacuum",
        "delete stored data that no kept version needs",
        "Delete what aborted writes left behind and, with --keep-versions, all but the newest versions "
        "and their data. Data younger than --grace-seconds and data a live writer's lease covers (on any "
        "machine) are left alone. Prints what was removed.",
        run_vacuum,
        (
            _path(),
            Arg(
                ("--grace-seconds",),
                "leave data younger than this alone: a writer may still commit it (default: 3600)",
                parse=_seconds,
                default=3600.0,
            ),
            Arg(
                ("--keep-versions",),
                "keep only the N newest versions of each branch; older ones can no longer be loaded "
                "(default: keep all)",
                parse=_positive,
            ),
            Arg(("--no-progress",), "hide the progress bar", flag=True),
        ),
    ),
    Verb(
        "cache",
        "show or empty the local disk cache of datasets on object storage",
        "'info' prints what the cache folder holds, per dataset; 'clear' removes every cached chunk "
        "(readers holding one open finish reading it). The folder is --cache-dir, else the "
        "LAKECOMPUTE_CACHE_DIR environment variable. See docs/cluster.md.",
        run_cache,
        (
            Arg(("action",), "info or clear", choices=("info", "clear")),
            Arg(("--cache-dir",), "the cache folder (default: $LAKECOMPUTE_CACHE_DIR)"),
        ),
    ),
)

_LOOK_VERBS = (
    Verb(
        "show",
        "write a contact sheet of image samples with their labels",
        "Write a PNG grid of image samples captioned with their index and class name. Without --indices "
        "the samples are spread over the dataset, an equal share for every class (the same ones every "
        "time).",
        run_show,
        (
            _path(),
            Arg(("--tensor",), "the image tensor (default: images)", default="images"),
            Arg(
                ("--labels",),
                "the class_label tensor for captions and for choosing samples per class, or 'none' "
                "(default: 'labels', or the dataset's first class_label tensor, if any)",
                default="auto",
            ),
            Arg(("--rows",), "rows of the grid (default: 4, or what --indices needs)", parse=_positive),
            Arg(("--cols",), "columns of the grid (default: 8)", parse=_positive, default=8),
            Arg(("--indices",), "comma-separated sample indices (default: rows*cols spread out)", default=""),
            Arg(("-o", "--output"), "the PNG file to write (default: grid.png)", default="grid.png"),
            Arg(("--no-targets",), "do not draw boxes, masks and keypoints over the images", flag=True),
            Arg(("--where",), "show only the rows this expression keeps (see 'filter')"),
            Arg(
                ("--objects",), "draw only the objects this per-object expression keeps ('filter --objects')"
            ),
        ),
    ),
    Verb(
        "view",
        "browse a dataset, its versions and diffs in the browser (a local, read-only server)",
        "Serve a page on this machine that shows the dataset: a grid of thumbnails with boxes, masks, "
        "polygons and keypoints drawn over them, each label tensor's counts and an expression box, a "
        "page per sample, the versions graph, and the diff of two versions (docs/viewer.md). It binds "
        "127.0.0.1 (only this machine) unless --host says otherwise, answers GET only, and serves until "
        "Ctrl-C.",
        run_view,
        (
            _path("the dataset (a folder, or s3://...)"),
            Arg(("--version",), "show this version (a number or a tag) unless a page names another"),
            _branch("or the newest version of this branch (default: main)"),
            Arg(("--port",), "the port (default: 0, any free one)", parse=_port, default=0),
            Arg(
                ("--host",),
                "the address to bind (default: 127.0.0.1); another lets other machines read the dataset",
                default="127.0.0.1",
            ),
            Arg(("--expr",), "an expression the first page opens with (e.g. \"labels == 'cat'\")"),
            Arg(("--no-browser",), "do not open the browser; print the URL only", flag=True),
            Arg(("--verbose",), "log every request on stderr", flag=True),
        ),
    ),
    Verb(
        "demo",
        "the guided tour: ingest, flip -> resize on workers, contact sheets",
        "Write synthetic image files, ingest them, run flip_vertical -> resize(64, 64) on worker "
        "processes, and write before/after contact sheets.",
        run_demo,
        (
            Arg(("--output-dir",), "where everything goes (default: demo-output)", default="demo-output"),
            Arg(("--samples",), "how many images (default: 600)", parse=_positive, default=600),
            Arg(("--num-workers",), "worker processes (default: 2)", parse=_non_negative, default=2),
            Arg(("--no-progress",), "hide the progress bars", flag=True),
        ),
    ),
)

_SELECT_VERBS = (
    Verb(
        "filter",
        "the rows an expression keeps (and save them as a dataset)",
        "Print how many rows the expression keeps and which (read by column: only the tensors it names), "
        "e.g. \"labels == 'cat' and score > 0.5\"; with --save, write them as a new dataset at DEST, "
        "which records the expression and the version it was evaluated on. See docs/selecting.md.",
        run_filter,
        (
            _path(),
            Arg(("expr",), "the expression, e.g. \"labels == 'cat'\""),
            Arg(
                ("--objects",),
                "keep the objects the expression holds for (filter_labels), not rows",
                flag=True,
            ),
            Arg(("--save",), "write the selection as a new dataset at DEST"),
            Arg(("--overwrite",), "replace a dataset already at DEST", flag=True),
            Arg(("--version",), "evaluate on an older committed version, by number or tag"),
            Arg(("--no-progress",), "hide the progress bar of --save", flag=True),
        ),
    ),
    Verb(
        "count",
        "a table of how often each value of a tensor occurs",
        "Print each value of TENSOR (or an expression such as len(boxes)) with its count and share, most "
        "frequent first; per-object labels count every object, class labels every class name.",
        run_count,
        (
            _path(),
            Arg(("tensor",), "the tensor (or expression) to count"),
            Arg(("--where",), "count only the rows this expression keeps"),
            Arg(("--version",), "count an older committed version, by number or tag"),
        ),
    ),
)

#: Every subcommand, in the order ``lakecompute --help`` lists them.
VERBS: tuple[Verb, ...] = (*_VERSION_VERBS, *_INGEST_VERBS, *_STORAGE_VERBS, *_SELECT_VERBS, *_LOOK_VERBS)


# -- the parser -------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line: what is wrong, then where to read the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}. Run '{self.prog} --help' for the usage.\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lakecompute`` command: one subcommand per row of `VERBS`."""
    from lakecompute import __version__

    parser = _Parser(
        prog="lakecompute",
        description="Parallel, safe and fast dataset transforms into zarr v3-backed datasets.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lakecompute {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for verb in VERBS:
        p = sub.add_parser(verb.name, help=verb.summary, description=verb.description)
        for arg in verb.args:
            arg.add_to(p)
        p.set_defaults(func=verb.run)
    return parser
