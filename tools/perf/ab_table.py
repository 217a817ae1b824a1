#!/usr/bin/env python3
"""A/B table of two builds' benchmark CSVs from one device call (bench_ch10, bench_ch12, ...).

    python3 tools/perf/ab_table.py --a A1.csv A2.csv --b B1.csv B2.csv [--kernel ch10] [--geomean-title T]

Each CSV has the columns kernel, shape (or case) and us (the benchmarks' --csv output); the runs of one
build are its rounds of the same call (A B A B). A row per (kernel, shape) that every run has:
each run's time, and B / A = mean of B's times over mean of A's (below 1: B is faster). Then the
geometric mean of B / A over the rows, and each run's read ceiling where its CSV records one.
The table is what a results file shows; the CSVs sit beside it, so it can be written again.
"""
import argparse
import csv
import math
import sys


def load(path):
    rows, ceiling = {}, None
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows[(r["kernel"], r.get("shape") or r["case"])] = float(r["us"])  # bench_ch11 says case
            if r.get("read_ceiling_tbps"):
                ceiling = float(r["read_ceiling_tbps"])
    return rows, ceiling


def table(a_paths, b_paths, kernel=None):
    """The markdown lines of the A/B table (see the module's docstring)."""
    a_runs = [load(p) for p in a_paths]
    b_runs = [load(p) for p in b_paths]
    keys = [k for k in a_runs[0][0] if all(k in run for run, _ in a_runs + b_runs)]
    if kernel:
        keys = [k for k in keys if k[0].startswith(kernel)]
    if not keys:
        raise SystemExit("ab_table: no (kernel, shape) row is in every run")
    fmt = lambda ts: ", ".join(f"{t:,.1f}" for t in ts)
    lines = ["| kernel | case | A (us) | B (us) | B / A |", "|---|---|---|---|---:|"]
    ratios = []
    for k in keys:
        a = [run[k] for run, _ in a_runs]
        b = [run[k] for run, _ in b_runs]
        ratio = (sum(b) / len(b)) / (sum(a) / len(a))
        ratios.append(ratio)
        lines.append(f"| {k[0]} | {k[1]} | {fmt(a)} | {fmt(b)} | {ratio:.3f} |")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    lines += ["", f"Geometric mean of B / A over these {len(ratios)} rows: {geo:.3f}."]
    ceilings = [c for _, c in a_runs + b_runs]
    if all(c is not None for c in ceilings):
        names = [f"A{i + 1}" for i in range(len(a_runs))] + [f"B{i + 1}" for i in range(len(b_runs))]
        lines.append("Read ceiling in each run (TB/s): " +
                     ", ".join(f"{n} {c:.2f}" for n, c in zip(names, ceilings)) + ".")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", nargs="+", required=True, help="build A's CSVs, one a round")
    ap.add_argument("--b", nargs="+", required=True, help="build B's CSVs, one a round")
    ap.add_argument("--kernel", help="only the rows whose kernel starts with this")
    args = ap.parse_args(argv)
    print("\n".join(table(args.a, args.b, args.kernel)))


if __name__ == "__main__":
    sys.exit(main())
