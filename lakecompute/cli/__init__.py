"""The ``lakecompute`` command: look at datasets and their history, ingest image folders, restore, compact,
vacuum, and run the demo.

A user's mistake never ends in a traceback: it prints one line, ``lakecompute: error: ...``, on stderr.
Exit codes: 0 on success, 1 when lakecompute reports an error (a missing dataset, a file it cannot write,
...), 2 for a usage error (an unknown command or a bad option), 130 on Ctrl-C, 141 when the reader of
the output went away (``lakecompute log DS | head -1``: the rest is dropped quietly, like any Unix tool).

The subcommands are a table (`lakecompute.cli._verbs`: one row per verb, its help and arguments); what
each does is in `lakecompute.cli._commands`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from lakecompute.cli._verbs import build_parser

__all__ = ["build_parser", "main", "shell_message"]


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
