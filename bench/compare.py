"""``python -m bench.compare BEFORE AFTER SUITE ... [--rounds N] [--runs N]``: two trees, one run.

Issue acceptance lines ask for rows "within noise of today's (before/after in one run)". This runs
``python -m bench SUITE --runs N --json ...`` in each tree (its own ``bench/`` and its own
``lakecompute``: ``PYTHONPATH`` and the working folder are the tree), alternating the trees in ABBA
order for ``--rounds`` rounds, so both see the same machine load. It prints, per row, the median of
each tree's number and of its ratio to its baseline (the floor or peer measured in the same process:
the comparison that holds best on a loaded machine), and after/before.

A tree is any checkout, e.g. ``git worktree add --detach /tmp/before <commit>``. Rows are matched by
name; a row only one tree has is listed with a dash.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

Rows = dict[str, dict[str, Any]]


def _run_tree(tree: Path, suites: list[str], runs: int, quick: bool) -> Rows:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [sys.executable, "-m", "bench", *suites, "--runs", str(runs), "--json", str(out)]
        if quick:
            cmd.append("--quick")
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run(cmd, cwd=tree, env=env, check=False, stdout=subprocess.DEVNULL)
        if not out.exists():
            raise SystemExit(f"{tree}: python -m bench wrote no results (run it there to see why)")
        results = json.loads(out.read_text())["results"]
    rows: Rows = {}
    for suite_name, suite_rows in results.items():
        if isinstance(suite_rows, list):
            for row in suite_rows:
                rows[f"{suite_name}: {row['name']}"] = row
    return rows


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:,.4g}"


def _change(before: float | None, after: float | None, lower_is_better: bool) -> str:
    """After relative to before, as "how many times better" (> 1: the after tree is better)."""
    if not before or not after:
        return "—"
    return f"{(before / after if lower_is_better else after / before):.2f}x"


def _report(names: list[str], per_tree: dict[str, list[Rows]]) -> None:
    before, after = per_tree["before"], per_tree["after"]
    keys = list(dict.fromkeys(k for rows in before + after for k in rows))
    print(f"\n{'row':<64} {'unit':>5} {'before':>10} {'after':>10} {'better':>7}  ratio-to-baseline b/a")
    for key in keys:
        sample = next(rows[key] for rows in before + after if key in rows)
        lower = sample["unit"] in ("ms", "s", "us", "MiB", "MB", "GiB", "GB", "bytes")
        b = _median([rows[key]["ours"] for rows in before if key in rows])
        a = _median([rows[key]["ours"] for rows in after if key in rows])
        br = _median([rows[key]["ratio"] for rows in before if key in rows])
        ar = _median([rows[key]["ratio"] for rows in after if key in rows])
        print(
            f"{key[:64]:<64} {sample['unit']:>5} {_fmt(b):>10} {_fmt(a):>10} {_change(b, a, lower):>7}  "
            f"{_fmt(br)} / {_fmt(ar)}"
        )
    print(f"\nbefore: {names[0]}\nafter:  {names[1]}\nbetter: > 1 means the after tree is faster/smaller.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (each tree runs once per round)")
    parser.add_argument("--runs", type=int, default=1, help="--runs passed to each python -m bench")
    parser.add_argument("--quick", action="store_true", help="--quick passed to each python -m bench")
    parser.add_argument("--json", metavar="PATH", help="also write every run's rows as JSON")
    opts = parser.parse_args(argv)
    trees = {"before": opts.before.resolve(), "after": opts.after.resolve()}
    per_tree: dict[str, list[Rows]] = {"before": [], "after": []}
    for round_no in range(opts.rounds):
        order = ["before", "after"] if round_no % 2 == 0 else ["after", "before"]
        for which in order:
            load = os.getloadavg()[0]
            print(f"round {round_no + 1}: {which} ({trees[which]}), load {load:.1f}", flush=True)
            per_tree[which].append(_run_tree(trees[which], opts.suites, opts.runs, opts.quick))
    _report([str(trees["before"]), str(trees["after"])], per_tree)
    if opts.json:
        Path(opts.json).write_text(json.dumps(per_tree, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
