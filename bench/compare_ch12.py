#!/usr/bin/env python3
"""Chapter 12's window kernel beside FlashInfer's, as a Markdown table, from the two CSV files.

    python3 bench/compare_ch12.py OURS.csv FLASHINFER.csv [--fi-md FLASHINFER.md] [--out OUT.md]

OURS.csv is bench_ch12 --csv, FLASHINFER.csv is bench_flashinfer.py --part window --csv: the
same columns (bench_common.cu's) and the same case names. Per case: our time, FlashInfer's
(its fastest kernel on the case, named), FlashInfer's time / ours (above 1: ours is faster),
and each run's % of its own read ceiling on the same bytes (the blocks the windows touch,
plus q and out; a case whose two byte counts differ is flagged). A dash: that run has no
time for the case; with --fi-md, the reason from the FlashInfer run's "Cases without a
FlashInfer time" section (for example sinks its version cannot run). Then the prefill
chunks' TFLOP/s (they are compute-bound; the FLOPs of the keys each row's window sees, from
bench_flashinfer.py's cases), and chapter 12's targets checked on these numbers (its page, "The
result on the H100"): the 32K / window-1024 decode against the 1K-context decode, against 90% of
the read ceiling and against FlashInfer. Nothing is typed in: every number comes
from the files. Prints to stdout without --out.
"""

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_flashinfer import window_cases  # noqa: E402  (the cases, one definition: their FLOPs)

DASH = "—"
WINDOW_CASE = "32/8/32 ctx 32768 window 1024"
SHORT_CASE = "32/8/32 ctx 1024 full"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def missing_reasons(md_path):
    """{case: reason} from the table under '## Cases without a FlashInfer time'."""
    out = {}
    if not md_path or not os.path.exists(md_path):
        return out
    inside = False
    with open(md_path) as f:
        for line in f:
            if line.startswith("## "):
                inside = line.strip() == "## Cases without a FlashInfer time"
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if inside and line.startswith("|") and len(cells) == 2 and cells[0] not in ("case", "---"):
                out[cells[0]] = cells[1]
    return out


FLOOR = "read kernel (floor)"  # bench_ch12's read kernel over a case's bytes: not a contender


def fastest(rows):
    """{case: the row with the least time} (one kernel per case in bench_ch12; FlashInfer
    may have two, fa2 and fa3, for the prefill chunk). The read kernel's floor rows are left
    out (floors())."""
    best = {}
    for r in rows:
        if r["kernel"] == FLOOR:
            continue
        if r["shape"] not in best or float(r["us"]) < float(best[r["shape"]]["us"]):
            best[r["shape"]] = r
    return best


def floors(rows):
    """{case: the read kernel's row over its bytes alone in a launch}."""
    return {r["shape"]: r for r in rows if r["kernel"] == FLOOR}


def fmt(x, spec):
    return DASH if x is None else format(x, spec)


def compute_bound(names, ours, fi):
    """The prefill chunks are bound by the tensor cores, not by the bytes: their rate in
    TFLOP/s, counting only the keys each row's window lets it see (WindowCase.flops)."""
    flops = {c.name: c.flops() for c in window_cases() if max(c.q_lens) > 1}
    rows = [n for n in names if n in flops]
    if not rows:
        return []
    out = [
        "The prefill chunks are compute-bound: % of the read ceiling is the wrong yardstick there. "
        "Their rate, counting the FLOPs of the keys each row's window lets it see (4 D Hq a key a row):",
        "",
        "| case | GFLOP | ours (TFLOP/s) | FlashInfer (TFLOP/s) |",
        "|---|---:|---:|---:|",
    ]
    def tflops(name, row):
        return flops[name] / (float(row["us"]) * 1e-6) / 1e12 if row else None

    for name in rows:
        o, f = tflops(name, ours.get(name)), tflops(name, fi.get(name))
        out.append(f"| {name} | {flops[name] / 1e9:.1f} | {fmt(o, '.0f')} | {fmt(f, '.0f')} |")
    return out + [""]


