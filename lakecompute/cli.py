"""The ``lakecompute`` command: look at datasets, ingest image folders, compact, and run the demo.

Exit codes: 0 on success, 1 when lakecompute reports an error (the message goes to stderr, with no
traceback), 2 for a usage error (unknown command or bad option; argparse's convention).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]

_EPILOG = """examples:
  lakecompute demo
  lakecompute ingest-classification ./animals ./animals-lc
  lakecompute info ./animals-lc
  lakecompute show ./animals-lc --tensor images --rows 2 --cols 6 -o grid.png
  lakecompute log ./animals-lc

Run 'lakecompute COMMAND --help' for a command's options."""


def _info(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path, read_only=True, version=args.version)
    print(ds.summary_table())
    return 0


def _log(args: argparse.Namespace) -> int:
    import time

    import lakecompute as lc

    ds = lc.load(args.path, read_only=True)
    print(f"{'version':>7}  {'time':19}  {'message':<40}  samples")
    for entry in ds.log():
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["time"]))
        counts = ", ".join(f"{k}={v}" for k, v in entry["samples"].items()) or "no tensors"
        print(f"{entry['version']:>7}  {when}  {entry['message']:<40}  {counts}")
    return 0


def _ingest(args: argparse.Namespace) -> int:
    import warnings

    import lakecompute as lc

    compression = None if args.image_compression == "none" else args.image_compression
    plan = lc.ingest.plan_classification(args.src, compression)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", lc.LakeComputeWarning)
        ds = lc.ingest_classification(
            args.src,
            args.dest,
            image_compression=compression,
            progressbar=not args.no_progress,
            num_workers=args.num_workers,
            skip_errors=args.skip_errors,
            overwrite=args.overwrite,
        )
    for w in caught:
        print(f"lakecompute: warning: {w.message}", file=sys.stderr)
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


def _show(args: argparse.Namespace) -> int:
    import lakecompute as lc
    from lakecompute.viz import contact_sheet

    ds = lc.load(args.path, read_only=True)
    indices = None
    if args.indices:
        try:
            indices = [int(x) for x in args.indices.split(",") if x.strip()]
        except ValueError:
            raise lc.InvalidArgumentError(
                f"--indices takes comma-separated integers such as 0,5,9. Got {args.indices!r}."
            ) from None
    label_tensor = None if args.labels == "none" else args.labels
    sheet = contact_sheet(
        ds, tensor=args.tensor, label_tensor=label_tensor, indices=indices, cols=args.cols, rows=args.rows
    )
    sheet.save(args.output)
    print(f"Wrote {args.output} ({sheet.width}x{sheet.height}).")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from lakecompute.demo import run_demo

    run_demo(args.output_dir, n=args.samples, num_workers=args.num_workers, progressbar=not args.no_progress)
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lakecompute`` command."""
    from lakecompute import __version__

    parser = argparse.ArgumentParser(
        prog="lakecompute",
        description="Parallel, safe and fast dataset transforms into zarr v3-backed datasets.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lakecompute {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "info",
        help="print a dataset's summary table",
        description="Print a dataset's tensors: htype, dtype, shape, compression and length.",
    )
    p.add_argument("path", help="the dataset (a folder, or s3://...)")
    p.add_argument("--version", type=int, default=None, help="show an older committed version")
    p.set_defaults(func=_info)

    p = sub.add_parser(
        "log",
        help="list a dataset's committed versions",
        description="List committed versions, oldest first: number, time, message, samples per tensor.",
    )
    p.add_argument("path", help="the dataset")
    p.set_defaults(func=_log)

    p = sub.add_parser(
        "ingest-classification",
        help="turn a folder of class sub-folders of images into a dataset",
        description="Read SRC/<class>/**/*.{jpg,jpeg,png,webp,bmp} into a dataset at DEST with tensors "
        "'images' and 'labels' (class names from the sub-folder names, sorted); files are decoded in "
        "parallel.",
    )
    p.add_argument("src", help="the folder of class sub-folders")
    p.add_argument("dest", help="where to create the dataset")
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
    p.set_defaults(func=_ingest)

    p = sub.add_parser(
        "compact",
        help="rewrite a dataset's storage for fast reading (content unchanged)",
        description="Rewrite every tensor into one contiguous run and commit it as a new version.",
    )
    p.add_argument("path", help="the dataset")
    p.set_defaults(func=_compact)

    p = sub.add_parser(
        "show",
        help="write a contact sheet of image samples with their labels",
        description="Write a PNG grid of the first (or chosen) image samples, captioned with their "
        "index and class name.",
    )
    p.add_argument("path", help="the dataset")
    p.add_argument("--tensor", default="images", help="the image tensor (default: images)")
    p.add_argument(
        "--labels", default="labels", help="the class_label tensor for captions, or 'none' (default: labels)"
    )
    p.add_argument(
        "--rows", type=_positive, default=None, help="rows of the grid (default: 4, or what --indices needs)"
    )
    p.add_argument("--cols", type=_positive, default=8, help="columns of the grid (default: 8)")
    p.add_argument(
        "--indices", default="", help="comma-separated sample indices (default: the first rows*cols)"
    )
    p.add_argument("-o", "--output", default="grid.png", help="the PNG file to write (default: grid.png)")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    from lakecompute.errors import LakeComputeError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except LakeComputeError as exc:
        print(f"lakecompute: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lakecompute: interrupted; nothing uncommitted was kept.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
