"""``python -m bench [SUITE ...] [--runs N] [--quick] [--json PATH]``: run benchmark suites.

Every module in this package is imported, so each suite registered with :func:`bench.suite`
(``bench/storage.py`` today; ``bench/transforms.py`` and others later) is available by name.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import sys
import time
import traceback

import bench
from bench import SUITES, Row


def _discover() -> None:
    for mod in pkgutil.iter_modules(bench.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"bench.{mod.name}")


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit.endswith("/s"):
        return f"{value:,.0f}/s" if value >= 100 else f"{value:,.1f}/s"
    if unit == "ms":
        return f"{value:,.3f} ms"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.4g} {unit}"


def print_rows(suite: str, rows: list[Row]) -> None:
    table = [("workload", "ours", "baseline", "ratio", "target", "", "baseline is", "note")]
    for r in rows:
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}x"
        status = "" if r.ok is None else ("PASS" if r.ok else "MISS")
        table.append(
            (r.name, _fmt(r.ours, r.unit), _fmt(r.baseline, r.unit), ratio, r.target or "—", status,
             r.baseline_name, r.note)
        )  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    right = {1, 2, 3}
    print(f"\n== {suite} ==")
    for j, row in enumerate(table):
        cells = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))
    print("ratio: how many times faster than the baseline (> 1 = faster), for rates and latencies alike.")


def main(argv: list[str] | None = None) -> int:
    _discover()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", help=f"suites to run (default: all of {sorted(SUITES)})")
    parser.add_argument("--runs", type=int, default=3, help="runs per fast workload; the median is reported")
    parser.add_argument(
        "--quick", action="store_true", help="smaller workloads (a smoke test, not for numbers)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    opts = parser.parse_args(argv)
    if opts.list:
        for name, s in sorted(SUITES.items()):
            print(f"{name}: {s.doc}")
        return 0
    names = opts.suites or sorted(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {unknown}; available: {sorted(SUITES)}")
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.2f}" + (" (quick mode: smaller workloads)" if opts.quick else "")
    )
    results: dict[str, object] = {}
    failed = False
    for name in names:
        t0 = time.perf_counter()
        try:
            rows = SUITES[name].run(opts)
        except Exception:
            traceback.print_exc()
            failed = True
            results[name] = {"error": traceback.format_exc()}
            continue
        print_rows(name, rows)
        print(f"({name}: {time.perf_counter() - t0:.0f} s)")
        results[name] = [r.to_json() for r in rows]
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"time": time.time(), "results": results}, fh, indent=2)
    # Missed targets are reported, not fatal: this machine's noise is ±30-50 %.
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