def build(ours_rows, fi_rows, reasons=None, ours_name="", fi_name=""):
    """The Markdown text (a list of lines)."""
    reasons = reasons or {}
    ours, fi = fastest(ours_rows), fastest(fi_rows)
    names = list(dict.fromkeys([r["shape"] for r in ours_rows] + [r["shape"] for r in fi_rows] + list(reasons)))
    out = [
        f"<!-- written by bench/compare_ch12.py from {ours_name} and {fi_name}: edit those, not this -->",
        "# Chapter 12's window kernel beside FlashInfer",
        "",
    ]
    if ours_rows:
        r = ours_rows[0]
        out.append(f"Ours: bench_ch12 on {r['device']}, read ceiling in its run {float(r['read_ceiling_tbps']):.2f} TB/s.")
    if fi_rows:
        r = fi_rows[0]
        out.append(
            f"FlashInfer: bench_flashinfer.py --part window on {r['device']}, read ceiling in its run "
            f"{float(r['read_ceiling_tbps']):.2f} TB/s; window_left = window - 1."
        )
    out += [
        "Bytes: the blocks the windows touch (K and V, every KV head) plus q and out, the same "
        "count in both runs. FlashInfer / ours: its time over ours (above 1, ours is faster).",
        "",
        "| case | ours (us) | FlashInfer (us) | FlashInfer kernel | FlashInfer / ours "
        "| ours % of read ceiling | FlashInfer % of read ceiling |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    flagged = []
    for name in names:
        o, f = ours.get(name), fi.get(name)
        us_o = float(o["us"]) if o else None
        us_f = float(f["us"]) if f else None
        ratio = us_f / us_o if us_o and us_f else None
        kernel = f["kernel"] if f else reasons.get(name, "no row")
        out.append(
            "| %s | %s | %s | %s | %s | %s | %s |"
            % (
                name,
                fmt(us_o, ".1f"),
                fmt(us_f, ".1f"),
                kernel,
                fmt(ratio, ".2f") + ("x" if ratio else ""),
                fmt(float(o["pct"]) if o else None, ".1f"),
                fmt(float(f["pct"]) if f else None, ".1f"),
            )
        )
        if o and f and abs(float(o["bytes"]) - float(f["bytes"])) > 1e-3 * float(o["bytes"]):
            flagged.append(f"{name} ({float(o['bytes']):.6g} against {float(f['bytes']):.6g})")
    out.append("")
    if flagged:
        out += ["The two runs count different bytes for: " + "; ".join(flagged) + ".", ""]
    out += compute_bound(names, ours, fi)
    w, s, fw = ours.get(WINDOW_CASE), ours.get(SHORT_CASE), fi.get(WINDOW_CASE)
    if w:
        checks = [f"- {WINDOW_CASE}: {float(w['pct']):.1f}% of the read ceiling (target 90%): "
                  f"{'met' if float(w['pct']) >= 90 else 'missed'}."]
        if s:
            checks.append(f"- Its time against the 1K-context decode ({SHORT_CASE}): "
                          f"{float(w['us']):.1f} us against {float(s['us']):.1f} us "
                          f"({float(w['us']) / float(s['us']):.2f}x).")
        if fw:
            r = float(fw["us"]) / float(w["us"])
            checks.append(f"- FlashInfer / ours on it: {r:.2f}x (target 1.0x or more): "
                          f"{'met' if r >= 1.0 else 'missed'}.")
        fl = floors(ours_rows).get(WINDOW_CASE)
        if fl:
            checks.append(f"- The read kernel over the same bytes alone in a launch, timed the same way: "
                          f"{float(fl['us']):.1f} us ({float(fl['pct']):.1f}% of the read ceiling); "
                          f"ours takes {float(w['us']) / float(fl['us']):.2f}x its time.")
        out += ["Chapter 12's targets on these numbers:", ""] + checks + [""]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ours", help="bench_ch12 --csv output")
    ap.add_argument("flashinfer", help="bench_flashinfer.py --part window --csv output")
    ap.add_argument("--fi-md", default="", help="bench_flashinfer.py --md output: reasons for cases without a time")
    ap.add_argument("--out", default="", help="write the Markdown here (default: stdout)")
    args = ap.parse_args(argv)
    ours_rows = read_csv(args.ours)
    fi_rows = read_csv(args.flashinfer) if os.path.exists(args.flashinfer) else []
    text = "\n".join(
        build(ours_rows, fi_rows, missing_reasons(args.fi_md), os.path.basename(args.ours),
              os.path.basename(args.flashinfer))
    ) + "\n"  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
