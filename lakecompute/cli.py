"""The ``lakecompute`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _info(args: argparse.Namespace) -> int:
    import lakecompute as lc

    ds = lc.load(args.path, read_only=True, version=args.version)
    print(ds.summary_table())
    return 0


def _log(args: argparse.Namespace) -> int:
    import time

    import lakecompute as lc

    ds = lc.load(args.path, read_only=True)
    for entry in ds.log():
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["time"]))
        counts = ", ".join(f"{k}={v}" for k, v in entry["samples"].items()) or "no tensors"
        print(f"{entry['version']:>5}  {when}  {entry['message']:<40}  {counts}")
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
        indices = [int(x) for x in args.indices.split(",") if x.strip()]
    sheet = contact_sheet(ds, tensor=args.tensor, label_tensor=args.labels, indices=indices, cols=args.cols, rows=args.rows)
    sheet.save(args.output)
    print(f"Wrote {args.output} ({sheet.width}x{sheet.height}).")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from lakecompute.demo import run_demo

    run_demo(args.output_dir, n=args.samples, num_workers=args.num_workers, progressbar=not args.no_progress)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakecompute", description="Parallel, safe and fast dataset transforms into zarr v3-backed datasets."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="print a dataset's summary table")
    p.add_argument("path")
    p.add_argument("--version", type=int, default=None, help="an older committed version")
    p.set_defaults(func=_info)

    p = sub.add_parser("log", help="list a dataset's committed versions")
    p.add_argument("path")
    p.set_defaults(func=_log)

    p = sub.add_parser("compact", help="rewrite a dataset's storage for fast reading (content unchanged)")
    p.add_argument("path")
    p.set_defaults(func=_compact)

    p = sub.add_parser("show", help="write a contact sheet of image samples with their labels")
    p.add_argument("path")
    p.add_argument("--tensor", default="images")
    p.add_argument("--labels", default="labels", help="class_label tensor for captions")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--cols", type=int, default=8)
    p.add_argument("--indices", default="", help="comma-separated sample indices")
    p.add_argument("-o", "--output", default="grid.png")
    p.set_defaults(func=_show)

    p = sub.add_parser("demo", help="build a small dataset, run the flip+resize pipeline, write contact sheets")
    p.add_argument("--output-dir", default="demo-output")
    p.add_argument("--samples", type=int, default=600)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    from lakecompute.errors import LakeComputeError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except LakeComputeError as exc:
        print(f"lakecompute: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
